package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
)

// choices reads a stream of N sequences to its end and returns each
// sequence's tokens, logprobs and last event, plus the first event's prompt
// logprobs.
func choices(t *testing.T, ch <-chan Event, n int) (toks [][]int32, lps [][]float64, last []Event, prompt []PromptLogprob, tops [][][]sampler.TokenLogprob) {
	t.Helper()
	toks, lps, last, tops = make([][]int32, n), make([][]float64, n), make([]Event, n), make([][][]sampler.TokenLogprob, n)
	for k := range n {
		toks[k], lps[k], tops[k] = make([]int32, 0, cap(ch)), make([]float64, 0, cap(ch)), make([][]sampler.TokenLogprob, 0, cap(ch))
	}
	first := true
	for ev := range ch {
		if first {
			prompt, first = ev.Prompt, false
		} else if ev.Prompt != nil {
			t.Errorf("prompt logprobs delivered twice")
		}
		if ev.Err != nil {
			t.Fatalf("sequence %d: %v", ev.Index, ev.Err)
		}
		if ev.Finish != "" {
			last[ev.Index] = ev
			if ev.OutputTokens == len(toks[ev.Index]) {
				continue
			}
		}
		toks[ev.Index] = append(toks[ev.Index], int32(ev.Token))
		lps[ev.Index] = append(lps[ev.Index], ev.Logprob)
		tops[ev.Index] = append(tops[ev.Index], ev.Top) // valid: the request's own buffer
	}
	return toks, lps, last, prompt, tops
}

// waitFinished waits until finished sequences have ended in the engine and
// the step that ended them is over, measurement included (a decode-only
// step is counted in DecodeSteps before its events go out and in
// MeasuredDecodeSteps at its very end), so that an AllocCounter finished
// after it has seen the whole step. It sleeps between polls: polling the
// engine's lock without pause would make the engine's goroutine park on
// it.
func waitFinished(t *testing.T, e *Engine, finished int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := e.Stats()
		if st.Finished >= finished && st.Running == 0 && st.Waiting == 0 && (!e.opt.MeasureAllocs || st.DecodeSteps == st.MeasuredDecodeSteps) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine still busy: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}

// countAllocs runs work with the engine's own heap allocations counted
// (AllocCounter) and returns them and the decode-only steps they were
// counted over. work must return once the engine is idle.
func countAllocs(e *Engine, work func()) (allocs, decodeSteps int64) {
	c := StartAllocCounter()
	e.CountAllocs(c)
	work()
	e.CountAllocs(nil)
	return c.Finish()
}

// forkExecutors are forkOptions' ranks: m alone for dcp 1, else dcp
// in-process ranks of TP dcp with the KV split over dcp DCP ranks (f32
// cache, blocks of 8/dcp positions each).
func forkExecutors(t *testing.T, cfg *config.Model, m *model.Model, dcp int) (ExecutorFactory, int64) {
	t.Helper()
	if dcp == 1 {
		return SingleRank(m), WeightBytes(m)
	}
	l := comm.Layout{TP: dcp, PCP: 1, DCP: dcp}
	bp, err := cp.NewBackendPlan(cp.BackendConfig{Layout: l, Interleave: 1, BlockSize: 8 / dcp, KVDtype: "f32",
		Backend: "auto", Comm: "ag_rs", HeadsPerRank: cfg.NumHeads / dcp, QKNopeHeadDim: cfg.QKNopeHeadDim, Sparse: true})
	if err != nil {
		t.Fatal(err)
	}
	f, weights, err := InProcess(cfg, model.RandomTensors(cfg, model.DefaultWeightSeed), Parallel{Layout: l, Interleave: 1, Backend: bp})
	if err != nil {
		t.Fatal(err)
	}
	return f, weights
}

func forkOptions(cfg *config.Model, dcp int) Options {
	o := Options{MaxNumBatchedTokens: 24, MaxNumSeqs: 4, MaxModelLen: 32, BlockSize: 8, KVDType: kvcache.KVF32,
		Layout: kvcache.Layout{N: dcp, I: 1}, MemoryLimit: 1 << 30, MeasureAllocs: true}
	slot, _ := o.WithDefaults(cfg).SlotBytes(cfg)
	o.KVCacheMemory = 16 * int64(8/dcp) * slot
	return o
}

// TestNSharesOnePrefill: n = 3 computes the prompt once (13 tokens, the
// last block partial, so the children get a copy of it), and sequence k
// equals the same request run alone with n = 1 and seed + k, on one rank and
// on TP 2 with the KV split over two DCP ranks.
func TestNSharesOnePrefill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-mini")
	}
	cfg, m := glm5Mini(t)
	prompt := []int{11, 200, 3000, 45, 7, 8191, 12, 13, 14, 15, 16, 17, 18}
	params := sampler.Params{Temperature: 1.2, TopK: 50, RepetitionPenalty: 1.2, PresencePenalty: 0.5, Seed: 100}
	const n, maxOut = 3, 7
	var oneRank []PromptLogprob
	for _, dcp := range []int{1, 2} {
		t.Run(fmt.Sprintf("DCP%d", dcp), func(t *testing.T) {
			f, weights := forkExecutors(t, cfg, m, dcp)
			o := forkOptions(cfg, dcp)
			// The prefix index may allocate on its first insertions (see
			// blockManager), which decode steps of the forked sequences
			// would make: this test counts the allocations of the rest.
			o.DisablePrefixCaching = true
			e, err := New(cfg, weights, f, o)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			run := func(req Request) ([][]int32, [][]float64, []Event) {
				finished := e.Stats().Finished + int64(max(req.N, 1))
				ch, err := e.Submit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				// Every event is buffered: read them once the engine is done.
				waitFinished(t, e, finished)
				toks, lps, last, _, _ := choices(t, ch, max(req.N, 1))
				return toks, lps, last
			}
			// The request runs three times; the engine's own allocations
			// (AllocCounter) over its decode-only steps must be none in
			// every run.
			var toks [][]int32
			var lps [][]float64
			var last []Event
			var st Stats
			var allocs [3]int64
			decodeSteps := int64(0)
			for r := range allocs {
				st0 := e.Stats()
				var steps int64
				allocs[r], steps = countAllocs(e, func() {
					toks, lps, last = run(Request{ID: "n3", PromptIDs: prompt, MaxTokens: maxOut, N: n, Sampling: params, IgnoreEOS: true})
				})
				decodeSteps += steps
				st = e.Stats()
				st.PrefillTokens -= st0.PrefillTokens
				st.OutputTokens -= st0.OutputTokens
			}
			if st.PrefillTokens != int64(len(prompt)) {
				t.Errorf("n = %d scheduled %d prefill tokens for a %d-token prompt; the prompt must be computed once", n, st.PrefillTokens, len(prompt))
			}
			if st.OutputTokens != n*maxOut {
				t.Errorf("%d output tokens, want %d", st.OutputTokens, n*maxOut)
			}
			if allocs != [3]int64{} || decodeSteps == 0 {
				t.Errorf("the engine's heap allocations in three runs' decode-only steps with penalties and n > 1: %v over %d steps, want none", allocs, decodeSteps)
			}
			for k := range n {
				if last[k].Finish != FinishLength || last[k].OutputTokens != maxOut {
					t.Errorf("sequence %d ended with %+v", k, last[k])
				}
				p := params
				p.Seed += uint64(k)
				wantToks, wantLPs, _ := run(Request{ID: "alone", PromptIDs: prompt, MaxTokens: maxOut, Sampling: p, IgnoreEOS: true})
				if d := cmp.Diff(wantToks[0], toks[k]); d != "" {
					t.Errorf("sequence %d differs from n = 1 with seed %d (-alone +forked):\n%s", k, p.Seed, d)
				}
				if d := cmp.Diff(wantLPs[0], lps[k], cmpopts.EquateApprox(0, 1e-6)); d != "" {
					t.Errorf("sequence %d logprobs (-alone +forked):\n%s", k, d)
				}
			}
			// Prompt scores (every row's logits) on the parallel layout
			// equal one rank's.
			ch, err := e.Submit(context.Background(), Request{ID: "score", PromptIDs: prompt, MaxTokens: 0, ScorePrompt: true, PromptTopLogprobs: 2})
			if err != nil {
				t.Fatal(err)
			}
			_, _, _, scores, _ := choices(t, ch, 1)
			if dcp == 1 {
				oneRank = scores
			} else if d := cmp.Diff(oneRank, scores, cmpopts.EquateApprox(0, 1e-4)); d != "" {
				t.Errorf("prompt logprobs (-one rank +TP 2 × DCP 2):\n%s", d)
			}
			if slices.Equal(toks[0], toks[1]) && slices.Equal(toks[1], toks[2]) {
				t.Errorf("the three sequences drew the same tokens %v; their seeds differ", toks[0])
			}
		})
	}
}

// referenceRows runs tokens through a fresh runner in one step with logits
// at every position.
func referenceRows(t *testing.T, m *model.Model, tokens []int32) [][]float32 {
	t.Helper()
	const B = 8
	blocks := (len(tokens) + B - 1) / B
	r, err := model.NewRunner(m, model.RunnerOptions{MaxTokens: len(tokens), MaxModelLen: blocks * B, MaxLogitRows: len(tokens),
		MaxSeqs: 1, BlockSize: B, NumBlocks: blocks, KVDType: kvcache.KVF32})
	if err != nil {
		t.Fatal(err)
	}
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	if err := r.Forward(&model.Batch{Seqs: []model.Seq{{Tokens: tokens, BlockTable: table, LogitsAll: true}}}); err != nil {
		t.Fatal(err)
	}
	rows := make([][]float32, r.NumLogitRows())
	for i := range rows {
		_, l := r.Logits(i)
		rows[i] = slices.Clone(l)
	}
	return rows
}

// TestPromptAndTopLogprobs: prompt logprobs computed in chunks of at most
// --max-prompt-logit-rows rows, after a request with the same prompt filled
// the prefix cache, equal the log_softmax of one whole-sequence step, with
// vLLM's ranks and the most likely tokens; so do the generated tokens' top
// logprobs. max tokens 0 scores the prompt and generates nothing.
func TestPromptAndTopLogprobs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-mini")
	}
	cfg, m := glm5Mini(t)
	o := forkOptions(cfg, 1)
	o.MaxPromptLogitRows = 4
	e, err := New(cfg, WeightBytes(m), SingleRank(m), o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompt := []int{11, 200, 3000, 45, 7, 8191, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}
	const maxOut, promptTop, top = 4, 3, 2
	warm, err := e.Submit(context.Background(), Request{ID: "warm", PromptIDs: prompt, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	choices(t, warm, 1)
	hits := e.Stats().PrefixHitTokens

	ch, err := e.Submit(context.Background(), Request{ID: "score", PromptIDs: prompt, MaxTokens: maxOut, IgnoreEOS: true,
		ScorePrompt: true, PromptTopLogprobs: promptTop, TopLogprobs: top})
	if err != nil {
		t.Fatal(err)
	}
	toks, lps, _, gotPrompt, tops := choices(t, ch, 1)
	if h := e.Stats().PrefixHitTokens; h != hits {
		t.Errorf("a prompt-logprobs request took %d prefix-cache tokens; it needs every row computed", h-hits)
	}
	all := make([]int32, 0, len(prompt)+maxOut)
	for _, id := range prompt {
		all = append(all, int32(id))
	}
	all = append(all, toks[0][:maxOut-1]...)
	rows := referenceRows(t, m, all)

	topOf := func(l []float32, k int) []sampler.TokenLogprob {
		lse := sampler.LogSumExp(l)
		ids := make([]int, len(l))
		for i := range ids {
			ids[i] = i
		}
		slices.SortStableFunc(ids, func(a, b int) int {
			if l[a] > l[b] {
				return -1
			} else if l[a] < l[b] {
				return 1
			}
			return 0
		})
		out := make([]sampler.TokenLogprob, k)
		for i := range out {
			out[i] = sampler.TokenLogprob{Token: int32(ids[i]), Logprob: float64(l[ids[i]]) - lse}
		}
		return out
	}
	want := make([]PromptLogprob, len(prompt))
	for pos := 1; pos < len(prompt); pos++ {
		l := rows[pos-1]
		want[pos] = PromptLogprob{Logprob: float64(l[prompt[pos]]) - sampler.LogSumExp(l), Rank: sampler.Rank(l, prompt[pos]), Top: topOf(l, promptTop)}
	}
	want[0].Top = gotPrompt[0].Top // position 0 has nothing to score
	approx := cmpopts.EquateApprox(0, 1e-6)
	if d := cmp.Diff(want, gotPrompt, approx); d != "" {
		t.Errorf("prompt logprobs (-one step +engine chunks):\n%s", d)
	}
	for i := range maxOut {
		l := rows[len(prompt)-1+i]
		if tok := int32(sampler.Argmax(l)); toks[0][i] != tok {
			t.Fatalf("token %d is %d, greedy on the reference row is %d", i, toks[0][i], tok)
		}
		if d := cmp.Diff(float64(l[toks[0][i]])-sampler.LogSumExp(l), lps[0][i], approx); d != "" {
			t.Errorf("token %d logprob (-reference +engine): %s", i, d)
		}
		if d := cmp.Diff(topOf(l, top), tops[0][i], approx); d != "" {
			t.Errorf("token %d top logprobs (-reference +engine):\n%s", i, d)
		}
	}

	// max tokens 0: the prompt's scores and no token.
	ch, err = e.Submit(context.Background(), Request{ID: "echo", PromptIDs: prompt, MaxTokens: 0, ScorePrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	toks, _, last, gotPrompt, _ := choices(t, ch, 1)
	if len(toks[0]) != 0 || last[0].Finish != FinishLength || last[0].OutputTokens != 0 || len(gotPrompt) != len(prompt) {
		t.Errorf("max tokens 0: tokens %v, last %+v, %d prompt entries", toks[0], last[0], len(gotPrompt))
	}
	for pos := 1; pos < len(prompt); pos++ {
		if d := cmp.Diff(want[pos].Logprob, gotPrompt[pos].Logprob, approx); d != "" {
			t.Errorf("max tokens 0, position %d: %s", pos, d)
		}
	}
	if _, err := e.Submit(context.Background(), Request{ID: "bad", PromptIDs: prompt, MaxTokens: 0}); err == nil {
		t.Error("max tokens 0 without prompt scoring accepted")
	}
}
