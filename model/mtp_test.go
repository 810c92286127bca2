package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/oracle"
	"github.com/cpmla/cpmla/sampler"
)

// TestDraftMatchesOracle runs the MTP layer the way speculative decoding
// does — a teacher-forced pass over a prompt's positions from the target's
// final-normed hidden states (the first draft step at the last position
// included), then chained steps that each read the hidden state the step
// before left in DraftBank — and compares every position's MTP logprobs,
// indexer selections and routed experts with the float64 oracle's MTP,
// written from the formulas. It pins which hidden state each step reads
// (the target's after its final norm; then the MTP output after the shared
// head's norm) and that the embedding is zero at position 0.
func TestDraftMatchesOracle(t *testing.T) {
	for _, tc := range []struct {
		preset, weights string
		kv              kvcache.KVDType
		idx             kvcache.IndexerDType
	}{
		{"glm5-moe-mini", WeightFP8, "f32", "f32"},
		{"glm5-moe-mini", WeightBF16, "fp8_ds_mla", "fp8"},
		{"v32-moe-mini", WeightFP8, "bf16", "f32"},
	} {
		t.Run(fmt.Sprintf("%s/%s/%s/%s", tc.preset, tc.weights, tc.kv, tc.idx), func(t *testing.T) {
			cfg := moeConfig(t, tc.preset, tc.weights)
			src := RandomTensors(cfg, 3)
			m, err := Build(cfg, src, Shard{})
			if err != nil {
				t.Fatal(err)
			}
			const P, K, B = 20, 4, 16
			r, err := NewRunner(m, RunnerOptions{MaxTokens: P, MaxModelLen: 48, MaxLogitRows: P, MaxSeqs: 1, BlockSize: B, NumBlocks: 4,
				KVDType: tc.kv, IndexerDType: tc.idx, MTP: true})
			if err != nil {
				t.Fatal(err)
			}
			table := []int32{2, 0, 3}
			mtpLayer := cfg.NumLayers
			sel, routes := map[int][]int32{}, map[int][]int32{}
			r.Trace = func(layer int, pos, seq int32, positions []int32) {
				if layer == mtpLayer {
					sel[int(pos)] = slices.Sorted(slices.Values(positions))
				}
			}
			r.RouteTrace = func(layer int, pos, seq int32, experts []int32) {
				if layer == mtpLayer {
					routes[int(pos)] = slices.Sorted(slices.Values(experts))
				}
			}
			prompt := make([]int32, P)
			for i := range prompt {
				prompt[i] = int32((i*7919 + 101) % cfg.VocabSize)
			}
			mustForward(t, r, Seq{Tokens: prompt, BlockTable: table, LogitsAll: true})
			_, last := r.Logits(P - 1)
			chain := []int32{int32(sampler.Argmax(last))}
			// Teacher-forced positions 0…P−2 and the first draft step at P−1.
			hidden := make([]int32, P)
			for i := range hidden {
				hidden[i] = int32(i)
			}
			toks := append(slices.Clone(prompt[1:]), chain[0])
			if err := r.Draft(0, &Batch{Seqs: []Seq{{Tokens: toks, BlockTable: table, LogitsAll: true, Hidden: hidden}}}, TargetBank); err != nil {
				t.Fatal(err)
			}
			var got [][]float64
			take := func() {
				for i := 0; i < r.NumLogitRows(); i++ {
					_, lg := r.Logits(i)
					lse := sampler.LogSumExp(lg)
					row := make([]float64, len(lg))
					for j, v := range lg {
						row[j] = float64(v) - lse
					}
					got = append(got, row)
				}
			}
			take()
			// Chained steps: each reads the last step's post-norm hidden.
			for j := 1; j < K; j++ {
				_, lg := r.Logits(r.NumLogitRows() - 1)
				next := int32(sampler.Argmax(lg))
				chain = append(chain, next)
				prev := int32(r.NumLogitRows() - 1)
				if err := r.Draft(0, &Batch{Seqs: []Seq{{Tokens: []int32{next}, Start: P - 1 + j, BlockTable: table, Hidden: []int32{prev}}}}, DraftBank); err != nil {
					t.Fatal(err)
				}
				take()
			}
			om, err := oracle.New(cfg, OracleWeights{src}, oracle.Options{KVDType: string(tc.kv), IndexerDType: string(tc.idx)})
			if err != nil {
				t.Fatal(err)
			}
			slot := func(pos int) int32 { return r.Layout.Slot(table, B, pos, 0) }
			om.WithStoredValues(oracle.StoredValues{
				Row: func(layer, pos int) []float32 {
					return slices.Clone(r.Cache.Layer(layer).Row(slot(pos), make([]float32, cfg.CacheRowDim())))
				},
				Key: func(layer, pos int) []float32 {
					return slices.Clone(r.Cache.Layer(layer).Key(slot(pos), make([]float32, cfg.IndexHeadDim)))
				},
			})
			ids, ch := make([]int, P), make([]int, len(chain))
			for i, v := range prompt {
				ids[i] = int(v)
			}
			for i, v := range chain {
				ch[i] = int(v)
			}
			res, err := om.RunMTP(0, ids, ch)
			if err != nil {
				t.Fatal(err)
			}
			if rep := res.Rounding; rep.MismatchCount > 0 {
				t.Errorf("%d stored cache values match no rounding of the oracle's: %v", rep.MismatchCount, rep.Mismatches)
			}
			if len(got) != len(res.LogProbs) {
				t.Fatalf("engine drafted %d positions, oracle %d", len(got), len(res.LogProbs))
			}
			maxDiff := 0.0
			for p := range got {
				for v := range got[p] {
					maxDiff = math.Max(maxDiff, math.Abs(got[p][v]-res.LogProbs[p][v]))
				}
			}
			t.Logf("MTP max |Δ logprob| over %d positions: %.3g", len(got), maxDiff)
			if maxDiff > 1e-4 {
				t.Errorf("MTP max |Δ logprob| = %.3g, want ≤ 1e-4", maxDiff)
			}
			for p := range got {
				if w := res.TopK[mtpLayer][p]; !slices.Equal(sel[p], w) {
					t.Errorf("MTP position %d: engine selected %v, oracle %v", p, sel[p], w)
				}
				if w := res.Experts[mtpLayer][p]; !slices.Equal(routes[p], w) {
					t.Errorf("MTP position %d: engine routed to %v, oracle %v", p, routes[p], w)
				}
			}
		})
	}
}

// TestDraftRefusals: a draft step names what is wrong with it, on every
// rank alike (the checks read only the replicated batch).
func TestDraftRefusals(t *testing.T) {
	cfg := moeConfig(t, "glm5-moe-mini", WeightBF16)
	m, err := Build(cfg, RandomTensors(cfg, 1), Shard{})
	if err != nil {
		t.Fatal(err)
	}
	noMTP, err := NewRunner(m, RunnerOptions{MaxTokens: 8, MaxModelLen: 32, MaxLogitRows: 8, BlockSize: 8, NumBlocks: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(m, RunnerOptions{MaxTokens: 8, MaxModelLen: 32, MaxLogitRows: 8, BlockSize: 8, NumBlocks: 4, MTP: true})
	if err != nil {
		t.Fatal(err)
	}
	tab := []int32{0, 1}
	mustForward(t, r, Seq{Tokens: []int32{1, 2, 3}, BlockTable: tab, LogitsAll: true})
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"no MTP layers", func() error {
			return noMTP.Draft(0, &Batch{Seqs: []Seq{{Tokens: []int32{1}, BlockTable: tab, Hidden: []int32{0}}}}, TargetBank)
		}, "RunnerOptions.MTP"},
		{"layer", func() error {
			return r.Draft(1, &Batch{Seqs: []Seq{{Tokens: []int32{1}, BlockTable: tab, Hidden: []int32{0}}}}, TargetBank)
		}, "MTP layer 1 of 1"},
		{"hidden count", func() error {
			return r.Draft(0, &Batch{Seqs: []Seq{{Tokens: []int32{1, 2}, BlockTable: tab, Hidden: []int32{0}}}}, TargetBank)
		}, "2 tokens and 1 hidden rows"},
		{"hidden row", func() error {
			return r.Draft(0, &Batch{Seqs: []Seq{{Tokens: []int32{1}, BlockTable: tab, Hidden: []int32{3}}}}, TargetBank)
		}, "hidden row 3"},
		{"target with hidden", func() error {
			return r.Forward(&Batch{Seqs: []Seq{{Tokens: []int32{1}, BlockTable: tab, Hidden: []int32{0}}}})
		}, "Seq.Hidden is for Runner.Draft"},
	} {
		err := tc.run()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	if _, err := NewRunner(m, RunnerOptions{MaxTokens: 8, MaxModelLen: 32, BlockSize: 8, NumBlocks: 4}); err != nil {
		t.Fatal(err)
	}
	dense, _ := loadTestModel("glm5-mini")
	dm, err := Build(dense, RandomTensors(dense, 1), Shard{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewRunner(dm, RunnerOptions{MaxTokens: 8, MaxModelLen: 32, BlockSize: 8, NumBlocks: 4, MTP: true}); err == nil || !strings.Contains(err.Error(), "num_nextn_predict_layers") {
		t.Errorf("MTP runner of a model without MTP layers: %v", err)
	}
}
