package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
)

func TestSchedulerConfigRefusals(t *testing.T) {
	ok := SchedulerConfig{MaxNumBatchedTokens: 64, MaxNumSeqs: 8, MaxModelLen: 128, BlockSize: 16, NumBlocks: 8}
	tests := []struct {
		name string
		edit func(*SchedulerConfig)
		want string // a fragment naming the working value
	}{
		{"valid", func(*SchedulerConfig) {}, ""},
		{"zero seqs", func(c *SchedulerConfig) { c.MaxNumSeqs = 0 }, "--max-num-seqs must be ≥ 1, got 0"},
		{"negative tokens", func(c *SchedulerConfig) { c.MaxNumBatchedTokens = -4 }, "got -4"},
		{"tokens below seqs", func(c *SchedulerConfig) { c.MaxNumBatchedTokens = 4 }, "set --max-num-batched-tokens to at least 8"},
		{"zero model len", func(c *SchedulerConfig) { c.MaxModelLen = 0 }, "--max-model-len must be ≥ 1"},
		{"zero block", func(c *SchedulerConfig) { c.BlockSize = 0 }, "--block-size must be ≥ 1"},
		{"block not multiple of dcp×interleave", func(c *SchedulerConfig) { c.Layout = kvcache.Layout{N: 4, I: 8} }, "set --block-size to 32"},
		{"cache below one request", func(c *SchedulerConfig) { c.NumBlocks = 5 }, "at least 8 blocks"},
		{"dcp cache counts local length", func(c *SchedulerConfig) { c.Layout = kvcache.Layout{N: 2, I: 1}; c.NumBlocks = 8 }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if (err != nil) != (tc.want != "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestBlocksForUsesLocalLength pins the block count under DCP to the most
// loaded rank's local length in local blocks of BlockSize/N slots.
func TestBlocksForUsesLocalLength(t *testing.T) {
	tests := []struct {
		n, i, block, len, want int
	}{
		{1, 1, 16, 1, 1}, {1, 1, 16, 16, 1}, {1, 1, 16, 17, 2},
		{2, 1, 16, 16, 1}, {2, 1, 16, 17, 2}, {4, 2, 16, 33, 3},
		{4, 4, 16, 1, 1}, {4, 4, 16, 64, 4}, {4, 4, 16, 65, 5},
	}
	for _, tc := range tests {
		c := SchedulerConfig{BlockSize: tc.block, Layout: kvcache.Layout{N: tc.n, I: tc.i}}
		l, lb := c.layout(), c.LocalBlockSize()
		// Independent definition: a block id covers BlockSize positions.
		if got, def := c.BlocksFor(tc.len), (tc.len+tc.block-1)/tc.block; got != tc.want || got != def {
			t.Errorf("N=%d I=%d B=%d: BlocksFor(%d) = %d, want %d (ceil = %d)", tc.n, tc.i, tc.block, tc.len, got, tc.want, def)
		}
		if most := l.LocalLen(tc.len, 0); (most+lb-1)/lb != tc.want {
			t.Errorf("rank 0 local length %d does not need %d local blocks", most, tc.want)
		}
	}
}

// stepAll schedules, runs the plan on ex, samples greedily and completes.
func stepAll(t testing.TB, s *Scheduler, ex Executor, vocab int) (*StepPlan, []Finished, []int32) {
	t.Helper()
	p := s.Schedule()
	if err := ex.Forward(&p.Batch); err != nil {
		t.Fatal(err)
	}
	sampled := make([]int32, len(p.Entries))
	for i, e := range p.Entries {
		sampled[i] = -1
		if e.Sample {
			_, l := ex.Logits(i)
			sampled[i] = int32(sampler.Argmax(l[:vocab]))
		}
	}
	fin, err := s.Complete(sampled, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, slices.Clone(fin), sampled
}

func fakeRunnerOpts(c SchedulerConfig) model.RunnerOptions {
	return model.RunnerOptions{MaxTokens: c.MaxNumBatchedTokens, MaxModelLen: c.MaxModelLen, MaxLogitRows: c.MaxNumSeqs,
		MaxSeqs: c.MaxNumSeqs, BlockSize: c.LocalBlockSize(), NumBlocks: c.NumBlocks}
}

func ids(n, base int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(base + i)
	}
	return s
}

// TestScheduleDecodesFirstChunkedPrefill pins the order and sizes of the
// first steps: a long prompt is chunked under the token budget, decodes go
// first, and a new request fills what the budget leaves.
func TestScheduleDecodesFirstChunkedPrefill(t *testing.T) {
	c := SchedulerConfig{MaxNumBatchedTokens: 10, MaxNumSeqs: 3, MaxModelLen: 64, BlockSize: 4, NumBlocks: 64}
	s, err := NewScheduler(c)
	if err != nil {
		t.Fatal(err)
	}
	ex := newFakeExec(fakeRunnerOpts(c), kvcache.Layout{N: 1, I: 1}, 97)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Add(1, ids(6, 10), 4, nil))
	must(s.Add(2, ids(13, 30), 4, nil))
	var got [][]Entry
	for range 4 {
		p, _, _ := stepAll(t, s, ex, 97)
		got = append(got, slices.Clone(p.Entries))
		if p.NumTokens > c.MaxNumBatchedTokens {
			t.Fatalf("step of %d tokens", p.NumTokens)
		}
		if p.Entries[0].ID == 1 && len(got) == 1 {
			must(s.Add(3, ids(9, 50), 2, nil))
		}
	}
	want := [][]Entry{
		{{ID: 1, NumTokens: 6, Sample: true, LogitRows: 1}, {ID: 2, NumTokens: 4, LogitRows: 1}},
		{{ID: 1, Start: 6, NumTokens: 1, Decode: true, Sample: true, LogitRows: 1}, {ID: 2, Start: 4, NumTokens: 9, Sample: true, LogitRows: 1}},
		{{ID: 1, Start: 7, NumTokens: 1, Decode: true, Sample: true, LogitRows: 1}, {ID: 2, Start: 13, NumTokens: 1, Decode: true, Sample: true, LogitRows: 1}, {ID: 3, NumTokens: 8, LogitRows: 1}},
		{{ID: 1, Start: 8, NumTokens: 1, Decode: true, Sample: true, LogitRows: 1}, {ID: 2, Start: 14, NumTokens: 1, Decode: true, Sample: true, LogitRows: 1}, {ID: 3, Start: 8, NumTokens: 1, Sample: true, LogitRows: 1}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("plans (-want +got):\n%s", d)
	}
}

// TestPrefixHitGranularityIsOneBlock: a request sharing k full blocks of a
// finished request's tokens reuses exactly those k blocks, and the last
// prompt token is always computed.
func TestPrefixHitGranularityIsOneBlock(t *testing.T) {
	for _, layout := range []kvcache.Layout{{N: 1, I: 1}, {N: 2, I: 2}, {N: 4, I: 1}} {
		t.Run(fmt.Sprintf("dcp%d_i%d", layout.N, layout.I), func(t *testing.T) {
			const B = 8
			c := SchedulerConfig{MaxNumBatchedTokens: 64, MaxNumSeqs: 4, MaxModelLen: 64, BlockSize: B, Layout: layout, NumBlocks: 32, PrefixCaching: true}
			s, err := NewScheduler(c)
			if err != nil {
				t.Fatal(err)
			}
			ex := newFakeExec(fakeRunnerOpts(c), layout, 101)
			base := ids(40, 7) // 5 full blocks
			if err := s.Add(1, base, 1, nil); err != nil {
				t.Fatal(err)
			}
			stepAll(t, s, ex, 101)
			tests := []struct {
				id     uint64
				prompt []int32
				hit    int
			}{
				{2, slices.Concat(base[:19], ids(5, 900)), 16}, // shares 2 full blocks and 3 tokens
				{3, base[:24], 16}, // 3 full blocks, the last token recomputed
				{4, base[:25], 24},
				{5, slices.Concat([]int32{999}, base[1:30]), 0}, // differs in the first block
			}
			for _, tc := range tests {
				before := s.PrefixHitTokens
				if err := s.Add(tc.id, tc.prompt, 1, nil); err != nil {
					t.Fatal(err)
				}
				_, fin, sampled := stepAll(t, s, ex, 101)
				if got := int(s.PrefixHitTokens - before); got != tc.hit {
					t.Errorf("request %d: %d prefix-hit tokens, want %d", tc.id, got, tc.hit)
				}
				if len(fin) != 1 || sampled[0] != fakeNext(tc.prompt, 101) {
					t.Errorf("request %d: sampled %v, want %d from the whole prompt", tc.id, sampled, fakeNext(tc.prompt, 101))
				}
			}
		})
	}
}

// TestAbortFreesBlocksAtOnce: an aborted running request's blocks are back
// before the next step.
func TestAbortFreesBlocksAtOnce(t *testing.T) {
	c := SchedulerConfig{MaxNumBatchedTokens: 32, MaxNumSeqs: 2, MaxModelLen: 32, BlockSize: 4, NumBlocks: 8}
	s, _ := NewScheduler(c)
	ex := newFakeExec(fakeRunnerOpts(c), kvcache.Layout{N: 1, I: 1}, 31)
	if err := s.Add(1, ids(13, 1), 10, nil); err != nil {
		t.Fatal(err)
	}
	stepAll(t, s, ex, 31)
	if got := s.HeldBlocks(); got != 4 {
		t.Fatalf("holding %d blocks after a 13-token prefill, want 4", got)
	}
	if !s.Abort(1) || s.HeldBlocks() != 0 || s.blocks.available() != 8 {
		t.Fatalf("after abort: held %d, available %d of 8", s.HeldBlocks(), s.blocks.available())
	}
	if s.Abort(1) {
		t.Fatal("second abort of the same request reported success")
	}
}

// checkInvariants verifies the block bookkeeping against the requests.
func checkInvariants(s *Scheduler) error {
	refs := make([]int32, s.blocks.capacity())
	for _, r := range s.running {
		if want := s.cfg.BlocksFor(r.computed); len(r.blocks) < want {
			return fmt.Errorf("request %d: %d blocks for %d computed positions, needs %d", r.id, len(r.blocks), r.computed, want)
		}
		for j, b := range r.blocks {
			refs[b]++
			if refs[b] > 1 && !s.blocks.cached[b] {
				return fmt.Errorf("block %d is shared but not a cached block", b)
			}
			if refs[b] > 1 && (j+1)*s.cfg.BlockSize > r.computed {
				return fmt.Errorf("request %d writes shared block %d", r.id, b)
			}
		}
	}
	for _, r := range s.waiting {
		if len(r.blocks) != 0 {
			return fmt.Errorf("waiting request %d holds %d blocks", r.id, len(r.blocks))
		}
	}
	held := 0
	for b, n := range refs {
		if n != s.blocks.ref[b] {
			return fmt.Errorf("block %d: reference count %d, held by %d requests", b, s.blocks.ref[b], n)
		}
		if n > 0 {
			held++
		}
	}
	evictable := 0
	for b := s.blocks.head; b >= 0; b = s.blocks.next[b] {
		if s.blocks.ref[b] != 0 || !s.blocks.cached[b] {
			return fmt.Errorf("evictable block %d has ref %d cached %v", b, s.blocks.ref[b], s.blocks.cached[b])
		}
		evictable++
	}
	if evictable != s.blocks.evictable {
		return fmt.Errorf("LRU holds %d blocks, counter says %d", evictable, s.blocks.evictable)
	}
	if held+evictable+s.blocks.pool.FreeCount() != s.blocks.capacity() {
		return fmt.Errorf("held %d + evictable %d + free %d != capacity %d (leak)", held, evictable, s.blocks.pool.FreeCount(), s.blocks.capacity())
	}
	x := &s.blocks.index
	for i, b := range x.ids {
		if b >= 0 && (!s.blocks.cached[b] || s.blocks.hash[b] != x.keys[i]) {
			return fmt.Errorf("prefix index maps %x to block %d that is not cached under it", x.keys[i], b)
		}
	}
	for b, cached := range s.blocks.cached {
		if !cached {
			continue
		}
		if got, ok := x.get(s.blocks.hash[b]); !ok || got != int32(b) {
			return fmt.Errorf("cached block %d is not found under its hash %x", b, s.blocks.hash[b])
		}
	}
	return nil
}

// aloneOutput is what request prompt generates run alone on the fake model.
func aloneOutput(prompt []int32, maxOut, maxModelLen, vocab int, stop []int32) []int32 {
	seq := slices.Clone(prompt)
	var out []int32
	for {
		tok := fakeNext(seq, vocab)
		seq = append(seq, tok)
		out = append(out, tok)
		if slices.Contains(stop, tok) || len(out) >= maxOut || len(seq) >= maxModelLen {
			return out
		}
	}
}

// TestRandomizedSimulation drives the scheduler with random arrivals, shared
// prefixes, aborts and a cache small enough to preempt, checking the block
// invariants after every step, that every request finishes, and that each
// output equals the request run alone.
func TestRandomizedSimulation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layout  kvcache.Layout
		block   int
		caching bool
		seed    uint64
	}{
		{"dcp1", kvcache.Layout{N: 1, I: 1}, 4, true, 1},
		{"dcp1_nocache", kvcache.Layout{N: 1, I: 1}, 4, false, 2},
		{"dcp2_i2", kvcache.Layout{N: 2, I: 2}, 8, true, 3},
		{"dcp4_i1", kvcache.Layout{N: 4, I: 1}, 4, true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const vocab, maxModelLen = 61, 48
			c := SchedulerConfig{MaxNumBatchedTokens: 24, MaxNumSeqs: 5, MaxModelLen: maxModelLen, BlockSize: tc.block,
				Layout: tc.layout, PrefixCaching: tc.caching}
			c.NumBlocks = c.BlocksFor(maxModelLen) + 3
			s, err := NewScheduler(c)
			if err != nil {
				t.Fatal(err)
			}
			ex := newFakeExec(fakeRunnerOpts(c), tc.layout, vocab)
			rng := rand.New(rand.NewPCG(tc.seed, 99))
			type want struct {
				out     []int32
				aborted bool
			}
			wants := map[uint64]*want{}
			got := map[uint64][]int32{}
			prefixes := [][]int32{ids(20, 3), ids(13, 40)}
			next := uint64(1)
			const total = 60
			ended := 0
			for step := 0; len(wants) < total || s.Running()+s.Waiting() > 0; step++ {
				if step > 5000 {
					t.Fatalf("no progress: %d running, %d waiting", s.Running(), s.Waiting())
				}
				for len(wants) < total && rng.IntN(3) == 0 {
					var prompt []int32
					if rng.IntN(2) == 0 {
						pre := prefixes[rng.IntN(len(prefixes))]
						prompt = slices.Concat(pre[:1+rng.IntN(len(pre))], ids(rng.IntN(8), rng.IntN(vocab-8)))
					} else {
						prompt = ids(1+rng.IntN(30), rng.IntN(vocab-30))
					}
					maxOut := 1 + rng.IntN(12)
					stop := []int32{int32(rng.IntN(vocab))}
					if err := s.Add(next, prompt, maxOut, stop); err != nil {
						t.Fatal(err)
					}
					wants[next] = &want{out: aloneOutput(prompt, maxOut, maxModelLen, vocab, stop)}
					next++
				}
				if s.Running() > 0 && rng.IntN(25) == 0 {
					v := s.running[rng.IntN(len(s.running))]
					s.Abort(v.id)
					wants[v.id].aborted = true
					ended++
				}
				p, fin, sampled := stepAll(t, s, ex, vocab)
				if p.NumTokens > c.MaxNumBatchedTokens || len(p.Entries) > c.MaxNumSeqs {
					t.Fatalf("step %d: %d tokens, %d sequences over the limits", step, p.NumTokens, len(p.Entries))
				}
				for i, e := range p.Entries {
					if i < p.NumDecodes != e.Decode {
						t.Fatalf("step %d: decode entries are not first: %+v", step, p.Entries)
					}
					if e.Sample {
						got[e.ID] = append(got[e.ID], sampled[i])
					}
				}
				ended += len(fin)
				for _, f := range fin {
					if w := wants[f.ID]; !w.aborted {
						if d := cmp.Diff(w.out, got[f.ID]); d != "" {
							t.Fatalf("request %d output differs from running alone (-alone +batched):\n%s", f.ID, d)
						}
					}
					delete(got, f.ID)
				}
				if err := checkInvariants(s); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			if ended != total {
				t.Fatalf("%d of %d requests ended", ended, total)
			}
			if s.HeldBlocks() != 0 {
				t.Fatalf("%d blocks held after every request ended", s.HeldBlocks())
			}
			if s.Preemptions == 0 {
				t.Errorf("the simulation never preempted; shrink the cache")
			}
			if tc.caching && s.PrefixHitTokens == 0 {
				t.Errorf("the simulation never hit the prefix cache")
			}
			t.Logf("%d preemptions, %d of %d admitted tokens from the prefix cache", s.Preemptions, s.PrefixHitTokens, s.PromptTokens)
		})
	}
}

// TestPrefixIndex checks the open-addressing index against a map under
// random inserts and deletes, with colliding home slots.
func TestPrefixIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := newPrefixIndex(40)
	ref := map[uint64]int32{}
	keys := make([]uint64, 60)
	for i := range keys {
		keys[i] = rng.Uint64() % 200 // few distinct values: many collisions
	}
	for step := range 20000 {
		h := keys[rng.IntN(len(keys))]
		_, in := ref[h]
		switch {
		case !in && len(ref) < 40:
			ref[h] = int32(step)
			x.put(h, int32(step))
		case in:
			delete(ref, h)
			x.del(h)
		}
		for _, k := range keys {
			want, ok := ref[k]
			got, gotOK := x.get(k)
			if ok != gotOK || (ok && got != want) {
				t.Fatalf("step %d: get(%d) = %d, %v; want %d, %v", step, k, got, gotOK, want, ok)
			}
		}
	}
}

// TestAddRefusesEndersNotOnePerSequence: stop matchers come one per
// sequence, or the request is refused naming both counts.
func TestAddRefusesEndersNotOnePerSequence(t *testing.T) {
	s, err := NewScheduler(SchedulerConfig{MaxNumBatchedTokens: 16, MaxNumSeqs: 4, MaxModelLen: 32, BlockSize: 4, NumBlocks: 16})
	if err != nil {
		t.Fatal(err)
	}
	err = s.AddWith(1, ids(3, 1), 4, nil, SeqOptions{N: 3, Enders: []StopMatcher{suffixStop{1}.NewStopMatcher()}})
	if err == nil || !strings.Contains(err.Error(), "1 stop matchers for 3 sequences") {
		t.Errorf("AddWith with 1 matcher for 3 sequences: %v", err)
	}
	if err := s.AddWith(1, ids(3, 1), 4, nil, SeqOptions{N: 1, Enders: []StopMatcher{suffixStop{1}.NewStopMatcher()}}); err != nil {
		t.Errorf("one matcher for one sequence refused: %v", err)
	}
}
