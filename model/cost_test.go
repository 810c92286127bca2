package model

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

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
}
