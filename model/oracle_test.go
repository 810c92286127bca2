package model

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/oracle"
	"github.com/cpmla/cpmla/sampler"
)

// nearTieTol is the relative gap between the k-th and (k+1)-th index score
// below which an f32 engine may legitimately pick a different set than the
// float64 oracle. Such positions are reported by name, never absorbed into a
// looser tolerance; the seeds used here have none.
const nearTieTol = 1e-5

type selKey struct{ layer, pos int }

// engineRun is what runEngine observed: the full log-softmax rows in
// position order, the tokens, every row's selected positions and routed
// experts (sorted ascending), and the cache's stored values.
type engineRun struct {
	rows   [][]float64
	tokens []int32
	sel    map[selKey][]int32
	routes map[selKey][]int32
	stored oracle.StoredValues
}

// runEngine runs a prefill of prompt (logits at every prompt position) and
// then decode greedy steps.
func runEngine(t *testing.T, cfg *config.Model, src TensorSource, prompt []int32, decode int, kv kvcache.KVDType, idx kvcache.IndexerDType, blockSize int) engineRun {
	t.Helper()
	m, err := Build(cfg, src, Shard{TPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	total := len(prompt) + decode
	blocks := (total + blockSize - 1) / blockSize
	r, err := NewRunner(m, RunnerOptions{MaxTokens: len(prompt), MaxModelLen: blocks * blockSize, MaxLogitRows: len(prompt),
		MaxSeqs: 1, BlockSize: blockSize, NumBlocks: blocks + 3, KVDType: kv, IndexerDType: idx})
	if err != nil {
		t.Fatal(err)
	}
	// A block table that is not the identity, so slot mapping is exercised.
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(blocks + 2 - i)
	}
	sel, routes := map[selKey][]int32{}, map[selKey][]int32{}
	r.Trace = func(layer int, pos, seq int32, positions []int32) {
		p := slices.Clone(positions)
		slices.Sort(p)
		sel[selKey{layer, int(pos)}] = p
	}
	r.RouteTrace = func(layer int, pos, seq int32, experts []int32) {
		e := slices.Clone(experts)
		slices.Sort(e)
		routes[selKey{layer, int(pos)}] = e
	}
	var rows [][]float64
	seq := Seq{Tokens: prompt, BlockTable: table, LogitsAll: true}
	tokens := slices.Clone(prompt)
	for step := 0; step <= decode; step++ {
		if err := r.Forward(&Batch{Seqs: []Seq{seq}}); err != nil {
			t.Fatal(err)
		}
		var last []float32
		for i := 0; i < r.NumLogitRows(); i++ {
			_, lg := r.Logits(i)
			lse := sampler.LogSumExp(lg)
			row := make([]float64, len(lg))
			for j, v := range lg {
				row[j] = float64(v) - lse
			}
			rows = append(rows, row)
			last = lg
		}
		if step == decode {
			break
		}
		next := int32(sampler.Argmax(last))
		tokens = append(tokens, next)
		seq = Seq{Tokens: []int32{next}, Start: len(tokens) - 1, BlockTable: table}
	}
	slot := func(pos int) int32 { return r.Layout.Slot(table, blockSize, pos, 0) }
	stored := oracle.StoredValues{
		Row: func(layer, pos int) []float32 {
			return slices.Clone(r.Cache.Layer(layer).Row(slot(pos), make([]float32, cfg.CacheRowDim())))
		},
		Key: func(layer, pos int) []float32 {
			return slices.Clone(r.Cache.Layer(layer).Key(slot(pos), make([]float32, cfg.IndexHeadDim)))
		},
	}
	return engineRun{rows, tokens, sel, routes, stored}
}

func TestEngineMatchesOracle(t *testing.T) {
	tests := []struct {
		preset  string
		weights string // "" keeps the preset's dtype
		kv      kvcache.KVDType
		idx     kvcache.IndexerDType
	}{
		{"glm5-mini", "", "f32", "f32"},
		{"glm5-mini", "", "bf16", "f32"},
		{"glm5-mini", "", "fp8_ds_mla", "fp8"},
		{"glm5-mini", WeightFP8, "bf16", "f32"},
		{"v32-mini", "", "f32", "f32"},
		{"v32-mini", "", "fp8_ds_mla", "f32"},
		{"dense-mla", "", "bf16", "f32"},
		{"glm5-moe-mini", WeightBF16, "f32", "f32"},
		{"glm5-moe-mini", WeightFP8, "fp8_ds_mla", "fp8"},
		{"v32-moe-mini", WeightFP8, "bf16", "f32"},
		{"v32-moe-mini", WeightF32, "f32", "fp8"},
	}
	const promptLen, decode, blockSize = 24, 16, 16
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%s/%s/%s", tc.preset, cmp.Or(tc.weights, "preset"), tc.kv, tc.idx), func(t *testing.T) {
			cfg, err := loadTestModel(tc.preset)
			if err != nil {
				t.Fatal(err)
			}
			if tc.weights != "" {
				if cfg, err = WithWeightDType(cfg, tc.weights); err != nil {
					t.Fatal(err)
				}
			}
			src := RandomTensors(cfg, 1)
			prompt := make([]int32, promptLen)
			for i := range prompt {
				prompt[i] = int32((i*7919 + 13) % cfg.VocabSize)
			}
			run := runEngine(t, cfg, src, prompt, decode, tc.kv, tc.idx, blockSize)
			rows, tokens, sel, stored := run.rows, run.tokens, run.sel, run.stored
			om, err := oracle.New(cfg, OracleWeights{src}, oracle.Options{KVDType: string(tc.kv), IndexerDType: string(tc.idx)})
			if err != nil {
				t.Fatal(err)
			}
			om.WithStoredValues(stored)
			ids := make([]int, len(tokens))
			for i, v := range tokens {
				ids[i] = int(v)
			}
			res, err := om.Run(ids)
			if err != nil {
				t.Fatal(err)
			}
			rep := res.Rounding
			t.Logf("stored cache values: %d checked, %d rounding ties resolved to the engine's neighbouring code", rep.Checked, rep.Ties)
			if rep.MismatchCount > 0 {
				t.Errorf("%d stored cache values match no rounding of the oracle's value within %g: %v", rep.MismatchCount, oracle.DefaultRoundingTieTol, rep.Mismatches)
			}
			if len(rows) != len(tokens) {
				t.Fatalf("engine produced %d logit rows for %d tokens", len(rows), len(tokens))
			}
			maxDiff := 0.0
			for pos, row := range rows {
				for j, v := range row {
					if d := math.Abs(v - res.LogProbs[pos][j]); d > maxDiff {
						maxDiff = d
					}
				}
			}
			t.Logf("max |Δ logprob| over %d positions × %d tokens: %.3g", len(rows), cfg.VocabSize, maxDiff)
			if maxDiff > 1e-4 {
				t.Errorf("max |Δ logprob| = %.3g, want ≤ 1e-4", maxDiff)
			}
			checkRoutes(t, cfg, tokens, run.routes, res)
			ties := map[selKey]bool{}
			for _, tie := range res.NearTies(nearTieTol) {
				ties[selKey{tie.Layer, tie.Pos}] = true
			}
			if !cfg.Sparse() {
				if len(sel) != 0 {
					t.Errorf("dense model reported %d indexer selections", len(sel))
				}
				return
			}
			mismatch := 0
			for l := 0; l < cfg.NumLayers; l++ {
				for pos := range tokens {
					got, want := sel[selKey{l, pos}], res.TopK[l][pos]
					if !slices.Equal(got, want) {
						mismatch++
						if ties[selKey{l, pos}] {
							t.Errorf("layer %d position %d: near tie (gap < %g) changed the selection: engine %v, oracle %v", l, pos, nearTieTol, got, want)
						} else {
							t.Errorf("layer %d position %d: selection differs: engine %v, oracle %v", l, pos, got, want)
						}
					}
				}
			}
			if len(ties) > 0 {
				t.Logf("%d near ties reported by the oracle", len(ties))
			}
		})
	}
}

func TestGenerateDeterministic(t *testing.T) {
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		t.Fatal(err)
	}
	src := RandomTensors(cfg, 0)
	prompt := []int32{0, 4, 8, 15, 16, 23, 42}
	a := runEngine(t, cfg, src, prompt, 8, "f32", "f32", 4).tokens
	b := runEngine(t, cfg, src, prompt, 8, "f32", "f32", 4).tokens
	if !slices.Equal(a, b) {
		t.Fatalf("greedy generation differs between runs: %v vs %v", a, b)
	}
	// A different block size changes slots, never results.
	c := runEngine(t, cfg, src, prompt, 8, "f32", "f32", 16).tokens
	if !slices.Equal(a, c) {
		t.Fatalf("block size changed the result: %v vs %v", a, c)
	}
}

// checkRoutes compares the engine's routed experts with the oracle's at
// every position of every routed layer; a difference at an oracle near tie
// is reported as such.
func checkRoutes(t *testing.T, cfg *config.Model, tokens []int32, routes map[selKey][]int32, res *oracle.Result) {
	t.Helper()
	ties := map[selKey]bool{}
	for _, tie := range res.RouteNearTies(nearTieTol) {
		ties[selKey{tie.Layer, tie.Pos}] = true
	}
	checked := 0
	for l := 0; l < cfg.NumLayers; l++ {
		if cfg.DenseLayer(l) {
			continue
		}
		for pos := range tokens {
			got, want := routes[selKey{l, pos}], res.Experts[l][pos]
			checked++
			if !slices.Equal(got, want) {
				kind := "differ"
				if ties[selKey{l, pos}] {
					kind = fmt.Sprintf("differ at a routing near tie (gap < %g)", nearTieTol)
				}
				t.Errorf("layer %d position %d: routed experts %s: engine %v, oracle %v", l, pos, kind, got, want)
			}
		}
	}
	if cfg.HasRouted(cfg.NumLayers) && checked == 0 {
		t.Error("no routed row was compared")
	}
	if len(ties) > 0 {
		t.Logf("%d routing near ties reported by the oracle", len(ties))
	}
}

// loadTestModel resolves a preset, plus "dense-mla": glm5-mini without the
// indexer, the DeepSeek-V2/V3-style dense MLA path (top-k = all keys).
func loadTestModel(name string) (*config.Model, error) {
	if name != "dense-mla" {
		return config.Load(name)
	}
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		return nil, err
	}
	cfg.Name, cfg.Architecture = "dense-mla", "deepseek_v3"
	cfg.IndexTopK, cfg.IndexNHeads, cfg.IndexHeadDim = 0, 0, 0
	return cfg, nil
}
