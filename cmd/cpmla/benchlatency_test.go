package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/model"
)

// runBenchLatencyCLI runs `cpmla bench latency` with args through the root
// command, as a user would.
func runBenchLatencyCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"bench", "latency"}, args...))
	err := root.Execute()
	if err != nil {
		return out.String() + errOut.String(), err
	}
	return out.String(), nil
}

// runBenchLatencyJSON runs `cpmla bench latency` with args and
// --output-json, and returns its output and the result the file holds.
func runBenchLatencyJSON(t *testing.T, args ...string) (string, latencyResult) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "latency.json")
	stdout, err := runBenchLatencyCLI(t, append(args, "--output-json", file)...)
	if err != nil {
		t.Fatalf("bench latency: %v\n%s", err, stdout)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var r latencyResult
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return stdout, r
}

// TestBenchLatency: --output-json holds vLLM's keys (avg_latency,
// std_latency, latencies, percentiles) and the engine's measurements, and
// they agree with each other: one latency per iteration, percentiles of
// those latencies, the steps of a batch (one prefill step, output-len − 1
// decode steps), the weights a decode step reads, roofline terms of the
// probes measured in the same run.
func TestBenchLatency(t *testing.T) {
	dir := tinyCheckpoint(t)
	file := filepath.Join(t.TempDir(), "latency.json")
	const batch, out, iters = 3, 5, 4
	stdout, err := runBenchLatencyCLI(t, "--model", dir, "--input-len", "12", "--output-len", "5", "--batch-size", "3",
		"--num-iters-warmup", "1", "--num-iters", "4", "--memory-limit", "512MiB", "--threads-per-rank", "1", "--output-json", file)
	if err != nil {
		t.Fatalf("bench latency: %v\n%s", err, stdout)
	}
	for _, line := range []string{"Avg latency: ", "Std latency: ", "10% percentile latency: ", "99% percentile latency: ", "time to first token:", "decode:"} {
		if !strings.Contains(stdout, line) {
			t.Errorf("output lacks %q:\n%s", line, stdout)
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"avg_latency", "std_latency", "latencies", "percentiles", "mean_ttft_s", "mean_tpot_s", "prefill_tokens_per_s",
		"decode_tokens_per_s", "decode_roofline_fraction", "prefill_fma_fraction", "fma_peak_gflops", "read_bandwidth_gbps"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("%s has no %q", file, k)
		}
	}
	var r latencyResult
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Latencies) != iters {
		t.Fatalf("%d latencies, want %d", len(r.Latencies), iters)
	}
	approx := cmpopts.EquateApprox(1e-9, 0)
	if d := cmp.Diff(mean(r.Latencies), r.AvgLatency, approx); d != "" {
		t.Errorf("avg_latency is not the mean of latencies (-want +got):\n%s", d)
	}
	pct := map[string]float64{}
	for _, p := range []string{"10", "25", "50", "75", "90", "99"} {
		pct[p] = percentile(r.Latencies, map[string]float64{"10": 10, "25": 25, "50": 50, "75": 75, "90": 90, "99": 99}[p])
	}
	if d := cmp.Diff(pct, r.Percentiles, approx); d != "" {
		t.Errorf("percentiles (-want +got):\n%s", d)
	}
	if r.PrefillSteps != 1 || r.DecodeSteps != out-1 {
		t.Errorf("%d prefill and %d decode steps per iteration, want 1 and %d", r.PrefillSteps, r.DecodeSteps, out-1)
	}
	switch {
	case !(r.MeanTTFT > 0 && r.MeanTTFT < r.AvgLatency):
		t.Errorf("time to first token %v, latency %v", r.MeanTTFT, r.AvgLatency)
	case !(r.MeanTPOT > 0 && r.MeanTPOT*(out-1) < r.AvgLatency):
		t.Errorf("time per output token %v over %d tokens, latency %v", r.MeanTPOT, out-1, r.AvgLatency)
	case !(r.DecodeForwardS > 0 && r.DecodeForwardS <= r.DecodeStepS):
		t.Errorf("decode forward %v s of a %v s step", r.DecodeForwardS, r.DecodeStepS)
	case r.DecodeCollectiveS != 0:
		t.Errorf("one rank spent %v s per decode step in collectives", r.DecodeCollectiveS)
	case r.FMAPeakGFLOPS <= 0 || r.ReadBandwidthGBPS <= 0:
		t.Errorf("probes: %v GFLOP/s, %v GB/s", r.FMAPeakGFLOPS, r.ReadBandwidthGBPS)
	case !(r.DecodeRooflineFraction >= max(r.DecodeMemoryFraction, r.DecodeComputeFraction)) || r.DecodeMemoryFraction <= 0 || r.DecodeComputeFraction <= 0:
		t.Errorf("decode roofline %v, memory %v, compute %v", r.DecodeRooflineFraction, r.DecodeMemoryFraction, r.DecodeComputeFraction)
	case !(r.PrefillFMAFraction > 0) || r.PrefillFLOPs <= 0:
		t.Errorf("prefill FMA fraction %v of %v FLOPs", r.PrefillFMAFraction, r.PrefillFLOPs)
	}
	// Without fp8 weights the roofline at the fp8 rates is the roofline,
	// and the text output has no line for it.
	if d := cmp.Diff(r.DecodeRooflineFraction, r.DecodeFP8RooflineFraction, approx); d != "" {
		t.Errorf("bf16 weights: decode_fp8_roofline_fraction is not decode_roofline_fraction (-want +got):\n%s", d)
	}
	if strings.Contains(stdout, "fp8 weights") {
		t.Errorf("bf16 weights: the output reports fp8 rates:\n%s", stdout)
	}
	// The tiny checkpoint's decode step of three sequences reads its bf16
	// Linear weights once: every layer's and the LM head (4096 × 128).
	if r.DecodeWeightBytes < 2*4096*128 || r.DecodeKVBytes <= 0 {
		t.Errorf("decode step reads %v weight bytes and %v KV bytes", r.DecodeWeightBytes, r.DecodeKVBytes)
	}
	// Decode FLOPs: three rows through every weight, at least 2·3·weights/2.
	if r.DecodeFLOPs < 3*r.DecodeWeightBytes {
		t.Errorf("decode step of %d rows: %v FLOPs for %v weight bytes", batch, r.DecodeFLOPs, r.DecodeWeightBytes)
	}
}

// TestBenchLatencyFP8: with fp8 weights the decode steps also report
// their fraction of the roofline at the cores' fp8 product rates, which
// counts each fp8 weight's product at least at those rates, so its
// roofline time is no shorter and its fraction no lower than the plain one.
func TestBenchLatencyFP8(t *testing.T) {
	cfg, err := config.Load(config.DefaultPreset)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NumLayers, cfg.NumHeads, cfg.IntermediateSize, cfg.VocabSize, cfg.HiddenSize = 1, 4, 256, 4096, 128
	if cfg, err = model.WithWeightDType(cfg, model.WeightFP8); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny-fp8")
	if err := model.WriteCheckpoint(dir, cfg, model.RandomTensors(cfg, 3), 1<<30); err != nil {
		t.Fatal(err)
	}
	stdout, r := runBenchLatencyJSON(t, "--model", dir, "--input-len", "12", "--output-len", "5", "--batch-size", "3",
		"--num-iters-warmup", "0", "--num-iters", "2", "--memory-limit", "512MiB", "--threads-per-rank", "1")
	if !strings.Contains(stdout, "decode, fp8 weights:") {
		t.Errorf("fp8 weights: the output does not report the roofline at the fp8 rates:\n%s", stdout)
	}
	if !(r.DecodeRooflineFraction > 0 && r.DecodeFP8RooflineFraction >= r.DecodeRooflineFraction*(1-1e-9)) {
		t.Errorf("fp8 weights: decode roofline fraction %v, at the fp8 rates %v", r.DecodeRooflineFraction, r.DecodeFP8RooflineFraction)
	}
	// Each iteration's roofline at the fp8 rates is the larger of the
	// memory term and its compute term, and the median of those compute
	// terms is above the plain compute term: every code's decoding and
	// multiply take longer than its FMAs alone (without a vector fp8 path
	// the CPU has no rates, and the two are the same).
	if kernels.FP8ProductLoop(1, 1000) > 0 && !(r.DecodeFP8ComputeFraction > 1.01*r.DecodeComputeFraction) {
		t.Errorf("fp8 weights: compute fraction at the fp8 rates %v, not 1 %% above the plain %v", r.DecodeFP8ComputeFraction, r.DecodeComputeFraction)
	}
	if r.DecodeFP8RooflineFraction < max(r.DecodeMemoryFraction, r.DecodeFP8ComputeFraction)*(1-1e-9) {
		t.Errorf("fp8 weights: roofline fraction at the fp8 rates %v below its terms %v and %v", r.DecodeFP8RooflineFraction, r.DecodeMemoryFraction, r.DecodeFP8ComputeFraction)
	}
}

// TestBenchLatencyCollectives: with TP and DCP ranks in the process a
// decode step spends part of its forward pass inside the ranks'
// collectives, and decode_collective_s says how much.
func TestBenchLatencyCollectives(t *testing.T) {
	dir := tinyCheckpoint(t)
	stdout, r := runBenchLatencyJSON(t, "--model", dir, "--input-len", "12", "--output-len", "5", "--batch-size", "2",
		"--num-iters-warmup", "0", "--num-iters", "2", "--memory-limit", "512MiB", "--threads-per-rank", "1",
		"--tensor-parallel-size", "2", "--decode-context-parallel-size", "2")
	if !strings.Contains(stdout, "collectives ") {
		t.Errorf("output does not state the collectives' time:\n%s", stdout)
	}
	if !(r.DecodeCollectiveS > 0 && r.DecodeCollectiveS < r.DecodeForwardS) {
		t.Errorf("collectives %v s of a %v s decode forward pass", r.DecodeCollectiveS, r.DecodeForwardS)
	}
	// The ranks' roofline terms add up as their costs do: with bf16
	// weights the roofline at the fp8 rates is the roofline.
	if d := cmp.Diff(r.DecodeRooflineFraction, r.DecodeFP8RooflineFraction, cmpopts.EquateApprox(1e-9, 0)); d != "" {
		t.Errorf("four ranks: decode_fp8_roofline_fraction is not decode_roofline_fraction (-want +got):\n%s", d)
	}
}

// TestBenchLatencyRefusals: what bench latency cannot do is refused by name
// before anything loads.
func TestBenchLatencyRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--use-beam-search"}, "--use-beam-search: beam search is not implemented"},
		{[]string{"--n", "0"}, "--n must be in [1, 1024]"},
		{[]string{"--num-iters", "0"}, "--num-iters must be in [1, 1000]"},
		{[]string{"--num-iters-warmup", "-1"}, "--num-iters-warmup must be in [0, 1000]"},
		{[]string{"--input-len", "4000", "--output-len", "200"}, "exceeds the model's max_position_embeddings 4096"},
		{[]string{"--input-len", "100", "--output-len", "100", "--max-model-len", "128"}, "raise --max-model-len to at least 200"},
		{[]string{"--batch-size", "20", "--max-num-seqs", "16"}, "raise --max-num-seqs to 20"},
	} {
		out, err := runBenchLatencyCLI(t, append([]string{"--model", "glm5-mini", "--memory-limit", "1GiB"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench latency %v: error %v, want one containing %q\n%s", tc.args, err, tc.want, out)
		}
	}
}
