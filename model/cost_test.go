package model

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
)

// TestStepCost: the cost a decode step reports is what the config says one
// token costs: every Linear weight of the decoder layers and the LM head read
// once (2 FLOPs per weight), one embedding row, the top-k cache rows of every
// layer attended by every head, and every cached indexer key scored.
func TestStepCost(t *testing.T) {
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Build(cfg, RandomTensors(cfg, 3), Shard{TPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	const B, prompt = 8, 30
	r, err := NewRunner(m, RunnerOptions{MaxTokens: 40, MaxModelLen: 64, BlockSize: B, NumBlocks: 8, KVDType: "bf16", IndexerDType: "fp8"})
	if err != nil {
		t.Fatal(err)
	}
	table := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	toks := make([]int32, prompt)
	for i := range toks {
		toks[i] = int32(7 + 31*i)
	}
	mustForward(t, r, Seq{Tokens: toks, BlockTable: table})
	mustForward(t, r, Seq{Tokens: []int32{5}, Start: prompt, BlockTable: table})

	var linear int64 // Linear weights one token multiplies (bf16 preset)
	for _, s := range TensorSpecs(cfg) {
		if s.Linear && s.Part != PartMTP && s.Part != PartEmbedding {
			linear += int64(s.Shape[0]) * int64(s.Shape[1])
		}
	}
	head := int64(cfg.VocabSize) * int64(cfg.HiddenSize)
	keys := int64(prompt + 1)                         // every cached key is scored
	rows := min(keys, int64(cfg.IndexTopK))           // the top-k rows are attended
	L, H := int64(cfg.NumLayers), int64(cfg.NumHeads) // one rank holds every head
	want := StepCost{
		WeightBytes: 2*(linear+head) + 2*int64(cfg.HiddenSize),
		KVBytes:     L * (rows*int64(kvcache.RowBytes("bf16")) + keys*int64(kvcache.KeyBytes("fp8", cfg.IndexHeadDim))),
		FLOPs: 2*(linear+head) + L*(2*rows*H*(mla.RowDim+mla.LatentDim)) +
			L*2*keys*int64(cfg.IndexNHeads*cfg.IndexHeadDim),
	}
	if d := cmp.Diff(want, r.StepCost()); d != "" {
		t.Errorf("decode step cost (-want +got):\n%s", d)
	}

	// Part by part, at 1 byte/s and 1 FLOP/s: every product and the
	// lookup cost the larger of their bytes and FLOPs (a bf16 weight read
	// once for one row is 2 bytes and 2 FLOPs), and so does each layer's
	// attention and its indexer, on their own.
	rowB, keyB := rows*int64(kvcache.RowBytes("bf16")), keys*int64(kvcache.KeyBytes("fp8", cfg.IndexHeadDim))
	attnF, idxF := 2*rows*H*(mla.RowDim+mla.LatentDim), 2*keys*int64(cfg.IndexNHeads*cfg.IndexHeadDim)
	wantBound := float64(2*(linear+head)+2*int64(cfg.HiddenSize)) + float64(L*(max(rowB, attnF)+max(keyB, idxF)))
	if got := r.StepBound(Limits{ReadBW: 1, FMAPeak: 1}); got != wantBound {
		t.Errorf("StepBound at 1 byte/s and 1 FLOP/s = %v, want %v", got, wantBound)
	}
	// With one limit removed, the parts add up to the step's totals.
	c := r.StepCost()
	inf := math.Inf(1)
	for _, b := range []struct {
		name      string
		got, want float64
	}{
		{"memory alone", r.StepBound(Limits{ReadBW: 1, FMAPeak: inf}), float64(c.WeightBytes + c.KVBytes)},
		{"FMA alone", r.StepBound(Limits{ReadBW: inf, FMAPeak: 1}), float64(c.FLOPs)},
	} {
		if b.got != b.want {
			t.Errorf("StepBound, %s = %v, want %v", b.name, b.got, b.want)
		}
	}
	// Over the totals: the larger of all bytes and all FLOPs at each
	// pair of rates, never more than the parts' sum.
	for _, l := range []Limits{{ReadBW: 1, FMAPeak: 1}, {ReadBW: 3, FMAPeak: 0.5}, {ReadBW: 0.25, FMAPeak: 7}} {
		want := max(float64(c.WeightBytes+c.KVBytes)/l.ReadBW, float64(c.FLOPs)/l.FMAPeak)
		got := r.StepRoofline(l)
		if math.Abs(got-want) > 1e-9*want {
			t.Errorf("StepRoofline at %v bytes/s and %v FLOPs/s = %v, want %v", l.ReadBW, l.FMAPeak, got, want)
		}
		if b := r.StepBound(l); got > b {
			t.Errorf("StepRoofline at %v bytes/s and %v FLOPs/s = %v, above StepBound %v", l.ReadBW, l.FMAPeak, got, b)
		}
	}
}

// TestStepBoundFP8: with the fp8 product rates given, every product of fp8
// weights over as many rows as the rates cover takes at least its weights
// at its rows' rate: with the other limits removed the step's bound is the
// fp8 weights a decode step multiplies times the seconds per weight of its
// rows, interpolated between the rows measured; a prompt's taller products
// are not covered, and a bf16 step has no fp8 part.
func TestStepBoundFP8(t *testing.T) {
	inf := math.Inf(1)
	// Seconds per weight: 1 for one row, 2 for two, 4 for four (3 for three).
	l := Limits{ReadBW: inf, FMAPeak: inf, FP8: []FP8Rate{{Rows: 1, Codes: 1}, {Rows: 2, Codes: 0.5}, {Rows: 4, Codes: 0.25}}}
	for _, dtype := range []string{WeightFP8, WeightBF16} {
		cfg := moeConfig(t, "glm5-mini", dtype)
		var codes int64 // the fp8 weights one decode step multiplies
		if dtype == WeightFP8 {
			for _, s := range TensorSpecs(cfg) {
				if s.Quantizable() && s.Part != PartMTP && s.Part != PartEmbedding {
					codes += int64(s.Shape[0]) * int64(s.Shape[1])
				}
			}
		}
		m, err := Build(cfg, RandomTensors(cfg, 3), Shard{TPSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		const B, prompt = 8, 12
		r, err := NewRunner(m, RunnerOptions{MaxTokens: 40, MaxModelLen: 64, MaxSeqs: 3, MaxLogitRows: 3, BlockSize: B, NumBlocks: 12})
		if err != nil {
			t.Fatal(err)
		}
		seqs := make([]Seq, 3)
		for i := range seqs {
			toks := make([]int32, prompt)
			for j := range toks {
				toks[j] = int32(7 + 31*j + i)
			}
			table := []int32{int32(4 * i), int32(4*i + 1), int32(4*i + 2), int32(4*i + 3)}
			seqs[i] = Seq{Tokens: toks, BlockTable: table}
			mustForward(t, r, seqs[i])
			if got := r.StepBound(l); got != 0 {
				t.Errorf("%s: a %d-token prompt's bound at the fp8 rates alone = %v, want 0 (more rows than the rates cover)", dtype, prompt, got)
			}
			seqs[i] = Seq{Tokens: []int32{5}, Start: prompt, BlockTable: table}
		}
		mustForward(t, r, seqs[0])
		if got, want := r.StepBound(l), float64(codes); got != want {
			t.Errorf("%s: one sequence's decode step at the fp8 rates alone = %v, want %v (1 s per weight)", dtype, got, want)
		}
		if got, want := r.StepRoofline(l), float64(codes); got != want {
			t.Errorf("%s: one sequence's decode step's roofline at the fp8 rates alone = %v, want %v (1 s per weight)", dtype, got, want)
		}
		// At 1 byte/s, 1 FLOP/s and 4 s per fp8 weight of one row, each fp8
		// weight's 2 FLOPs take 4 s instead: the compute term is FLOPs + 2
		// per fp8 weight, against every byte read.
		c := r.StepCost()
		slow := Limits{ReadBW: 1, FMAPeak: 1, FP8: []FP8Rate{{Rows: 1, Codes: 0.25}}}
		if got, want := r.StepRoofline(slow), max(float64(c.WeightBytes+c.KVBytes), float64(c.FLOPs+2*codes)); got != want {
			t.Errorf("%s: one sequence's decode step's roofline at 4 s per fp8 weight = %v, want %v", dtype, got, want)
		}
		mustForward(t, r, seqs...)
		if got, want := r.StepBound(l), float64(3*codes); got != want {
			t.Errorf("%s: three sequences' decode step at the fp8 rates alone = %v, want %v (3 s per weight)", dtype, got, want)
		}
	}
}

// TestFP8Seconds: the time per fp8 weight is the measured one at a measured
// row count, linear in between, the first one's below, none above.
func TestFP8Seconds(t *testing.T) {
	rates := []FP8Rate{{Rows: 1, Codes: 10}, {Rows: 2, Codes: 5}, {Rows: 8, Codes: 1}}
	type res struct {
		S  float64
		OK bool
	}
	for _, tc := range []struct {
		rows int
		want res
	}{{0, res{0.1, true}}, {1, res{0.1, true}}, {2, res{0.2, true}}, {5, res{0.6, true}}, {8, res{1, true}}, {9, res{0, false}}} {
		s, ok := fp8Seconds(rates, tc.rows)
		if d := cmp.Diff(tc.want, res{s, ok}, cmpopts.EquateApprox(1e-12, 0)); d != "" {
			t.Errorf("fp8Seconds(%d rows) (-want +got):\n%s", tc.rows, d)
		}
	}
	if _, ok := fp8Seconds(nil, 1); ok {
		t.Error("fp8Seconds without rates covers one row")
	}
}
