package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/spec"
)

// workload is the edge-case mix every configuration runs: a 1-token prompt
// (DCP ranks that own nothing of it), a prompt shorter than the number of
// PCP chunks, and one longer than index_topk (16), all prefilled in one
// batch, then greedy decode steps.
func workload(c Config) Config {
	c.PromptLens = []int{1, 3, 23}
	c.DecodeSteps = 3
	return c
}

// TestMatrix runs a sample of every valid TP{1,2,4} × PCP{1,2,4} × DCP
// layout, crossed with interleave {1, 4, block size 16}, both DCP comm
// backends, both attention backends, f32/bf16/fp8_ds_mla KV and fp8 indexer
// keys, chunked prefill continuing a cached prefix and multi-token decode
// rows, against the single-rank engine. The single-rank engine itself is
// checked against the oracle on the same workload in TestSingleRankMatchesOracle.
func TestMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("the verification matrix takes a few minutes")
	}
	cases := []Config{
		{TP: 2},
		{TP: 4, KVDType: "bf16"},
		{TP: 2, DCP: 2, PrefillChunk: 8},
		{TP: 2, DCP: 2, Interleave: 4, DCPComm: "a2a", Backend: "sparse-sharded", KVDType: "fp8_ds_mla", IndexerDType: "fp8", SpecTokens: 2},
		{TP: 4, DCP: 2, Interleave: 16, Backend: "FLASHMLA_SPARSE"},
		{TP: 4, DCP: 4, DCPComm: "a2a", PrefillChunk: 8, SpecTokens: 1},
		{TP: 4, DCP: 4, Interleave: 4, Backend: "FLASHINFER_MLA_SPARSE", KVDType: "fp8_ds_mla"},
		{PCP: 2},
		{PCP: 4, KVDType: "bf16", PrefillChunk: 8},
		{TP: 2, PCP: 2, Backend: "sparse-sharded", SpecTokens: 2},
		{TP: 2, PCP: 4},
		{PCP: 2, DCP: 2},
		{PCP: 2, DCP: 2, Interleave: 4, DCPComm: "a2a", Backend: "sparse-sharded", KVDType: "fp8_ds_mla", PrefillChunk: 8, SpecTokens: 1},
		{PCP: 4, DCP: 4},
		{PCP: 4, DCP: 4, Interleave: 16, DCPComm: "a2a", SpecTokens: 2, IndexerDType: "fp8"},
		{TP: 2, PCP: 2, DCP: 2},
		{TP: 2, PCP: 2, DCP: 4, Interleave: 4, DCPComm: "a2a", Backend: "sparse-sharded", KVDType: "fp8_ds_mla", PrefillChunk: 8},
		{TP: 4, PCP: 2, DCP: 2, KVDType: "bf16"},
		{TP: 2, PCP: 4, DCP: 4, Backend: "sparse-sharded", KVDType: "bf16", SpecTokens: 1},
		{TP: 2, PCP: 4, DCP: 8},
		{TP: 4, PCP: 2, DCP: 8, DCPComm: "a2a", PrefillChunk: 8},
		{Model: "v32-mini", TP: 2, PCP: 2, DCP: 4, Interleave: 4},
	}
	for _, c := range cases {
		c = workload(c)
		c.defaults()
		// f32 runs are compared with the single rank directly; quantized
		// caches are judged against the oracle with their own rounding ties.
		c.SkipOracle = c.KVDType == "f32" && c.IndexerDType == "f32"
		t.Run(strings.ReplaceAll(fmt.Sprintf("%s/%s/%s/chunk%d/spec%d", c.Model, c.String(), c.Backend, c.PrefillChunk, c.SpecTokens), " ", "_"), func(t *testing.T) {
			res, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("max |Δ logprob| %.3g over %d positions, kv tokens per rank %v of %d, collectives per rank %v, %.1f s",
				res.MaxAbsLogprobDiff, res.Positions, res.KVTokensPerRank, res.SingleRankKVTokens, res.CollectivesPerRank, res.WallSeconds)
			if !res.OK {
				t.Errorf("verification failed: %v", res.Problems)
			}
			// DCP shards the KV: per rank the owned positions sum to the
			// single-rank total over each DCP group.
			perGroup := 0
			for _, r := range (comm.Layout{TP: c.TP, PCP: c.PCP, DCP: c.DCP}).DCPMembers(0) {
				perGroup += res.KVTokensPerRank[r]
			}
			if perGroup != res.SingleRankKVTokens {
				t.Errorf("DCP group holds %d KV tokens, single rank %d", perGroup, res.SingleRankKVTokens)
			}
		})
	}
}

// TestSingleRankMatchesOracle pins the reference the matrix compares with:
// the single-rank engine on the matrix workload against the float64 oracle.
func TestSingleRankMatchesOracle(t *testing.T) {
	for _, c := range []Config{
		{TP: 2, DCP: 2, PrefillChunk: 8, SpecTokens: 2},
		{PCP: 2, DCP: 2, KVDType: "fp8_ds_mla", IndexerDType: "fp8", SpecTokens: 1},
	} {
		c = workload(c)
		res, err := Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: oracle |Δ logprob| %.3g, rounding ties %d, near index ties %d", c.String(), res.MaxAbsOracleDiff, res.OracleRoundingTies, res.OracleNearIndexTies)
		if !res.OK {
			t.Errorf("%s: %v", c.String(), res.Problems)
		}
	}
}

// TestRefusals: every configuration the validator refuses is refused before
// any weight loads, naming the constraint, the values and a setting that works.
func TestRefusals(t *testing.T) {
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    Config
		want []string
	}{
		{Config{TP: 3}, []string{"8", "3", "one of [1 2 4 8]"}},
		{Config{TP: 4, DCP: 3}, []string{"3", "4", "1, 2 or 4"}},
		{Config{TP: 2, PCP: 2, DCP: 3}, []string{"DCP", "3"}},
		{Config{TP: 2, DCP: 2, Interleave: 3}, []string{"3", "16"}},
		{Config{TP: 2, DCP: 2, Interleave: 32}, []string{"32", "16"}},
		{Config{TP: 2, DCPComm: "a2a"}, []string{"a2a", "decode-context-parallel-size", "ag_rs"}},
		{Config{TP: 2, DCP: 2, DCPComm: "ring"}, []string{"ring", "ag_rs", "a2a"}},
		{Config{TP: 2, Backend: "FLASH_ATTN"}, []string{"FLASH_ATTN", "sparse-gather"}},
		{Config{KVDType: "fp16"}, []string{"fp16", "f32", "bf16", "fp8_ds_mla"}},
	} {
		c := workload(tc.c)
		c.defaults()
		_, err := c.Validate(cfg)
		if err == nil {
			t.Errorf("%s accepted", c.String())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: refusal %q does not name %q", c.String(), err, w)
			}
		}
	}
}

// TestInjectedMismatchFailsFast: one rank entering a collective with a wrong
// count ends the run with the ledger's error, found before any data moves;
// with a collective deadline of ten minutes, a run that waited for the
// deadline instead would end with a timeout error (and hold the test).
func TestInjectedMismatchFailsFast(t *testing.T) {
	for _, c := range []Config{
		{TP: 2, DCP: 2},
		{PCP: 2},
		{TP: 2},
	} {
		c = workload(c)
		c.InjectMismatch = true
		c.SkipOracle = true
		c.CollectiveTimeout = 10 * time.Minute
		_, err := Run(context.Background(), c)
		var mm *comm.MismatchError
		if !errors.As(err, &mm) {
			t.Fatalf("%s: got %v, want a collective mismatch", c.String(), err)
		}
		if !strings.Contains(err.Error(), "collective mismatch") {
			t.Errorf("%s: error %q does not say collective mismatch", c.String(), err)
		}
	}
}

// TestMoEMatrix runs the MoE presets (GLM-5's single routing group and
// DeepSeek-V3.2's grouped routing) over TP, PCP and DCP with expert
// parallelism on and off, both DCP combines, fp8 weights quantized at load
// and bf16 weights, against the single-rank engine and — for the fp8 and
// quantized-cache cases — the float64 oracle, which checks every row's
// routed experts too. With expert parallelism the per-rank expert load must
// add up to every routed row computed once per selected expert.
func TestMoEMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("the MoE verification matrix takes a minute or two")
	}
	cases := []Config{
		{Model: "glm5-moe-mini", TP: 2},
		{Model: "glm5-moe-mini", TP: 2, ExpertParallel: true, Quantization: "fp8"},
		{Model: "glm5-moe-mini", PCP: 2, ExpertParallel: true, SpecTokens: 1},
		{Model: "glm5-moe-mini", PCP: 2, DCP: 2, PrefillChunk: 8},
		{Model: "glm5-moe-mini", TP: 2, PCP: 2, DCP: 2, ExpertParallel: true, DCPComm: "a2a", Quantization: "fp8"},
		{Model: "glm5-moe-mini", TP: 4, DCP: 4, ExpertParallel: true, KVDType: "fp8_ds_mla", IndexerDType: "fp8"},
		{Model: "glm5-moe-mini", PCP: 4, DCP: 4, ExpertParallel: true, DCPComm: "a2a", PrefillChunk: 8},
		{Model: "v32-moe-mini", TP: 2, PCP: 2, DCP: 4, Interleave: 4, Quantization: "fp8"},
		{Model: "v32-moe-mini", TP: 2, PCP: 2, DCP: 2, ExpertParallel: true, KVDType: "bf16", SpecTokens: 2},
		{Model: "v32-moe-mini", PCP: 2, DCP: 2, ExpertParallel: true, Quantization: "fp8", DCPComm: "a2a"},
	}
	for _, c := range cases {
		c = workload(c)
		c.defaults()
		c.SkipOracle = c.KVDType == "f32" && c.IndexerDType == "f32" && c.Quantization == ""
		t.Run(strings.ReplaceAll(fmt.Sprintf("%s/%s/chunk%d/spec%d", c.Model, c.String(), c.PrefillChunk, c.SpecTokens), " ", "_"), func(t *testing.T) {
			res, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("max |Δ logprob| %.3g (oracle %.3g) over %d positions, expert rows per rank %v, %.1f s",
				res.MaxAbsLogprobDiff, res.MaxAbsOracleDiff, res.Positions, res.ExpertLoadPerRank, res.WallSeconds)
			if !res.OK || !res.RoutesIdentical {
				t.Errorf("verification failed: %v", res.Problems)
			}
			if len(res.ExpertLoadPerRank) != c.TP*c.PCP {
				t.Fatalf("expert load for %d ranks, want %d", len(res.ExpertLoadPerRank), c.TP*c.PCP)
			}
			// Every routed row selects num_experts_per_tok = 4 experts.
			if res.SingleRankExpertRows == 0 || res.SingleRankExpertRows%4 != 0 {
				t.Errorf("single rank computed %d expert rows, not a positive multiple of num_experts_per_tok 4", res.SingleRankExpertRows)
			}
		})
	}
}

// TestSpecMatrix runs MTP speculative decoding (greedy) on the MoE presets
// over parallel layouts: on one rank and on the layout the speculative
// output must be plain greedy decoding's, and the layout must accept the
// same drafts in every round as one rank (the comparison that catches a
// drafter running on another layout than the target's).
func TestSpecMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("the speculative-decoding matrix takes a minute")
	}
	for _, c := range []Config{
		{Model: "glm5-moe-mini", TP: 2, DCP: 2, Spec: &spec.Config{Method: "mtp", NumSpeculativeTokens: 1}},
		{Model: "glm5-moe-mini", PCP: 2, DCP: 2, ExpertParallel: true, DCPComm: "a2a", Spec: &spec.Config{Method: "mtp", NumSpeculativeTokens: 3}, PrefillChunk: 8},
		{Model: "v32-moe-mini", TP: 2, PCP: 2, DCP: 4, Interleave: 4, Spec: &spec.Config{Method: "mtp", NumSpeculativeTokens: 5}, Quantization: "fp8"},
	} {
		c = workload(c)
		c.DecodeSteps = 8
		c.SkipOracle = true
		c.defaults()
		t.Run(strings.ReplaceAll(fmt.Sprintf("%s/%s", c.Model, c.String()), " ", "_"), func(t *testing.T) {
			res, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("mean acceptance length %.3f, per position %v, %d target steps", res.SpecMeanAcceptance, res.SpecAcceptancePerPos, res.SpecTargetSteps)
			if !res.OK || res.SpecGreedyIdentical == nil || !*res.SpecGreedyIdentical || !*res.SpecAcceptanceIdentical {
				t.Errorf("verification failed: %v", res.Problems)
			}
		})
	}
}

// TestSpecAcceptsExactDrafts: with drafts that are the target's own greedy
// tokens every draft is accepted and the target steps fall by K+1; with
// wrong drafts none is, one token per step; the output is plain greedy
// decoding's either way, on one rank and on a parallel layout.
func TestSpecAcceptsExactDrafts(t *testing.T) {
	c := workload(Config{Model: "glm5-moe-mini", PCP: 2, DCP: 2, Spec: &spec.Config{Method: "mtp", NumSpeculativeTokens: 3}})
	c.defaults()
	const want = 13 // the first token after the prefill, then 12 in rounds of K+1 = 4
	cfg, src, err := model.Source(c.Model, c.WeightSeed)
	if err != nil {
		t.Fatal(err)
	}
	bp, err := c.Validate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	prompts := makePrompts(cfg, c.PromptLens, c.Seed)
	plainCfg := c
	plainCfg.DecodeSteps = want - 1
	plain, err := runEngine(context.Background(), cfg, src, plainCfg, prompts, nil)
	if err != nil {
		t.Fatal(err)
	}
	greedy := func(s, i int) int32 {
		if g := plain.tokens[s][len(prompts[s]):]; i < len(g) {
			return g[i]
		}
		return 0
	}
	for _, tc := range []struct {
		name      string
		next      func(s, i int) int32
		steps     int // target steps after the prefill
		acceptAll bool
	}{
		{"exact drafts", greedy, (want - 1 + 3) / 4, true},
		{"wrong drafts", func(s, i int) int32 { return (greedy(s, i) + 1) % int32(cfg.VocabSize) }, want - 1, false},
	} {
		for _, layout := range []*cp.BackendPlan{nil, bp} {
			got, err := runSpec(context.Background(), cfg, src, c, prompts, layout, want, scriptedDrafts{next: tc.next, k: 3})
			if err != nil {
				t.Fatal(err)
			}
			for s, p := range prompts {
				if ref := plain.tokens[s][len(p) : len(p)+want]; !slices.Equal(ref, got.gen[s]) {
					t.Errorf("%s (parallel %v): sequence %d generated %v, plain greedy %v", tc.name, layout != nil, s, got.gen[s], ref)
				}
			}
			if got.steps != tc.steps {
				t.Errorf("%s (parallel %v): %d target steps, want %d", tc.name, layout != nil, got.steps, tc.steps)
			}
			if tc.acceptAll && got.stats.AcceptedTokens != got.stats.DraftTokens || !tc.acceptAll && got.stats.AcceptedTokens != 0 {
				t.Errorf("%s (parallel %v): %d of %d drafts accepted", tc.name, layout != nil, got.stats.AcceptedTokens, got.stats.DraftTokens)
			}
		}
	}
}
