package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/spec"
)

// fakeModel is a config for the fake executor: glm5-mini's cache shapes with
// a small vocabulary.
func fakeModel(t testing.TB) *config.Model {
	t.Helper()
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		t.Fatal(err)
	}
	cfg.VocabSize = 61
	cfg.MaxPositionEmbeddings = 64
	return cfg
}

// collect reads a stream to its end. It allocates nothing while the stream
// runs (its slices are sized up front), so that it cannot disturb the
// engine's allocation counts.
func collect(ch <-chan Event) (toks []int32, lps []float64, last Event) {
	toks, lps = make([]int32, 0, cap(ch)), make([]float64, 0, cap(ch))
	for ev := range ch {
		last = ev
		if ev.Err == nil {
			toks = append(toks, int32(ev.Token))
			lps = append(lps, ev.Logprob)
		}
	}
	return toks, lps, last
}

func TestOptionsRefusedBeforeLoading(t *testing.T) {
	cfg := fakeModel(t)
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"negative batched tokens", Options{MaxNumBatchedTokens: -1}, "got -1"},
		{"batched below seqs", Options{MaxNumBatchedTokens: 8, MaxNumSeqs: 16}, "at least 16"},
		{"model len beyond the model", Options{MaxModelLen: 65}, "at most 64"},
		{"utilization above one", Options{MemoryUtilization: 1.5}, "0.9 is the usual setting"},
		{"negative limit", Options{MemoryLimit: -5}, "--memory-limit must be ≥ 0"},
		{"kv memory below one request", Options{MaxModelLen: 64, BlockSize: 16, KVCacheMemory: 1000}, "set --kv-cache-memory to at least"},
		{"limit below one request's KV", Options{MaxModelLen: 64, MemoryLimit: 256 << 10}, "set --memory-limit above"},
		{"zero-size workspace", Options{WorkspaceBytes: map[string]int64{"logits": 0}}, "must be > 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.WithDefaults(cfg).Validate(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

var reLimit = regexp.MustCompile(`smallest working --memory-limit (\d+) bytes, or --memory-utilization ([0-9.]+)`)

// TestBudgetRefusalSuggestsWorkingSettings: a limit too small for one
// request is refused, and the limit and the utilization the refusal names
// both start.
func TestBudgetRefusalSuggestsWorkingSettings(t *testing.T) {
	cfg := fakeModel(t)
	factory, _ := fakeFactory(kvcache.Layout{N: 1, I: 1}, cfg.VocabSize)
	const weights = 3<<20 + 512<<10
	base := Options{MaxNumBatchedTokens: 32, MaxNumSeqs: 4, MaxModelLen: 64, BlockSize: 16, MemoryLimit: 4 << 20}
	_, err := New(cfg, weights, factory, base)
	if err == nil {
		t.Fatal("a 4 MiB limit with 3.5 MiB of weights started")
	}
	m := reLimit.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("refusal names no working limit and utilization: %v", err)
	}
	limit, _ := strconv.ParseInt(m[1], 10, 64)
	util, _ := strconv.ParseFloat(m[2], 64)
	for _, tc := range []struct {
		name string
		edit func(*Options)
	}{
		{"suggested limit", func(o *Options) { o.MemoryLimit = limit }},
		{"one byte less", func(o *Options) { o.MemoryLimit = limit - 1 }},
		{"suggested utilization", func(o *Options) { o.MemoryLimit = 8 << 20; o.MemoryUtilization = 0.5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			e, err := New(cfg, weights, factory, o)
			if tc.name == "one byte less" {
				if err == nil {
					e.Close()
					t.Fatalf("limit %d, one byte below the suggestion, started", o.MemoryLimit)
				}
				return
			}
			if tc.name == "suggested utilization" && err != nil {
				m := reLimit.FindStringSubmatch(err.Error())
				if m == nil {
					t.Fatal(err)
				}
				u, _ := strconv.ParseFloat(m[2], 64)
				o.MemoryUtilization = u
				e, err = New(cfg, weights, factory, o)
			}
			if err != nil {
				t.Fatalf("suggested setting refused: %v", err)
			}
			defer e.Close()
			mem := e.Memory()
			if mem.NumBlocks < 4 {
				t.Errorf("%d blocks, want at least the 4 of one 64-token request", mem.NumBlocks)
			}
		})
	}
	_ = util
}

// TestKVCacheMemoryIsRespected: --kv-cache-memory sets the cache bytes.
func TestKVCacheMemoryIsRespected(t *testing.T) {
	cfg := fakeModel(t)
	factory, _ := fakeFactory(kvcache.Layout{N: 1, I: 1}, cfg.VocabSize)
	o := Options{MaxNumBatchedTokens: 32, MaxNumSeqs: 4, MaxModelLen: 64, BlockSize: 16, KVCacheMemory: 5 << 20, MemoryLimit: 1 << 30}
	e, err := New(cfg, 0, factory, o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	slot, _ := o.WithDefaults(cfg).SlotBytes(cfg)
	blockBytes := 16 * slot
	mem := e.Memory()
	want := (5 << 20) / blockBytes
	if int64(mem.NumBlocks) != want || mem.KVBytes != want*blockBytes {
		t.Errorf("%d blocks, %d bytes; want %d blocks of %d bytes from --kv-cache-memory %d", mem.NumBlocks, mem.KVBytes, want, blockBytes, 5<<20)
	}
	var sb strings.Builder
	if err := mem.WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"--kv-cache-memory 5242880", "KV tokens per rank", "context tokens (DCP 1)", "max concurrency at 64 tokens", "fake logits"} {
		if !strings.Contains(sb.String(), s) {
			t.Errorf("start-up table lacks %q:\n%s", s, sb.String())
		}
	}
}

func TestWorkspaceOverrides(t *testing.T) {
	cfg := fakeModel(t)
	factory, _ := fakeFactory(kvcache.Layout{N: 1, I: 1}, cfg.VocabSize)
	// The fake's "fake rows" buffer holds 4 B per batched token: 128 B here.
	tests := []struct {
		name string
		over map[string]int64
		want string
	}{
		{"smaller than needed", map[string]int64{"fake-rows": 100}, "set it to at least 128"},
		{"unknown name", map[string]int64{"rows": 100}, "the workspaces are fake-rows, fake-logits"},
		{"enough", map[string]int64{"Fake Rows": 128}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{MaxNumBatchedTokens: 32, MaxNumSeqs: 4, MaxModelLen: 64, MemoryLimit: 1 << 30, WorkspaceBytes: tc.over}
			e, err := New(cfg, 0, factory, o)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				e.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestWarmupLeavesNoPlansToBuild runs a mixed workload after warm-up on an
// executor that builds a plan per row-count bucket: none may be built.
func TestWarmupLeavesNoPlansToBuild(t *testing.T) {
	cfg := fakeModel(t)
	for _, sz := range []struct{ tokens, seqs int }{{32, 4}, {40, 6}, {7, 7}, {64, 1}} {
		t.Run(strconv.Itoa(sz.tokens)+"x"+strconv.Itoa(sz.seqs), func(t *testing.T) {
			factory, made := fakeFactory(kvcache.Layout{N: 1, I: 1}, cfg.VocabSize)
			e, err := New(cfg, 0, factory, Options{MaxNumBatchedTokens: sz.tokens, MaxNumSeqs: sz.seqs, MaxModelLen: 64, MemoryLimit: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var wg sync.WaitGroup
			for i := range 24 {
				ch, err := e.Submit(context.Background(), Request{PromptIDs: []int{1 + i%5, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}[:1+(i*7)%19], MaxTokens: 1 + i%9, IgnoreEOS: true})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() { defer wg.Done(); collect(ch) }()
			}
			wg.Wait()
			st := e.Stats()
			if st.KernelPlansBuiltAfterWarmup != 0 {
				t.Errorf("%d kernel plans built after warm-up", st.KernelPlansBuiltAfterWarmup)
			}
			serving := (*made)[len(*made)-1]
			if serving.KernelPlansBuilt() == 0 || st.DecodeSteps == 0 || st.Steps == st.DecodeSteps {
				t.Errorf("workload not mixed or warm-up built nothing: %d plans, %d steps, %d decode-only", serving.KernelPlansBuilt(), st.Steps, st.DecodeSteps)
			}
		})
	}
}

// TestSubmitRefusalsAndCancellation: a prompt longer than max-model-len names
// both numbers, a full queue is ErrOverloaded, and a cancelled request ends
// with FinishAbort and frees its blocks at once.
func TestSubmitRefusalsAndCancellation(t *testing.T) {
	cfg := fakeModel(t)
	factory, made := fakeFactory(kvcache.Layout{N: 1, I: 1}, cfg.VocabSize)
	e, err := New(cfg, 0, factory, Options{MaxNumBatchedTokens: 32, MaxNumSeqs: 1, MaxModelLen: 48, MemoryLimit: 1 << 30, MaxQueue: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = e.Submit(context.Background(), Request{PromptIDs: make([]int, 49), MaxTokens: 1})
	if err == nil || !strings.Contains(err.Error(), "49 tokens") || !strings.Contains(err.Error(), "--max-model-len 48") {
		t.Fatalf("long prompt: %v", err)
	}
	fx := (*made)[len(*made)-1]
	fx.hold.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	a, err := e.Submit(ctx, Request{PromptIDs: []int{1, 2, 3}, MaxTokens: 40, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	fx.gate <- struct{}{} // the loop is now inside A's first step or past it
	b, err := e.Submit(context.Background(), Request{PromptIDs: []int{4}, MaxTokens: 2, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(context.Background(), Request{PromptIDs: []int{5}, MaxTokens: 2}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("third request with a queue of 1: %v, want ErrOverloaded", err)
	}
	cancel()
	// Wait until the cancellation reached the engine (queued, or already
	// taken by the loop between two steps), then let the step finish.
	for {
		e.mu.Lock()
		reached := len(e.aborts) > 0 || e.stats.Aborted > 0
		e.mu.Unlock()
		if reached {
			break
		}
		runtime.Gosched()
	}
	fx.hold.Store(false)
	close(fx.gate)
	_, _, last := collect(a)
	if last.Finish != FinishAbort || !errors.Is(last.Err, context.Canceled) {
		t.Errorf("cancelled request ended with %+v", last)
	}
	toks, _, lastB := collect(b)
	if lastB.Finish != FinishLength || len(toks) != 2 {
		t.Errorf("request B: %d tokens, end %+v", len(toks), lastB)
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	pre, err := e.Submit(done, Request{PromptIDs: []int{6}, MaxTokens: 30, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, last := collect(pre); last.Finish != FinishAbort {
		t.Errorf("request submitted with a cancelled context ended with %+v", last)
	}
	if st := e.Stats(); st.KVBlocksInUse != 0 || st.Aborted < 1 {
		t.Errorf("after all requests: %d blocks held, %d aborted", st.KVBlocksInUse, st.Aborted)
	}
}

var (
	miniOnce  sync.Once
	miniModel *model.Model
	miniErr   error
)

// glm5Mini builds the glm5-mini model with its preset random weights, once
// per test binary.
func glm5Mini(t testing.TB) (*config.Model, *model.Model) {
	t.Helper()
	miniOnce.Do(func() {
		cfg, src, err := model.Source("glm5-mini", model.DefaultWeightSeed)
		if err != nil {
			miniErr = err
			return
		}
		miniModel, miniErr = model.Build(cfg, src, model.Shard{TPSize: 1})
	})
	if miniErr != nil {
		t.Fatal(miniErr)
	}
	return miniModel.Cfg, miniModel
}

// runAlone generates greedily for one prompt with its own runner, one
// sequence per step, the way a single request runs without an engine.
func runAlone(t *testing.T, m *model.Model, prompt []int, maxOut, blockSize int) ([]int32, []float64) {
	t.Helper()
	return runAloneKV(t, m, prompt, maxOut, blockSize, kvcache.KVBF16)
}

// runAloneKV is runAlone with a chosen KV cache dtype.
func runAloneKV(t *testing.T, m *model.Model, prompt []int, maxOut, blockSize int, kv kvcache.KVDType) ([]int32, []float64) {
	t.Helper()
	total := len(prompt) + maxOut
	blocks := (total + blockSize - 1) / blockSize
	r, err := model.NewRunner(m, model.RunnerOptions{MaxTokens: len(prompt), MaxModelLen: blocks * blockSize, MaxLogitRows: 1, MaxSeqs: 1, BlockSize: blockSize, NumBlocks: blocks, KVDType: kv})
	if err != nil {
		t.Fatal(err)
	}
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	seq := model.Seq{BlockTable: table}
	for _, id := range prompt {
		seq.Tokens = append(seq.Tokens, int32(id))
	}
	s, _ := sampler.NewState(sampler.Params{}, m.Cfg.VocabSize, nil, maxOut)
	sc := sampler.NewScratch(m.Cfg.VocabSize)
	var toks []int32
	var lps []float64
	for len(toks) < maxOut {
		if err := r.Forward(&model.Batch{Seqs: []model.Seq{seq}}); err != nil {
			t.Fatal(err)
		}
		_, l := r.Logits(0)
		tok, lp := s.Sample(sc, l)
		toks, lps = append(toks, int32(tok)), append(lps, lp)
		seq.Start += len(seq.Tokens)
		seq.Tokens = []int32{int32(tok)}
	}
	return toks, lps
}

// TestEngineMatchesRequestsRunAlone serves concurrent requests with shared
// prefixes on glm5-mini under a cache small enough to preempt, and compares
// every greedy stream with the request run alone. It also checks that the
// serving cache is exactly the budgeted size and that measured decode steps
// allocate nothing.
func TestEngineMatchesRequestsRunAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-mini")
	}
	cfg, m := glm5Mini(t)
	const B = 8
	o := Options{MaxNumBatchedTokens: 24, MaxNumSeqs: 3, MaxModelLen: 32, BlockSize: B, KVDType: kvcache.KVBF16,
		MemoryLimit: 1 << 30, MeasureAllocs: true}
	slot, _ := o.WithDefaults(cfg).SlotBytes(cfg)
	o.KVCacheMemory = 4 * B * slot // 4 blocks, one 32-token request: three of up to 4 blocks must preempt
	e, err := New(cfg, WeightBytes(m), SingleRank(m), o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := e.exec.(*model.Runner).Cache.Bytes(); got != e.Memory().KVBytes {
		t.Errorf("runner cache holds %d bytes, the budget counted %d", got, e.Memory().KVBytes)
	}
	shared := []int{11, 200, 3000, 45, 7, 8191, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}
	prompts := [][]int{shared, shared[:9], append(append([]int{}, shared[:16]...), 999, 998), shared[:17]}
	const maxOut = 8
	type stream struct {
		Toks []int32
		LPs  []float64
	}
	// The engine's own allocations are counted (AllocCounter), over every
	// decode-only step of each of three runs of the workload: each must be
	// 0, whatever the test's goroutine allocates meanwhile.
	var runs [3][]stream
	var allocs [3]int64
	finished, decodeSteps := int64(0), int64(0)
	for run := range runs {
		got := make([]stream, len(prompts))
		chans := make([]<-chan Event, len(prompts))
		var steps int64
		allocs[run], steps = countAllocs(e, func() {
			for i, p := range prompts {
				ch, err := e.Submit(context.Background(), Request{ID: strconv.Itoa(i), PromptIDs: p, MaxTokens: maxOut, IgnoreEOS: true})
				if err != nil {
					t.Fatal(err)
				}
				chans[i] = ch
			}
			finished += int64(len(prompts))
			waitFinished(t, e, finished)
		})
		decodeSteps += steps
		for i, ch := range chans {
			toks, lps, last := collect(ch)
			if last.Err != nil || last.Finish != FinishLength || last.PromptTokens != len(prompts[i]) || last.OutputTokens != maxOut {
				t.Errorf("run %d, request %d ended with %+v", run, i, last)
			}
			got[i] = stream{toks, lps}
		}
		runs[run] = got
	}
	e.Close()
	for i, p := range prompts {
		toks, lps := runAlone(t, m, p, maxOut, B)
		for run, got := range runs {
			if d := cmp.Diff(stream{toks, lps}, got[i], cmpopts.EquateApprox(0, 1e-9)); d != "" {
				t.Errorf("run %d, request %d: engine output differs from the request run alone (-alone +engine):\n%s", run, i, d)
			}
		}
	}
	st := e.Stats()
	if st.Preemptions == 0 || st.PrefixHitTokens == 0 {
		t.Errorf("workload did not exercise preemption (%d) and prefix hits (%d tokens)", st.Preemptions, st.PrefixHitTokens)
	}
	if decodeSteps == 0 || allocs != [3]int64{} {
		t.Errorf("the engine's heap allocations in three runs' decode-only steps: %v over %d steps, want none", allocs, decodeSteps)
	}
	t.Logf("%d steps (%d decode-only), %d preemptions, prefix hit rate %.2f, KV peak %.2f",
		st.Steps, st.DecodeSteps, st.Preemptions, st.PrefixHitRate(), st.KVUsagePeak())
}

// TestWorkspaceSweep runs every step size from 1 to max-num-batched-tokens,
// all-prefill, all-decode and mixed, on a runner sized the way the engine
// sizes it: no step may be refused or grow a buffer.
func TestWorkspaceSweep(t *testing.T) {
	for _, tc := range []struct {
		preset   string
		k        int  // speculative tokens (0: none)
		parallel bool // size for parallel drafting's 1 + 2K rows per sequence
	}{{"glm5-mini", 0, false}, {"glm5-moe-mini", 5, false}, {"glm5-moe-mini", 5, true}} {
		name := fmt.Sprintf("%s-K%d", tc.preset, tc.k)
		if tc.parallel {
			name += "-parallel-drafting"
		}
		t.Run(name, func(t *testing.T) { workspaceSweep(t, tc.preset, tc.k, tc.parallel) })
	}
}

// workspaceSweep is TestWorkspaceSweep for one preset; with k > 0 the
// runner drafts (MTP caches and buffers), decoding sequences carry 1 + k
// rows with logits, and every target step is followed by the draft pass
// over its rows and a chained draft step of one row per sequence, as the
// engine runs them. With parallel, the runner's logit rows are sized by the
// planner's formula for parallel drafting and decoding sequences carry its
// 1 + 2k rows: the shape a GPU deployment with parallel drafting sizes its
// workspaces for (the engine's MTP drafter chains, so it never sends it).
func workspaceSweep(t *testing.T, preset string, k int, parallel bool) {
	cfg, err := config.Load(preset)
	if err != nil {
		t.Fatal(err)
	}
	cfg.VocabSize = 512 // the LM head is not what the sweep is about
	m, err := model.Build(cfg, model.RandomTensors(cfg, 5), model.Shard{TPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{MaxNumBatchedTokens: 40, MaxNumSeqs: 5, MaxModelLen: 32, BlockSize: 8}
	if k > 0 {
		o.Speculative = &spec.Config{Method: "mtp", NumSpeculativeTokens: k}
		// No logit rows for prompt logprobs: the decoding sequences' rows
		// alone must fit the logits the formula sizes.
		o.MaxPromptLogitRows = -1
	}
	if parallel {
		// Room for every sequence to decode with 1 + 2k rows in one step.
		o.MaxNumBatchedTokens = 64
	}
	o = o.WithDefaults(cfg)
	sc := o.scheduler(0)
	sc.NumBlocks = o.MaxNumSeqs * sc.BlocksFor(o.MaxModelLen)
	ro := o.runnerOptions(sc.NumBlocks)
	seqRows := 1 // rows of a decoding sequence: its last token and its drafts
	if k > 0 {
		seqRows = plan.SpecTokensPerSeq(k, parallel)
	}
	if parallel {
		ro.MaxLogitRows = o.MaxNumSeqs*seqRows + sc.MaxPromptLogitRows
	}
	r, err := model.NewRunner(m, ro)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]model.Buffer(nil), r.Buffers()...)
	tokens := make([]int32, o.MaxNumBatchedTokens)
	for i := range tokens {
		tokens[i] = int32(i % cfg.VocabSize)
	}
	rows := make([]int32, o.MaxNumBatchedTokens)
	for i := range rows {
		rows[i] = int32(i)
	}
	// Each sequence gets its own blocks; contexts are as long as allowed. A
	// decoding sequence has seqRows rows.
	batch := func(decodes, prefill int) *model.Batch {
		b := &model.Batch{}
		next := int32(0)
		table := func() []int32 {
			t := make([]int32, sc.BlocksFor(o.MaxModelLen))
			for i := range t {
				t[i] = next
				next++
			}
			return t
		}
		for range decodes {
			b.Seqs = append(b.Seqs, model.Seq{Tokens: tokens[:seqRows], Start: o.MaxModelLen - seqRows, BlockTable: table(), LogitsAll: k > 0})
		}
		seqsLeft := o.MaxNumSeqs - decodes
		for left := prefill; left > 0; seqsLeft-- {
			n := min(left, o.MaxModelLen)
			if seqsLeft == 1 {
				n = left
			}
			b.Seqs = append(b.Seqs, model.Seq{Tokens: tokens[:n], Start: o.MaxModelLen - n, BlockTable: table()})
			left -= n
		}
		return b
	}
	// draft runs the pass over every row of b, then one chained row per
	// sequence.
	draft := func(b *model.Batch) error {
		pass, chain := &model.Batch{}, &model.Batch{}
		row := 0
		for _, s := range b.Seqs {
			pass.Seqs = append(pass.Seqs, model.Seq{Tokens: s.Tokens, Start: s.Start, BlockTable: s.BlockTable, Hidden: rows[row : row+len(s.Tokens)]})
			row += len(s.Tokens)
		}
		if err := r.Draft(0, pass, model.TargetBank); err != nil {
			return fmt.Errorf("draft pass: %w", err)
		}
		for i, s := range b.Seqs {
			chain.Seqs = append(chain.Seqs, model.Seq{Tokens: s.Tokens[:1], Start: s.Start + len(s.Tokens) - 1, BlockTable: s.BlockTable, Hidden: rows[i : i+1]})
		}
		if err := r.Draft(0, chain, model.DraftBank); err != nil {
			return fmt.Errorf("chained draft: %w", err)
		}
		return nil
	}
	prefills, decodes, mixed := 0, map[int]bool{}, 0
	for T := 1; T <= o.MaxNumBatchedTokens; T++ {
		shapes := [][2]int{{0, T}}
		if T%seqRows == 0 && T/seqRows <= o.MaxNumSeqs {
			shapes = append(shapes, [2]int{T / seqRows, 0})
		}
		if d := min((T-1)/seqRows, o.MaxNumSeqs-1); d > 0 {
			shapes = append(shapes, [2]int{d, T - d*seqRows})
		}
		for _, sh := range shapes {
			b := batch(sh[0], sh[1])
			if (sh[1]+o.MaxModelLen-1)/o.MaxModelLen+sh[0] > o.MaxNumSeqs {
				continue // more sequences than a step may hold
			}
			for _, s := range b.Seqs {
				if s.Start+len(s.Tokens) > o.MaxModelLen {
					t.Fatalf("shape %v exceeds max-model-len", sh)
				}
			}
			if err := r.Forward(b); err != nil {
				t.Fatalf("%d tokens (%d decodes, %d prefill): %v", T, sh[0], sh[1], err)
			}
			if k > 0 {
				if err := draft(b); err != nil {
					t.Fatalf("%d tokens (%d decodes, %d prefill): %v", T, sh[0], sh[1], err)
				}
			}
			switch {
			case sh[0] == 0:
				prefills++
			case sh[1] == 0:
				decodes[sh[0]] = true
			default:
				mixed++
			}
		}
	}
	if d := cmp.Diff(want, r.Buffers()); d != "" {
		t.Errorf("buffers changed over the sweep (-start +end):\n%s", d)
	}
	maxDecodes := min(o.MaxNumSeqs, o.MaxNumBatchedTokens/seqRows)
	if prefills != o.MaxNumBatchedTokens || len(decodes) != maxDecodes || mixed < o.MaxNumBatchedTokens/2 {
		t.Errorf("sweep over %s of buffers ran %d prefill-only steps, decode-only steps of %d sizes and %d mixed steps; want %d, %d and at least %d",
			plan.FormatBytes(r.BufferBytes()), prefills, len(decodes), mixed, o.MaxNumBatchedTokens, maxDecodes, o.MaxNumBatchedTokens/2)
	}
}
