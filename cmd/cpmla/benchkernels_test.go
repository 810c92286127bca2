package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// runBenchKernelsCLI runs `cpmla bench kernels` with args through the root
// command, as a user would.
func runBenchKernelsCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"bench", "kernels"}, args...))
	err := root.Execute()
	return out.String(), err
}

// TestBenchKernelsJSON: the JSON form lists one object per selected kernel
// and shape with every documented field, and its derived numbers are
// consistent with the measured ones (one round, so medians are the values).
func TestBenchKernelsJSON(t *testing.T) {
	out, err := runBenchKernelsCLI(t, "--json", "--rounds", "1", "--min-time", "1ms", "--only", "^gemm_bf16$")
	if err != nil {
		t.Fatalf("bench kernels: %v\n%s", err, out)
	}
	var raw []map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	var got []kernelResult
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	var shapes []string
	for i, r := range got {
		shapes = append(shapes, r.Shape)
		for _, key := range []string{"kernel", "shape", "threads", "seconds_per_call", "gflops", "gbps", "peak_fraction", "fma_peak_gflops", "read_bandwidth_gbps", "roofline_fraction"} {
			if _, ok := raw[i][key]; !ok {
				t.Errorf("result %d has no %q field", i, key)
			}
		}
		if r.Kernel != "gemm_bf16" || r.Threads != 1 || r.Bound != "fma_peak" || r.SecondsPerCall <= 0 || r.FMAPeakGFLOPS <= 0 {
			t.Errorf("result %d: %+v", i, r)
		}
		// With one round the fraction is exactly the rate over the peak.
		if d := cmp.Diff(r.GFLOPS/r.FMAPeakGFLOPS, r.PeakFraction, cmpopts.EquateApprox(1e-9, 0)); d != "" {
			t.Errorf("result %d: peak_fraction is not gflops/fma_peak_gflops (-want +got):\n%s", i, d)
		}
		roof := max(r.GFLOPS/r.FMAPeakGFLOPS, r.GBPS/r.ReadBandwidthGBPS)
		if d := cmp.Diff(roof, r.RooflineFraction, cmpopts.EquateApprox(1e-9, 0)); d != "" {
			t.Errorf("result %d: roofline_fraction is not the larger of the two peak fractions (-want +got):\n%s", i, d)
		}
	}
	want := []string{"rows=128 out=2048 in=6144", "rows=16 out=2048 in=6144", "rows=128 out=576 in=7168", "rows=8 out=2048 in=6144", "rows=64 out=2048 in=6144", "rows=512 out=2048 in=6144"}
	if d := cmp.Diff(want, shapes); d != "" {
		t.Errorf("shapes (-want +got):\n%s", d)
	}
}

// TestBenchKernelsListsTheDecodeCase: the headline case exists with the
// documented shape even when not selected for running.
func TestBenchKernelsListsTheDecodeCase(t *testing.T) {
	var found bool
	for _, c := range kernelBenchCases() {
		if c.kernel == "sparse_mla_decode" && c.shape == "rows=1 heads=64 topk=2048 kv=bf16" {
			found = true
		}
	}
	if !found {
		t.Error("no sparse_mla_decode case at 64 heads, top-k 2048, one row, bf16 KV")
	}
}

func TestBenchKernelsRefusals(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--threads", "0"}, "use --threads 1"},
		{[]string{"--rounds", "0"}, "use --rounds 5"},
		{[]string{"--min-time", "0s"}, "use --min-time 100ms"},
		{[]string{"--only", "("}, "--only"},
		{[]string{"--impl", "sse9", "--only", "^$"}, "auto, ref, avx2, avx512"},
	}
	for _, tc := range tests {
		out, err := runBenchKernelsCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench kernels %v: err %v (output %q), want an error mentioning %q", tc.args, err, out, tc.want)
		}
	}
}

// TestBenchKernelsFP8Cases: the fp8 GEMV and GEMM cases exist next to f32
// (and bf16) at every shape, and their setup builds weights that run.
func TestBenchKernelsFP8Cases(t *testing.T) {
	shapes := map[string][]string{}
	for _, c := range kernelBenchCases() {
		shapes[c.kernel] = append(shapes[c.kernel], c.shape)
	}
	for _, group := range []string{"gemv", "gemm"} {
		if d := cmp.Diff(shapes[group+"_f32"], shapes[group+"_fp8"]); d != "" || len(shapes[group+"_fp8"]) == 0 {
			t.Errorf("%s_fp8 shapes differ from %s_f32 (-f32 +fp8):\n%s", group, group, d)
		}
	}
	if !slices.Contains(shapes["gemv_fp8"], "rows=1 out=6144 in=16384 o_proj") {
		t.Errorf("no fp8 GEMV at GLM-5's o_proj: %q", shapes["gemv_fp8"])
	}
	// A small fp8 GEMV and GEMM built the way the cases build them run.
	for _, rows := range []int{1, 9} {
		call, err := setupGEMM(rows, 136, 300, "fp8")
		if err != nil {
			t.Fatalf("fp8 setup, %d rows: %v", rows, err)
		}
		call()
	}
	if _, err := setupGEMM(1, 8, 8, "fp4"); err == nil || !strings.Contains(err.Error(), `unknown weight dtype "fp4"`) {
		t.Errorf("setupGEMM with an unknown dtype: %v", err)
	}
}
