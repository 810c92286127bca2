package main

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseLine(t *testing.T) {
	decode := caseKey{model: "glm5-dense-350m", weights: "bf16", threads: 2, ctx: 8192, batch: 8}
	tests := []struct {
		name    string
		line    string
		want    result
		ok      bool
		wantErr string
	}{
		{
			name: "decode with GOMAXPROCS suffix",
			line: "BenchmarkStep/glm5-dense-350m/bf16/threads=2/decode/ctx=8192/batch=8-2   20  46604054 ns/op  0.5079 roofline  171.9 tokens/s",
			want: result{key: decode, metrics: map[string]float64{"ns/op": 46604054, "roofline": 0.5079, "tokens/s": 171.9}},
			ok:   true,
		},
		{
			name: "decode without suffix",
			line: "BenchmarkStep/glm5-dense-350m/bf16/threads=2/decode/ctx=8192/batch=8 20 1 ns/op",
			want: result{key: decode, metrics: map[string]float64{"ns/op": 1}},
			ok:   true,
		},
		{
			name: "prefill",
			line: "BenchmarkStep/glm5-moe-shape/fp8/threads=1/prefill/len=4096-2 1 9 ns/op 0.61 of-fma",
			want: result{key: caseKey{model: "glm5-moe-shape", weights: "fp8", threads: 1, prefill: true, len: 4096}, metrics: map[string]float64{"ns/op": 9, "of-fma": 0.61}},
			ok:   true,
		},
		{name: "other benchmark", line: "BenchmarkStepProfile/glm5-shape/bf16/threads=1/batch=8-2 20 1 ns/op"},
		{name: "header", line: "goos: linux"},
		{name: "bare name of a started case", line: "BenchmarkStep/glm5-shape/bf16/threads=1/decode/ctx=512/batch=8"},
		{name: "empty", line: ""},
		{name: "odd pairs", line: "BenchmarkStep/m/w/threads=1/decode/ctx=1/batch=1 1 5 ns/op 3", wantErr: "value and unit pairs"},
		{name: "NaN value", line: "BenchmarkStep/m/w/threads=1/decode/ctx=1/batch=1 1 NaN ns/op", wantErr: "not a finite number"},
		{name: "duplicate metric", line: "BenchmarkStep/m/w/threads=1/decode/ctx=1/batch=1 1 5 ns/op 6 ns/op", wantErr: "reported twice"},
		{name: "zero threads", line: "BenchmarkStep/m/w/threads=0/decode/ctx=1/batch=1 1 5 ns/op", wantErr: "threads=0 is not positive"},
		{name: "unknown phase", line: "BenchmarkStep/m/w/threads=1/verify/ctx=1/batch=1 1 5 ns/op", wantErr: "not a decode or prefill case"},
		{name: "huge ctx", line: "BenchmarkStep/m/w/threads=1/decode/ctx=99999999999/batch=1 1 5 ns/op", wantErr: "below 10^9"},
		{name: "bad iterations", line: "BenchmarkStep/m/w/threads=1/decode/ctx=1/batch=1 x 5 ns/op", wantErr: "iteration count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := parseLine(tc.line)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseLine(%q) error %v, want one containing %q", tc.line, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseLine(%q): %v", tc.line, err)
			}
			if ok != tc.ok {
				t.Fatalf("parseLine(%q) ok = %v, want %v", tc.line, ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(result{}, caseKey{})); diff != "" {
				t.Errorf("parseLine(%q) (-want +got):\n%s", tc.line, diff)
			}
		})
	}
}

// stepLine formats a result line as BenchmarkStep prints it.
func stepLine(name string, tps, roof, bw float64) string {
	return fmt.Sprintf("BenchmarkStep/%s-2 \t 20\t 1000 ns/op\t %g roofline\t %g of-parts\t %g bw-GB/s\t 220 fma-GFLOP/s\t %g tokens/s", name, roof, roof, bw, tps)
}

func TestSpeedups(t *testing.T) {
	// Three runs of one case on one and two threads: the medians are the
	// middle values, whatever the order the runs come in.
	one, two := "m/bf16/threads=1/decode/ctx=512/batch=1", "m/bf16/threads=2/decode/ctx=512/batch=1"
	log := strings.Join([]string{
		"goos: linux",
		stepLine(one, 40, 0.70, 35), stepLine(two, 70, 0.80, 60),
		stepLine(one, 50, 0.80, 36), stepLine(two, 90, 0.60, 62),
		stepLine(one, 45, 0.75, 34), stepLine(two, 80, 0.70, 61),
		"PASS",
	}, "\n")
	rs := runs{}
	if err := read(rs, "log", strings.NewReader(log)); err != nil {
		t.Fatal(err)
	}
	k := caseKey{model: "m", weights: "bf16", threads: 2, ctx: 512, batch: 1}
	step, machine, ok := rs.speedups(k)
	if !ok {
		t.Fatal("no speed-up for a two-thread case with its one-thread case")
	}
	// Medians: one thread 45 tokens/s at 0.75, two 80 at 0.70. The
	// roofline time per token is fraction ÷ rate on each side.
	wantStep, wantMachine := 80.0/45, (0.75/45)/(0.70/80)
	if math.Abs(step-wantStep) > 1e-12 || math.Abs(machine-wantMachine) > 1e-12 {
		t.Errorf("speedups = %v, %v; want %v, %v", step, machine, wantStep, wantMachine)
	}
	if _, _, ok := rs.speedups(caseKey{model: "m", weights: "bf16", threads: 1, ctx: 512, batch: 1}); ok {
		t.Error("a one-thread case has a speed-up")
	}
	if _, _, ok := rs.speedups(caseKey{model: "m", weights: "bf16", threads: 2, ctx: 8192, batch: 1}); ok {
		t.Error("a case without its one-thread counterpart has a speed-up")
	}
	var out strings.Builder
	if err := rs.write(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"| m | bf16 | 1 | 512 | 1 | 3 | 45.0 (40.0–50.0) | – | – | – | 75 % (70–80) | 75 % | 100 % | 35.0 | 220 | – | – |",
		fmt.Sprintf("| m | bf16 | 2 | 512 | 1 | 3 | 80.0 (70.0–90.0) | %.2f× | %.2f× | %.0f %% | 70 %% (60–80) | 70 %% | 100 %% | 61.0 | 220 | – | – |", wantStep, wantMachine, 100*wantStep/wantMachine),
	}
	if diff := cmp.Diff(want, lines[2:]); diff != "" {
		t.Errorf("table rows (-want +got):\n%s", diff)
	}
}

// TestFP8RooflineCells: an fp8 case shows its fraction of the roofline at
// the fp8 rates, and a two-thread one the machine's speed-up by those
// fractions with the step's share of it; a case without them dashes.
func TestFP8RooflineCells(t *testing.T) {
	one, two := "m/fp8/threads=1/decode/ctx=512/batch=1", "m/fp8/threads=2/decode/ctx=512/batch=1"
	line := func(name string, tps, roof, fp8 float64) string {
		return fmt.Sprintf("BenchmarkStep/%s-2 20 1000 ns/op %g roofline %g fp8-roofline %g tokens/s", name, roof, fp8, tps)
	}
	log := strings.Join([]string{
		line(one, 40, 0.50, 0.70), line(two, 64, 0.60, 0.80),
		line(one, 44, 0.55, 0.80), line(two, 60, 0.55, 0.75),
		line(one, 42, 0.52, 0.74), line(two, 62, 0.58, 0.78),
		"BenchmarkStep/m/bf16/threads=1/decode/ctx=512/batch=1-2 20 1000 ns/op 0.9 roofline 50 tokens/s",
	}, "\n")
	rs := runs{}
	if err := read(rs, "log", strings.NewReader(log)); err != nil {
		t.Fatal(err)
	}
	// Medians: one thread 42 tokens/s at 0.74, two 62 at 0.78.
	machine := (0.74 / 42) / (0.78 / 62)
	want := map[caseKey]string{
		{model: "m", weights: "fp8", threads: 1, ctx: 512, batch: 1}:  "74 % (70–80) | –",
		{model: "m", weights: "fp8", threads: 2, ctx: 512, batch: 1}:  fmt.Sprintf("78 %% (75–80) | %.2f× (%.0f %%)", machine, 100*(62.0/42)/machine),
		{model: "m", weights: "bf16", threads: 1, ctx: 512, batch: 1}: "– | –",
	}
	got := map[caseKey]string{}
	for k := range want {
		got[k] = rs.fp8Cells(k)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(caseKey{})); diff != "" {
		t.Errorf("fp8 cells (-want +got):\n%s", diff)
	}
	var out strings.Builder
	if err := rs.write(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| "+want[caseKey{model: "m", weights: "fp8", threads: 2, ctx: 512, batch: 1}]+" |\n") {
		t.Errorf("the table does not end the two-thread fp8 row with its fp8 cells:\n%s", out.String())
	}
}

func TestPartsCeilings(t *testing.T) {
	name := "m/fp8/threads=1/decode/ctx=512/batch=8"
	line := func(metrics string) string { return "BenchmarkStep/" + name + "-2 20 1000 ns/op " + metrics }
	tests := []struct {
		name  string
		lines []string
		want  []float64
		cell  string
	}{
		{
			name: "one ratio a run, the median in the cell",
			lines: []string{
				line("0.48 roofline 0.64 of-parts"),
				line("0.50 roofline 0.625 of-parts"),
				line("0.42 roofline 0.60 of-parts"),
			},
			want: []float64{0.75, 0.8, 0.7},
			cell: "75 %",
		},
		{
			name: "runs without both fractions or with no parts' fraction are left out",
			lines: []string{
				line("0.48 roofline 0.64 of-parts"),
				line("0.50 roofline"),
				line("0.60 of-parts"),
				line("0.50 roofline 0 of-parts"),
			},
			want: []float64{0.75},
			cell: "75 %",
		},
		{name: "no run with both", lines: []string{line("0.5 roofline")}, cell: "–"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := runs{}
			if err := read(rs, "log", strings.NewReader(strings.Join(tc.lines, "\n"))); err != nil {
				t.Fatal(err)
			}
			k := caseKey{model: "m", weights: "fp8", threads: 1, ctx: 512, batch: 8}
			got := rs.partsCeilings(k)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-12), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("partsCeilings (-want +got):\n%s", diff)
			}
			var out strings.Builder
			if err := rs.write(&out); err != nil {
				t.Fatal(err)
			}
			cells := strings.Split(strings.Split(strings.TrimSpace(out.String()), "\n")[2], " | ")
			if cells[12] != tc.cell {
				t.Errorf("ceiling cell %q, want %q (row %q)", cells[12], tc.cell, out.String())
			}
		})
	}
}

func TestRunRefusesEmptyAndLongInput(t *testing.T) {
	var out strings.Builder
	if err := run(nil, strings.NewReader("goos: linux\nPASS\n"), &out); err == nil || !strings.Contains(err.Error(), "no BenchmarkStep results") {
		t.Errorf("input without results: error %v", err)
	}
	long := strings.Repeat("x", maxLine+1)
	if err := run(nil, strings.NewReader(long), &out); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a line over %d bytes: error %v", maxLine, err)
	}
	bad := "BenchmarkStep/m/w/threads=1/decode/ctx=1/batch=1 1 5 ns/op 3\n"
	if err := run(nil, strings.NewReader(bad), &out); err == nil || !strings.Contains(err.Error(), "standard input:1:") {
		t.Errorf("a malformed result line: error %v, want its line number", err)
	}
}

func TestPrefillTable(t *testing.T) {
	log := "BenchmarkStep/m/fp8/threads=1/prefill/len=512-2 5 1 ns/op 0.70 of-fma 210 fma-GFLOP/s 100 tokens/s\n" +
		"BenchmarkStep/m/fp8/threads=2/prefill/len=512-2 5 1 ns/op 0.65 of-fma 420 fma-GFLOP/s 190 tokens/s\n"
	var out strings.Builder
	if err := run(nil, strings.NewReader(log), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"| m | fp8 | 1 | 512 | 1 | 100.0 | – | – | – | 70 % | 210 |",
		fmt.Sprintf("| m | fp8 | 2 | 512 | 1 | 190.0 | %.2f× | %.2f× | %.0f %% | 65 %% | 420 |", 1.9, (0.70/100)/(0.65/190), 100*0.65/0.70),
	}
	if diff := cmp.Diff(want, lines[2:]); diff != "" {
		t.Errorf("prefill rows (-want +got):\n%s", diff)
	}
}

// FuzzParseLine checks that no line panics the parser, that a result has
// only finite metrics and a positive shape, and that its case name prints
// back to the same key.
func FuzzParseLine(f *testing.F) {
	f.Add("BenchmarkStep/glm5-dense-350m/bf16/threads=2/decode/ctx=8192/batch=8-2   20  46604054 ns/op  0.5079 roofline  171.9 tokens/s")
	f.Add("BenchmarkStep/glm5-moe-shape/fp8/threads=1/prefill/len=4096-2 1 9 ns/op 0.61 of-fma")
	f.Add("BenchmarkStep/a/b/threads=1/decode/ctx=1/batch=1-x 1 Inf ns/op")
	f.Add("BenchmarkStep/////// 1 2 3")
	f.Fuzz(func(t *testing.T, line string) {
		r, ok, err := parseLine(line)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("ok with error %v", err)
		}
		for u, v := range r.metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("metric %s = %v", u, v)
			}
		}
		k := r.key
		if k.threads <= 0 || (k.prefill && k.len <= 0) || (!k.prefill && (k.ctx <= 0 || k.batch <= 0)) {
			t.Fatalf("key %+v has a non-positive shape", k)
		}
		name := fmt.Sprintf("%s/%s/threads=%d/decode/ctx=%d/batch=%d", k.model, k.weights, k.threads, k.ctx, k.batch)
		if k.prefill {
			name = fmt.Sprintf("%s/%s/threads=%d/prefill/len=%d", k.model, k.weights, k.threads, k.len)
		}
		back, err := parseName(name)
		if err != nil || back != k {
			t.Fatalf("key %+v prints as %q, which parses to %+v, %v", k, name, back, err)
		}
	})
}
