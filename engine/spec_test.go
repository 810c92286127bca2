package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/spec"
)

func mtpConfig(k int) *spec.Config { return &spec.Config{Method: "mtp", NumSpeculativeTokens: k} }

// specRequest is one request of a speculative-decoding workload.
type specRequest struct {
	prompt []int
	n      int
	params sampler.Params
	stop   []int
	maxOut int
	top    int
	// stopSeq ends a sequence where its generated tokens end with these
	// (through Request.StopText, as a stop string spanning tokens would).
	stopSeq []int
}

// suffixStop is a StopText that ends a sequence when its generated tokens
// end with seq.
type suffixStop []int

func (s suffixStop) NewStopMatcher() StopMatcher { return &suffixMatcher{seq: s} }

type suffixMatcher struct {
	seq  []int
	seen []int
}

func (m *suffixMatcher) Ends(tok int) bool {
	m.seen = append(m.seen, tok)
	return len(m.seen) >= len(m.seq) && slices.Equal(m.seen[len(m.seen)-len(m.seq):], m.seq)
}

// cutAtSuffix is what a suffixStop makes of an output generated without it:
// every sequence cut after the first place its tokens end with seq.
func cutAtSuffix(o specOutput, seq []int) specOutput {
	c := specOutput{Finish: slices.Clone(o.Finish)}
	seq32 := convert[int32](seq)
	for k, toks := range o.Toks {
		n := len(toks)
		for i := len(seq); i <= len(toks); i++ {
			if slices.Equal(toks[i-len(seq):i], seq32) {
				n, c.Finish[k] = i, FinishStop
				break
			}
		}
		c.Toks = append(c.Toks, toks[:n])
		c.LPs = append(c.LPs, o.LPs[k][:n])
	}
	return c
}

// convert copies token ids between the engine's int32 and the API's int.
func convert[U, T int | int32](s []T) []U {
	out := make([]U, len(s))
	for i, v := range s {
		out[i] = U(v)
	}
	return out
}

// specOutput is what a request produced: per sequence, its tokens,
// logprobs, finish reason and top logprobs.
type specOutput struct {
	Toks   [][]int32
	LPs    [][]float64
	Finish []string
	Tops   [][][]sampler.TokenLogprob
}

// serveAll submits every request at once and collects their outputs (the
// events of a stream are buffered: see Submit).
func serveAll(t *testing.T, e *Engine, reqs []specRequest) []specOutput {
	t.Helper()
	finished := e.Stats().Finished
	chans := make([]<-chan Event, len(reqs))
	for i, r := range reqs {
		finished += int64(max(r.n, 1))
		ch, err := e.Submit(context.Background(), Request{ID: strconv.Itoa(i), PromptIDs: r.prompt, MaxTokens: r.maxOut, N: r.n,
			Sampling: r.params, StopTokenIDs: r.stop, IgnoreEOS: r.stop == nil, TopLogprobs: r.top, StopText: stopText(r.stopSeq)})
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	if e.opt.MeasureAllocs {
		// The streams are read once the engine is done, so that its
		// allocations are counted to the end of its last step.
		waitFinished(t, e, finished)
	}
	out := make([]specOutput, len(reqs))
	for i, ch := range chans {
		n := max(reqs[i].n, 1)
		toks, lps, last, _, tops := choices(t, ch, n)
		o := specOutput{Toks: toks, LPs: lps, Finish: make([]string, n)}
		for k, ev := range last {
			o.Finish[k] = ev.Finish
			if ev.OutputTokens != len(toks[k]) {
				t.Errorf("request %d sequence %d: %d tokens delivered, the finish counts %d", i, k, len(toks[k]), ev.OutputTokens)
			}
		}
		if reqs[i].top > 0 {
			o.Tops = tops
		}
		out[i] = o
	}
	return out
}

func stopText(seq []int) StopMatcherFactory {
	if seq == nil {
		return nil
	}
	return suffixStop(seq)
}

// TestSpecFakeDecodingIsPlainDecoding serves a workload of greedy, seeded,
// forked, stopped and top-logprob requests with speculative decoding on the
// fake executor and compares every output with plain decoding. A perfect
// drafter must have every draft accepted and take fewer steps; a drafter
// that is always wrong must have none accepted and change nothing.
func TestSpecFakeDecodingIsPlainDecoding(t *testing.T) {
	cfg := fakeModel(t)
	cfg.NumNextNPredict = 1
	shared := []int{3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 4}
	reqs := []specRequest{
		{prompt: shared, maxOut: 20},
		{prompt: shared[:9], maxOut: 17, params: sampler.Params{Temperature: 0.9, Seed: 7}},
		{prompt: append([]int{1, 2}, shared...), maxOut: 12, n: 2, params: sampler.Params{Temperature: 1.2, TopK: 8, Seed: 3}},
		{prompt: shared[:5], maxOut: 9, top: 3},
		{prompt: []int{40}, maxOut: 30, params: sampler.Params{FrequencyPenalty: 0.5, RepetitionPenalty: 1.3}},
	}
	for _, layout := range []kvcache.Layout{{N: 1, I: 1}, {N: 2, I: 1}, {N: 2, I: 4}} {
		for _, k := range []int{1, 3, 5} {
			for _, wrong := range []bool{false, true} {
				t.Run(fmt.Sprintf("DCP%d-I%d-K%d-wrong%v", layout.N, layout.I, k, wrong), func(t *testing.T) {
					o := Options{MaxNumBatchedTokens: 24, MaxNumSeqs: 4, MaxModelLen: 48, BlockSize: 8, Layout: layout, MemoryLimit: 1 << 30}
					slot, _ := o.WithDefaults(cfg).SlotBytes(cfg)
					o.KVCacheMemory = 24 * int64(8/layout.N) * slot
					run := func(sp *spec.Config, reqs []specRequest) ([]specOutput, Stats, *fakeExec) {
						o := o
						o.Speculative = sp
						factory, made := fakeFactory(layout, cfg.VocabSize)
						e, err := New(cfg, 1<<20, factory, o)
						if err != nil {
							t.Fatal(err)
						}
						f := (*made)[len(*made)-1]
						f.wrongDrafts = wrong
						out := serveAll(t, e, reqs)
						e.Close()
						return out, e.Stats(), f
					}
					plain, plainSt, _ := run(nil, reqs)
					// A stop token the first request meets on its 7th token.
					withStop := append([]specRequest{}, reqs...)
					withStop[0].stop = []int{int(plain[0].Toks[0][6])}
					plainStop, _, _ := run(nil, withStop[:1])
					got, _, _ := run(mtpConfig(k), reqs)
					gotStop, _, _ := run(mtpConfig(k), withStop[:1])
					// The fake drafter drafts the target's greedy tokens: on
					// the greedy requests without penalties, a perfect one
					// has every draft accepted.
					greedy := []specRequest{reqs[0], reqs[3]}
					_, plainSt, _ = run(nil, greedy)
					_, st, f := run(mtpConfig(k), greedy)
					if d := cmp.Diff(plain, got); d != "" {
						t.Errorf("speculative decoding differs from plain decoding (-plain +spec):\n%s", d)
					}
					if d := cmp.Diff(plainStop, gotStop); d != "" {
						t.Errorf("with a stop token, speculative decoding differs (-plain +spec):\n%s", d)
					}
					// Stops in the text, as two-token suffixes met mid-output: on
					// the first request and on the second sequence of the forked
					// one (each sequence has its own matcher).
					withText := append([]specRequest{}, reqs...)
					withText[0].stopSeq = convert[int](plain[0].Toks[0][5:7])
					withText[2].stopSeq = convert[int](plain[2].Toks[1][3:5])
					plainText, _, _ := run(nil, withText)
					gotText, _, _ := run(mtpConfig(k), withText)
					for _, i := range []int{0, 2} {
						want := cutAtSuffix(plain[i], withText[i].stopSeq)
						got := plainText[i]
						got.Tops = nil
						if d := cmp.Diff(want, got); d != "" {
							t.Errorf("request %d with a stop in the text: not the output cut after its first match (-want +got):\n%s", i, d)
						}
					}
					if plainText[0].Finish[0] != FinishStop || len(plainText[0].Toks[0]) > 7 {
						t.Errorf("the text stop ended request 0 after %d tokens with %q, want at most 7 and stop", len(plainText[0].Toks[0]), plainText[0].Finish[0])
					}
					if d := cmp.Diff(plainText, gotText); d != "" {
						t.Errorf("with stops in the text, speculative decoding differs (-plain +spec):\n%s", d)
					}
					if len(plainStop[0].Toks[0]) != 7 || plainStop[0].Finish[0] != FinishStop {
						t.Errorf("stop request ended after %d tokens with %q, want 7 and stop", len(plainStop[0].Toks[0]), plainStop[0].Finish[0])
					}
					s := st.Spec
					if s.Drafts == 0 || f.drafts == 0 {
						t.Fatalf("no draft rounds (%+v, %d draft steps)", s, f.drafts)
					}
					switch {
					case wrong && s.AcceptedTokens != 0:
						t.Errorf("a drafter that is always wrong had %d of %d drafts accepted", s.AcceptedTokens, s.DraftTokens)
					case !wrong && s.AcceptedTokens != s.DraftTokens:
						t.Errorf("a perfect drafter had %d of %d drafts accepted", s.AcceptedTokens, s.DraftTokens)
					case !wrong && st.Steps >= plainSt.Steps:
						t.Errorf("perfect drafts took %d steps, plain decoding %d", st.Steps, plainSt.Steps)
					}
					var perPos int64
					for _, a := range s.PerPos() {
						perPos += a
					}
					if perPos != s.AcceptedTokens || len(s.PerPos()) != k {
						t.Errorf("acceptances per position %v (K %d) do not add up to %d", s.PerPos(), k, s.AcceptedTokens)
					}
					t.Logf("%d steps (plain %d); %d rounds, %d drafts, %d accepted, mean acceptance length %.2f",
						st.Steps, plainSt.Steps, s.Drafts, s.DraftTokens, s.AcceptedTokens, s.MeanAcceptanceLength())
				})
			}
		}
	}
}

// TestSpecRefusals: speculative decoding needs the model's MTP layer and a
// valid K, named at start-up.
func TestSpecRefusals(t *testing.T) {
	cfg := fakeModel(t) // glm5-mini: no MTP layer
	for _, tc := range []struct {
		name string
		mtp  int
		sp   *spec.Config
		want string
	}{
		{"no MTP layer", 0, mtpConfig(2), "num_nextn_predict_layers 0"},
		{"K zero", 1, mtpConfig(0), "num_speculative_tokens"},
		{"K above the bound", 1, mtpConfig(spec.MaxTokens + 1), "num_speculative_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *cfg
			c.NumNextNPredict = tc.mtp
			o := Options{Speculative: tc.sp}
			err := o.WithDefaults(&c).Validate(&c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestSpecDecodingOnMoEModel serves glm5-moe-mini with its MTP layer
// drafting K = 2 tokens, on one rank and on in-process layouts (TP with
// DCP, PCP with DCP and expert parallelism): greedy and seeded sampled
// outputs must be plain decoding's on the same layout — tokens identical,
// logprobs within 1e-9 — the acceptance counts one rank's, and on one rank
// measured decode steps allocate nothing.
func TestSpecDecodingOnMoEModel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-moe-mini with its MTP layer on several layouts")
	}
	cfg, err := config.Load("glm5-moe-mini")
	if err != nil {
		t.Fatal(err)
	}
	src := model.RandomTensors(cfg, model.DefaultWeightSeed)
	one, err := model.Build(cfg, src, model.Shard{})
	if err != nil {
		t.Fatal(err)
	}
	shared := []int{11, 200, 3000, 45, 7, 8191, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}
	reqs := []specRequest{
		{prompt: shared, maxOut: 10},
		{prompt: shared[:9], maxOut: 8, params: sampler.Params{Temperature: 0.8, TopP: 0.9, Seed: 11}},
		{prompt: append(append([]int{}, shared[:16]...), 999, 998), maxOut: 9},
		{prompt: []int{5, 6}, maxOut: 12, n: 2, params: sampler.Params{Temperature: 1, Seed: 2}},
	}
	const B = 8
	// The acceptance counts of the first layout (one rank), per drafter:
	// every layout must accept the same drafts at the same positions.
	firstStats := map[string]spec.Stats{}
	for _, tc := range []struct {
		l  comm.Layout
		ep bool
	}{
		{comm.Layout{TP: 1, PCP: 1, DCP: 1}, false},
		{comm.Layout{TP: 2, PCP: 1, DCP: 2}, false},
		{comm.Layout{TP: 1, PCP: 2, DCP: 2}, true},
	} {
		t.Run(fmt.Sprintf("TP%d-PCP%d-DCP%d-EP%v", tc.l.TP, tc.l.PCP, tc.l.DCP, tc.ep), func(t *testing.T) {
			factory, weights := SingleRank(one), WeightBytes(one)
			if tc.l.World() > 1 {
				bp, err := cp.NewBackendPlan(cp.BackendConfig{Layout: tc.l, Interleave: 1, BlockSize: B / tc.l.DCP, KVDtype: "f32",
					Backend: "auto", HeadsPerRank: cfg.NumHeads / tc.l.TP, QKNopeHeadDim: cfg.QKNopeHeadDim, Sparse: true})
				if err != nil {
					t.Fatal(err)
				}
				if factory, weights, err = InProcess(cfg, src, Parallel{Layout: tc.l, Interleave: 1, Backend: bp, ExpertParallel: tc.ep}); err != nil {
					t.Fatal(err)
				}
			}
			o := Options{MaxNumBatchedTokens: 24, MaxNumSeqs: 4, MaxModelLen: 40, BlockSize: B, KVDType: kvcache.KVF32,
				Layout: kvcache.Layout{N: tc.l.DCP, I: 1}, MemoryLimit: 1 << 30, MeasureAllocs: true}
			run := func(sp *spec.Config, runs int, script func(toks, drafts []int32)) (out []specOutput, st Stats, allocs []int64, decodeSteps int64) {
				o := o
				o.Speculative = sp
				e, err := New(cfg, weights, factory, o)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				if script != nil {
					e.spec.script = script
				}
				for range runs {
					n, steps := countAllocs(e, func() { out = serveAll(t, e, reqs) })
					allocs = append(allocs, n)
					decodeSteps += steps
				}
				e.Close()
				return out, e.Stats(), allocs, decodeSteps
			}
			plain, plainSt, _, _ := run(nil, 1, nil)
			// Random weights make an MTP layer whose drafts are rarely
			// right, so the drafts are also scripted (scriptFrom).
			script := scriptFrom(reqs, plain, cfg.VocabSize)
			for _, tc := range []struct {
				name   string
				script func(toks, drafts []int32)
			}{{"mtp drafts", nil}, {"scripted drafts", script}} {
				got, st, allocs, decodeSteps := run(mtpConfig(2), 3, tc.script)
				if d := cmp.Diff(plain, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
					t.Errorf("%s: speculative decoding differs from plain decoding (-plain +spec):\n%s", tc.name, d)
				}
				s := st.Spec
				switch {
				case s.DraftTokens == 0:
					t.Errorf("%s: no drafts proposed", tc.name)
				case tc.script != nil && (s.AcceptedTokens == 0 || s.AcceptedTokens == s.DraftTokens || s.AcceptedPerPos[1] == 0):
					t.Errorf("%s: %d of %d drafts accepted (per position %v): want some kept at both positions and some rejected", tc.name, s.AcceptedTokens, s.DraftTokens, s.PerPos())
				}
				if decodeSteps == 0 || slices.ContainsFunc(allocs, func(n int64) bool { return n != 0 }) {
					t.Errorf("%s: the engine's heap allocations in three runs' decode-only steps: %v over %d steps, want none", tc.name, allocs, decodeSteps)
				}
				if st.KernelPlansBuiltAfterWarmup != 0 {
					t.Errorf("%s: %d kernel plans built after warm-up", tc.name, st.KernelPlansBuiltAfterWarmup)
				}
				if want, ok := firstStats[tc.name]; !ok {
					firstStats[tc.name] = s
				} else if d := cmp.Diff(want, s); d != "" {
					t.Errorf("%s: acceptance differs from one rank's (-one rank +this layout):\n%s", tc.name, d)
				}
				t.Logf("%s: %d steps (plain %d per run); %d rounds, %d drafts, %d accepted (per position %v), mean acceptance length %.2f",
					tc.name, st.Steps, plainSt.Steps, s.Drafts, s.DraftTokens, s.AcceptedTokens, s.PerPos(), s.MeanAcceptanceLength())
			}
		})
	}
}

// scriptFrom scripts drafts from plain decoding's outputs of reqs: right,
// except the second draft of a round whose sequence length is a multiple of
// three, so that verification keeps some drafts and rejects the rest. It allocates nothing when it runs.
func scriptFrom(reqs []specRequest, plain []specOutput, vocab int) func(toks, drafts []int32) {
	var full [][]int32
	for i, r := range reqs {
		for _, toks := range plain[i].Toks {
			f := make([]int32, 0, len(r.prompt)+len(toks))
			for _, id := range r.prompt {
				f = append(f, int32(id))
			}
			full = append(full, append(f, toks...))
		}
	}
	return func(toks, drafts []int32) {
		for _, f := range full {
			if len(f) > len(toks) && slices.Equal(f[:len(toks)], toks) {
				copy(drafts, f[len(toks):])
				break
			}
		}
		// Which drafts are spoilt depends on the sequence alone (its
		// length), never on the order the engine drafts its sequences in,
		// which depends on when requests arrived.
		if len(toks)%3 == 0 && len(drafts) > 1 {
			drafts[1] = (drafts[1] + 1) % int32(vocab)
		}
	}
}

// TestDrafterRowsLandWhereTheTargetsDo: the MTP layer's caches are layers of
// the target runner's cache on every rank, so the drafter has no layout of
// its own to get wrong. The test runs a prompt and the draft pass over it on
// DCP ranks (two interleave sizes) and checks, slot by slot on every rank,
// that the drafter wrote exactly the rows the target wrote: those of the
// positions the ownership function gives the rank. A drafter run with
// DCP = 1 against the sharded cache (vLLM's silent failure) would write
// every position on every rank.
func TestDrafterRowsLandWhereTheTargetsDo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-moe-mini on DCP ranks")
	}
	cfg, err := config.Load("glm5-moe-mini")
	if err != nil {
		t.Fatal(err)
	}
	src := model.RandomTensors(cfg, model.DefaultWeightSeed)
	const B, n = 8, 13
	for _, tc := range []struct {
		l          comm.Layout
		interleave int
	}{{comm.Layout{TP: 2, PCP: 1, DCP: 2}, 1}, {comm.Layout{TP: 2, PCP: 2, DCP: 4}, 2}} {
		t.Run(fmt.Sprintf("TP%d-PCP%d-DCP%d-I%d", tc.l.TP, tc.l.PCP, tc.l.DCP, tc.interleave), func(t *testing.T) {
			bp, err := cp.NewBackendPlan(cp.BackendConfig{Layout: tc.l, Interleave: tc.interleave, BlockSize: B / tc.l.DCP, KVDtype: "f32",
				Backend: "auto", HeadsPerRank: cfg.NumHeads / tc.l.TP, QKNopeHeadDim: cfg.QKNopeHeadDim, Sparse: true})
			if err != nil {
				t.Fatal(err)
			}
			f, _, err := InProcess(cfg, src, Parallel{Layout: tc.l, Interleave: tc.interleave, Backend: bp})
			if err != nil {
				t.Fatal(err)
			}
			ex, err := f(model.RunnerOptions{MaxTokens: 16, MaxModelLen: 32, MaxLogitRows: 16, MaxSeqs: 1, BlockSize: B / tc.l.DCP, NumBlocks: 4, MTP: true})
			if err != nil {
				t.Fatal(err)
			}
			defer closeExecutor(ex)
			toks := make([]int32, n+1)
			for i := range toks {
				toks[i] = int32(3 + 5*i)
			}
			table := []int32{2, 0} // not the identity, so that a wrong table shows
			if err := ex.Forward(&model.Batch{Seqs: []model.Seq{{Tokens: toks[:n], BlockTable: table}}}); err != nil {
				t.Fatal(err)
			}
			hidden := make([]int32, n)
			for i := range hidden {
				hidden[i] = int32(i)
			}
			if err := ex.Draft(0, &model.Batch{Seqs: []model.Seq{{Tokens: toks[1 : n+1], BlockTable: table, Hidden: hidden}}}, model.TargetBank); err != nil {
				t.Fatal(err)
			}
			layout := kvcache.Layout{N: tc.l.DCP, I: tc.interleave}
			g := ex.(*rankGroup)
			for rank, r := range g.runners {
				d := tc.l.DCPRank(rank)
				want := map[int32]bool{}
				for p := range n {
					if layout.Owner(p) == d {
						want[int32(layout.Slot(table, B/tc.l.DCP, p, d))] = true
					}
				}
				target, drafter := r.Cache.Layer(0), r.Cache.Layer(cfg.NumLayers)
				scratch := make([]float32, cfg.KVLoraRank+cfg.QKRopeHeadDim)
				written := func(lc *kvcache.LayerCache) map[int32]bool {
					got := map[int32]bool{}
					for s := range int32(lc.Slots()) {
						if slices.ContainsFunc(lc.Row(s, scratch), func(v float32) bool { return v != 0 }) {
							got[s] = true
						}
					}
					return got
				}
				if d := cmp.Diff(want, written(target)); d != "" {
					t.Errorf("rank %d (DCP rank %d): target rows (-owned +written):\n%s", rank, tc.l.DCPRank(rank), d)
				}
				if d := cmp.Diff(want, written(drafter)); d != "" {
					t.Errorf("rank %d (DCP rank %d): drafter rows (-owned +written):\n%s", rank, tc.l.DCPRank(rank), d)
				}
			}
		})
	}
}

// TestSpecSamplingPreservesTheDistribution is the statistical test of
// speculative sampling. The fake model's logits are 1 at one token and 0
// elsewhere, so at temperature T every token it emits is, whatever came
// before, its peak with probability e^{1/T}/Z and any other token with 1/Z
// (Z = e^{1/T} + V − 1): the offsets of the emitted tokens from their peaks
// are independent draws of one known distribution. With drafts that are
// the peak (accepted unless the draw differs) and drafts that are not
// (rejected unless the draw is them), over 400 seeds × 12 tokens, Pearson's
// χ² of the offsets against that distribution must stay below 99.6, the
// 0.1 % tail of χ² with 60 degrees of freedom (the seeds are fixed, so the
// test is deterministic).
func TestSpecSamplingPreservesTheDistribution(t *testing.T) {
	cfg := fakeModel(t)
	cfg.NumNextNPredict = 1
	V := cfg.VocabSize
	const temp, seeds, maxOut = 0.7, 400, 12
	prompt := []int{4, 8, 15, 16, 23, 42}
	p0 := math.Exp(1/temp) / (math.Exp(1/temp) + float64(V-1))
	for _, wrong := range []bool{false, true} {
		t.Run(fmt.Sprintf("wrong-drafts-%v", wrong), func(t *testing.T) {
			o := Options{MaxNumBatchedTokens: 64, MaxNumSeqs: 8, MaxModelLen: 32, BlockSize: 8, MemoryLimit: 1 << 30, MaxQueue: seeds,
				Speculative: mtpConfig(3)}
			factory, made := fakeFactory(kvcache.Layout{N: 1, I: 1}, V)
			e, err := New(cfg, 1<<20, factory, o)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			(*made)[len(*made)-1].wrongDrafts = wrong
			reqs := make([]specRequest, seeds)
			for s := range reqs {
				reqs[s] = specRequest{prompt: prompt, maxOut: maxOut, params: sampler.Params{Temperature: temp, Seed: uint64(s)}}
			}
			counts := make([]float64, V)
			total := 0.0
			for _, out := range serveAll(t, e, reqs) {
				seq := make([]int32, 0, len(prompt)+maxOut)
				for _, id := range prompt {
					seq = append(seq, int32(id))
				}
				for _, tok := range out.Toks[0] {
					peak := fakeNext(seq, V)
					counts[(int(tok)-int(peak)+V)%V]++
					total++
					seq = append(seq, tok)
				}
			}
			chi2 := 0.0
			for off, c := range counts {
				p := (1 - p0) / float64(V-1)
				if off == 0 {
					p = p0
				}
				chi2 += (c - total*p) * (c - total*p) / (total * p)
			}
			st := e.Stats().Spec
			if chi2 > 99.6 {
				t.Errorf("χ² = %.1f over %v tokens, above 99.6: the emitted tokens do not follow the model's distribution", chi2, total)
			}
			// The first draft is accepted exactly when the draw is the draft:
			// with probability p0 when it is the peak, (1 − p0)/(V − 1) when
			// it is not. Within four standard deviations:
			want := p0
			if wrong {
				want = (1 - p0) / float64(V-1)
			}
			n := float64(st.Drafts)
			if got := float64(st.PerPos()[0]); n == 0 || math.Abs(got-n*want) > 4*math.Sqrt(n*want*(1-want)) {
				t.Errorf("first drafts accepted in %v of %v rounds, want %.1f ± %.1f", got, n, n*want, 4*math.Sqrt(n*want*(1-want)))
			}
			t.Logf("χ² = %.1f over %v tokens (peak share %.4f, expected %.4f); %d of %d drafts accepted",
				chi2, total, counts[0]/total, p0, st.AcceptedTokens, st.DraftTokens)
		})
	}
}
