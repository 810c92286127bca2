package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
)

// SchedulerConfig sizes a Scheduler. Every field is fixed at start-up.
type SchedulerConfig struct {
	MaxNumBatchedTokens int // tokens per step (--max-num-batched-tokens)
	MaxNumSeqs          int // sequences per step and running at once (--max-num-seqs)
	MaxModelLen         int // longest request: prompt + output (--max-model-len)
	// BlockSize is the number of a request's positions one block id covers
	// (--block-size), which is also the prefix-cache hit granularity. Under
	// DCP each rank stores BlockSize/N of them in its own block of that id.
	BlockSize int
	// Layout is the DCP ownership function; the zero value means one rank.
	Layout kvcache.Layout
	// NumBlocks is the number of block ids each rank's cache holds.
	NumBlocks     int
	PrefixCaching bool
	// MaxPromptLogitRows bounds the logit rows per step of prompts whose
	// every row needs logits (prompt logprobs, echo); their prefill chunks
	// shrink to fit it. 0 refuses such requests.
	MaxPromptLogitRows int
	// SpecTokens is the number of draft tokens a decoding sequence may bring
	// to a step (speculative decoding); each is one more query row and one
	// more logit row. With it the prefix cache hashes a block together with
	// the token after it, since the MTP layer's cache row of a block's last
	// position depends on that token.
	SpecTokens int
}

// MaxLogitRows is the most logit rows one step can ask for: one per
// sequence (1 + SpecTokens under speculation) plus the prompt rows.
func (c SchedulerConfig) MaxLogitRows() int {
	return c.MaxNumSeqs*plan.SpecTokensPerSeq(c.SpecTokens, false) + c.MaxPromptLogitRows
}

// hashExtra is the number of tokens after a block its prefix-cache hash
// covers: 1 under speculation, else 0.
func (c SchedulerConfig) hashExtra() int {
	if c.SpecTokens > 0 {
		return 1
	}
	return 0
}

// layout returns the DCP layout with the zero value read as one rank.
func (c SchedulerConfig) layout() kvcache.Layout {
	if c.Layout.N == 0 && c.Layout.I == 0 {
		return kvcache.Layout{N: 1, I: 1}
	}
	return c.Layout
}

// LocalBlockSize is the number of token slots of one block on one rank:
// BlockSize / N.
func (c SchedulerConfig) LocalBlockSize() int { return c.BlockSize / c.layout().N }

// BlocksFor is the number of block ids a request of n positions needs: its
// most loaded rank's local length (kvcache.Layout.LocalLen) in whole local
// blocks.
func (c SchedulerConfig) BlocksFor(n int) int {
	l, lb := c.layout(), c.LocalBlockSize()
	most := l.LocalLen(n, 0) // rank 0 holds the most positions of any prefix
	return (most + lb - 1) / lb
}

// Validate refuses sizes the scheduler cannot run with. Each error names the
// constraint, the values and a setting that works.
func (c SchedulerConfig) Validate() error {
	l := c.layout()
	switch {
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("--max-num-seqs must be ≥ 1, got %d; 256 is the usual setting", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens < 1:
		return fmt.Errorf("--max-num-batched-tokens must be ≥ 1, got %d; 2048 is the usual setting", c.MaxNumBatchedTokens)
	case c.MaxNumBatchedTokens < c.MaxNumSeqs:
		return fmt.Errorf("--max-num-batched-tokens %d is below --max-num-seqs %d: a step could not hold one token of every running sequence; set --max-num-batched-tokens to at least %d",
			c.MaxNumBatchedTokens, c.MaxNumSeqs, c.MaxNumSeqs)
	case c.MaxModelLen < 1:
		return fmt.Errorf("--max-model-len must be ≥ 1 token, got %d", c.MaxModelLen)
	case c.BlockSize < 1:
		return fmt.Errorf("--block-size must be ≥ 1 token, got %d; 16 is the usual setting", c.BlockSize)
	case c.MaxPromptLogitRows < 0:
		return fmt.Errorf("--max-prompt-logit-rows must be ≥ 0, got %d; %d is the default", c.MaxPromptLogitRows, DefaultMaxPromptLogitRows)
	case c.SpecTokens < 0:
		return fmt.Errorf("speculative tokens must be ≥ 0, got %d", c.SpecTokens)
	case l.N < 1 || l.I < 1:
		return fmt.Errorf("DCP layout needs N ≥ 1 and interleave ≥ 1, got N=%d I=%d", l.N, l.I)
	case c.BlockSize%(l.N*l.I) != 0:
		return fmt.Errorf("--block-size %d must be a multiple of DCP size × interleave = %d × %d so that each rank stores whole interleave runs of every block; set --block-size to %d",
			c.BlockSize, l.N, l.I, (c.BlockSize+l.N*l.I-1)/(l.N*l.I)*l.N*l.I)
	}
	if err := l.Validate(c.LocalBlockSize()); err != nil {
		return fmt.Errorf("DCP layout against the per-rank block of %d slots: %w", c.LocalBlockSize(), err)
	}
	if need := c.BlocksFor(c.MaxModelLen); c.NumBlocks < need {
		return fmt.Errorf("KV cache of %d blocks cannot hold one --max-model-len %d request, which needs %d blocks of %d tokens; give the cache at least %d blocks or lower --max-model-len",
			c.NumBlocks, c.MaxModelLen, need, c.BlockSize, need)
	}
	return nil
}

// Finish reasons the scheduler decides.
var errUnknownRequest = errors.New("unknown request")

// Entry is one request's share of a step.
type Entry struct {
	ID        uint64
	Start     int  // first position of this step's tokens
	NumTokens int  // tokens this step computes
	Decode    bool // one new token of a request whose prompt is in the cache
	// Sample is set when this step computes the request's last known token,
	// so its logit row yields the next token.
	Sample bool
	// LogitRows is the number of logit rows the entry produces: NumTokens
	// for a prompt chunk that needs every row's logits (Seq.LogitsAll),
	// else 1 (its last token). The sampled row is the last of them.
	LogitRows int
	// Fork is the number of further sequences that sample their first
	// token from this entry's last row (n > 1): their ids follow ID.
	Fork int
	// Drafts is the number of draft tokens a decode entry verifies: its
	// rows are the last token then the drafts, each with logits (LogitRows
	// = 1 + Drafts).
	Drafts int
}

// StepPlan is one step: the replicated metadata every rank runs. Batch.Seqs
// and Entries are parallel; the logit row of sequence i is Batch.Seqs[i]'s
// last token. A plan is valid until the next Schedule.
type StepPlan struct {
	Batch     model.Batch
	Entries   []Entry
	NumTokens int
	// NumDecodes counts the decode entries; they come first.
	NumDecodes int
	// Admitted lists requests that left the waiting queue this step;
	// Preempted lists requests whose blocks were freed for recomputation.
	Admitted, Preempted []uint64
}

// Finished is a request that left the scheduler in Complete.
type Finished struct {
	ID     uint64
	Reason string // FinishStop or FinishLength
}

type seqState struct {
	id     uint64
	tokens []int32 // prompt then generated tokens; cap MaxModelLen+1
	prompt int
	maxOut int
	stop   []int32
	// ender ends the sequence at tokens that are not stop ids (nil: none);
	// forkEnders are those of the sequences it forks off, in id order.
	ender      StopMatcher
	forkEnders []StopMatcher
	computed   int      // positions whose KV is in the cache
	blocks     []int32  // cap BlocksFor(MaxModelLen)
	hashes     []uint64 // chain hashes of full blocks [0, len)
	reg        int      // blocks already offered to the prefix cache
	running    bool
	queued     bool // never admitted yet (counts against the queue bound)
	planned    bool // scheduled in the current step
	// n is the number of sequences this one stands for until its first
	// token forks the others off (1 afterwards); it reserves that many
	// running slots.
	n int
	// promptLogits asks for the logits of every prompt row until the prompt
	// has been computed once; such a prompt never takes prefix-cache hits.
	promptLogits bool
	// drafts are the draft tokens the next decode step verifies; they live
	// in tokens' backing array right after its end.
	drafts int
}

// Scheduler is the deterministic core of the engine: continuous batching
// with decodes first, chunked prefill, preemption by free-and-recompute, and
// prefix caching of full blocks. Its plans depend only on the sequence of
// calls (Add, Abort, Schedule, Complete with the sampled tokens), so every
// rank given the same calls derives the same plans. It is not safe for
// concurrent use.
type Scheduler struct {
	cfg      SchedulerConfig
	blocks   *blockManager
	seqs     map[uint64]*seqState
	running  []*seqState // admission order
	waiting  []*seqState // FIFO; preempted requests go to the front
	plan     StepPlan
	finished []Finished
	taken    []int             // tokens each entry of the last plan appended (Complete)
	copies   []model.BlockCopy // copy-on-write of forked blocks, for the next step
	reserved int               // running slots held: Σ n over running requests

	// Counters since construction.
	Preemptions     int64
	PromptTokens    int64 // tokens that needed KV at admission (prompt, or prompt+output on recompute)
	PrefixHitTokens int64 // of those, tokens served from the prefix cache
	PeakBlocks      int   // most blocks held at once
}

// NewScheduler validates cfg and allocates the block manager.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg:     cfg,
		blocks:  newBlockManager(cfg.NumBlocks, cfg.BlockSize, cfg.PrefixCaching),
		seqs:    make(map[uint64]*seqState, cfg.MaxNumSeqs),
		running: make([]*seqState, 0, cfg.MaxNumSeqs),
		waiting: make([]*seqState, 0, 2*cfg.MaxNumSeqs),
	}
	s.plan.Batch.Seqs = make([]model.Seq, 0, cfg.MaxNumSeqs)
	s.plan.Entries = make([]Entry, 0, cfg.MaxNumSeqs)
	s.plan.Admitted = make([]uint64, 0, cfg.MaxNumSeqs)
	s.plan.Preempted = make([]uint64, 0, cfg.MaxNumSeqs)
	s.finished = make([]Finished, 0, cfg.MaxNumSeqs)
	s.taken = make([]int, cfg.MaxNumSeqs)
	s.copies = make([]model.BlockCopy, 0, cfg.MaxNumSeqs)
	s.plan.Batch.Copies = make([]model.BlockCopy, 0, cfg.MaxNumSeqs)
	return s, nil
}

// Config returns the configuration the scheduler runs with.
func (s *Scheduler) Config() SchedulerConfig { return s.cfg }

// SeqOptions are the optional parts of a request.
type SeqOptions struct {
	// N sequences sample from the prompt, which is computed once: when its
	// first token is sampled, N-1 more sequences with ids id+1 … id+N-1 fork
	// off, sharing its full KV blocks and a copy of its last partial block.
	// 0 means 1.
	N int
	// PromptLogits asks for the logits of every prompt row.
	PromptLogits bool
	// Enders, when set, holds one StopMatcher per sequence (N of them, in
	// id order); each sees its sequence's generated tokens after the stop
	// ids, and a token it reports ends the sequence with FinishStop.
	Enders []StopMatcher
}

// Add queues a request. The prompt must be 1..MaxModelLen tokens; maxOut ≥ 1
// bounds its generated tokens; generating any of stop ends it (and any
// token SeqOptions.Enders report, with AddWith).
func (s *Scheduler) Add(id uint64, prompt []int32, maxOut int, stop []int32) error {
	return s.AddWith(id, prompt, maxOut, stop, SeqOptions{})
}

// AddWith is Add with options.
func (s *Scheduler) AddWith(id uint64, prompt []int32, maxOut int, stop []int32, o SeqOptions) error {
	n := max(o.N, 1)
	switch {
	case n > s.cfg.MaxNumSeqs:
		return fmt.Errorf("request %d: n is %d, more sequences than --max-num-seqs %d runs at once; ask for at most %d", id, n, s.cfg.MaxNumSeqs, s.cfg.MaxNumSeqs)
	case o.PromptLogits && s.cfg.MaxPromptLogitRows == 0:
		return fmt.Errorf("request %d: prompt logprobs need logit rows for the prompt, and --max-prompt-logit-rows is 0; start the engine with --max-prompt-logit-rows %d", id, DefaultMaxPromptLogitRows)
	case len(prompt) == 0:
		return fmt.Errorf("request %d: empty prompt; give at least one token", id)
	case len(prompt) > s.cfg.MaxModelLen:
		return fmt.Errorf("request %d: prompt of %d tokens is longer than --max-model-len %d; shorten the prompt to %d tokens or raise --max-model-len to %d",
			id, len(prompt), s.cfg.MaxModelLen, s.cfg.MaxModelLen, len(prompt))
	case maxOut < 1:
		return fmt.Errorf("request %d: max tokens must be ≥ 1, got %d", id, maxOut)
	case o.Enders != nil && len(o.Enders) != n:
		return fmt.Errorf("request %d: %d stop matchers for %d sequences; give one per sequence", id, len(o.Enders), n)
	}
	for k := range uint64(n) {
		if _, dup := s.seqs[id+k]; dup {
			return fmt.Errorf("request %d is already scheduled", id+k)
		}
	}
	maxBlocks := s.cfg.BlocksFor(s.cfg.MaxModelLen)
	r := &seqState{
		id:     id,
		tokens: make([]int32, len(prompt), s.cfg.MaxModelLen+1+s.cfg.SpecTokens),
		prompt: len(prompt),
		maxOut: maxOut,
		stop:   slices.Clone(stop),
		blocks: make([]int32, 0, maxBlocks),
		hashes: make([]uint64, 0, maxBlocks),
		queued: true,
		n:      n,

		promptLogits: o.PromptLogits,
	}
	if o.Enders != nil {
		r.ender, r.forkEnders = o.Enders[0], o.Enders[1:]
	}
	copy(r.tokens, prompt)
	s.seqs[id] = r
	s.waiting = append(s.waiting, r)
	return nil
}

// Abort removes a request at once and releases its blocks. It reports
// whether the request was known.
func (s *Scheduler) Abort(id uint64) bool {
	r, ok := s.seqs[id]
	if !ok {
		return false
	}
	s.drop(r)
	return true
}

// drop removes r from every list and releases its blocks.
func (s *Scheduler) drop(r *seqState) {
	if r.running {
		s.running = slices.DeleteFunc(s.running, func(x *seqState) bool { return x == r })
		s.blocks.releaseAll(r.blocks)
		r.blocks = r.blocks[:0]
		r.running = false
		s.reserved -= r.n
	} else {
		s.waiting = slices.DeleteFunc(s.waiting, func(x *seqState) bool { return x == r })
	}
	delete(s.seqs, r.id)
}

// Queued reports whether a request has never been admitted yet.
func (s *Scheduler) Queued(id uint64) bool {
	r, ok := s.seqs[id]
	return ok && r.queued
}

// Running and Waiting count the requests in each state.
func (s *Scheduler) Running() int { return len(s.running) }

// Waiting counts requests that hold no blocks and wait for admission.
func (s *Scheduler) Waiting() int { return len(s.waiting) }

// HeldBlocks is the number of blocks owned by running requests.
func (s *Scheduler) HeldBlocks() int { return s.blocks.held() }

// NumBlocks is the capacity of the cache in block ids.
func (s *Scheduler) NumBlocks() int { return s.blocks.capacity() }

// Generated returns a request's generated tokens so far (a view, valid until
// the next Complete), or false if the request is unknown.
func (s *Scheduler) Generated(id uint64) ([]int32, bool) {
	r, ok := s.seqs[id]
	if !ok {
		return nil, false
	}
	return r.tokens[r.prompt:], true
}

func (r *seqState) isDecode() bool {
	return len(r.tokens) > r.prompt && len(r.tokens)-r.computed == 1
}

// Schedule builds the next step. Running decodes go first, then running
// prefills continue their chunks, then waiting requests are admitted in
// order while tokens, sequences and blocks last. A request that needs a block
// when none is free preempts the latest-admitted running request not yet in
// this step (or itself, if there is none). An empty plan means there is no
// work.
func (s *Scheduler) Schedule() *StepPlan {
	p := &s.plan
	p.Batch.Seqs = p.Batch.Seqs[:0]
	p.Entries = p.Entries[:0]
	p.Admitted = p.Admitted[:0]
	p.Preempted = p.Preempted[:0]
	p.NumTokens, p.NumDecodes = 0, 0
	p.Batch.Copies = append(p.Batch.Copies[:0], s.copies...)
	for _, r := range s.running {
		r.planned = false
	}
	budget := s.cfg.MaxNumBatchedTokens
	rows := s.cfg.MaxPromptLogitRows
	for _, decodes := range []bool{true, false} {
		for i := 0; i < len(s.running); i++ {
			if budget == 0 || len(p.Entries) == s.cfg.MaxNumSeqs {
				break
			}
			r := s.running[i]
			if r.planned || r.isDecode() != decodes {
				continue
			}
			n := min(len(r.tokens)-r.computed, budget)
			if r.needsRows() {
				if n = min(n, rows); n == 0 {
					continue
				}
			}
			if decodes {
				r.drafts = min(r.drafts, budget-1)
				n += r.drafts
			}
			if !s.ensureBlocks(r, r.computed+n) {
				i-- // r left the running list
				continue
			}
			s.emit(r, n)
			budget -= n
			if r.needsRows() {
				rows -= n
			}
		}
	}
	for len(p.Preempted) == 0 && len(s.waiting) > 0 && budget > 0 &&
		s.reserved+s.waiting[0].n <= s.cfg.MaxNumSeqs && len(p.Entries) < s.cfg.MaxNumSeqs {
		r := s.waiting[0]
		if r.needsRows() && rows == 0 {
			break
		}
		hit := s.prefixHit(r)
		n := min(len(r.tokens)-r.computed, budget)
		if r.needsRows() {
			n = min(n, rows)
			rows -= n
		}
		need := s.cfg.BlocksFor(r.computed+n) - len(r.blocks)
		if need > s.blocks.available() {
			s.blocks.releaseAll(r.blocks)
			r.blocks, r.computed = r.blocks[:0], 0
			break
		}
		if err := s.grow(r, need); err != nil {
			panic(err) // available() was checked
		}
		// Shift rather than reslice, so the queue keeps its capacity and a
		// preemption's insertion at the front does not reallocate in a step.
		s.waiting = s.waiting[:copy(s.waiting, s.waiting[1:])]
		s.running = append(s.running, r)
		r.running = true
		s.reserved += r.n
		s.PromptTokens += int64(len(r.tokens))
		s.PrefixHitTokens += int64(hit)
		if r.queued {
			r.queued = false
			p.Admitted = append(p.Admitted, r.id)
		}
		s.emit(r, n)
		budget -= n
	}
	s.PeakBlocks = max(s.PeakBlocks, s.blocks.held())
	if len(p.Entries) > 0 {
		s.copies = s.copies[:0] // they run with this plan
	}
	return p
}

// needsRows reports whether r's next chunk needs the logits of every row.
func (r *seqState) needsRows() bool { return r.promptLogits && r.computed < r.prompt }

// emit appends r's next n tokens to the plan.
func (s *Scheduler) emit(r *seqState, n int) {
	p := &s.plan
	start := r.computed
	e := Entry{ID: r.id, Start: start, NumTokens: n, Decode: r.isDecode(), Sample: start+n == len(r.tokens)+r.drafts, LogitRows: 1}
	seq := model.Seq{Tokens: r.tokens[start : start+n], Start: start, BlockTable: r.blocks}
	if r.needsRows() {
		seq.LogitsAll, e.LogitRows = true, n
	}
	if e.Decode && r.drafts > 0 {
		// The drafts follow the last token in tokens' backing array.
		seq.LogitsAll, e.LogitRows, e.Drafts = true, n, r.drafts
	}
	if e.Sample && len(r.tokens) == r.prompt {
		e.Fork = r.n - 1
	}
	if e.Decode { // decodes first: they are emitted before any prefill
		p.NumDecodes++
	}
	p.Entries = append(p.Entries, e)
	p.Batch.Seqs = append(p.Batch.Seqs, seq)
	p.NumTokens += n
	r.planned = true
}

// ensureBlocks makes r's block table cover n positions, preempting others
// if needed. It returns false if r itself had to be preempted.
func (s *Scheduler) ensureBlocks(r *seqState, n int) bool {
	need := s.cfg.BlocksFor(n) - len(r.blocks)
	for need > s.blocks.available() {
		v := s.victim(r)
		if v == nil {
			s.preempt(r)
			return false
		}
		s.preempt(v)
	}
	if need > 0 {
		if err := s.grow(r, need); err != nil {
			panic(err) // available() was checked
		}
	}
	return true
}

func (s *Scheduler) grow(r *seqState, n int) error {
	var err error
	r.blocks, err = s.blocks.alloc(n, r.blocks)
	return err
}

// victim is the latest-admitted running request that is not r and not yet in
// this step.
func (s *Scheduler) victim(r *seqState) *seqState {
	for i := len(s.running) - 1; i >= 0; i-- {
		if v := s.running[i]; v != r && !v.planned {
			return v
		}
	}
	return nil
}

// preempt frees v's blocks and puts it at the front of the waiting queue; it
// recomputes its prompt and generated tokens when admitted again.
func (s *Scheduler) preempt(v *seqState) {
	s.running = slices.DeleteFunc(s.running, func(x *seqState) bool { return x == v })
	s.blocks.releaseAll(v.blocks)
	v.blocks, v.computed, v.running, v.reg, v.drafts = v.blocks[:0], 0, false, 0, 0
	s.reserved -= v.n
	s.waiting = slices.Insert(s.waiting, 0, v)
	s.plan.Preempted = append(s.plan.Preempted, v.id)
	s.Preemptions++
}

// hashOf returns the chain hash of r's full block j, computing and keeping
// the hashes of the blocks before it.
func (s *Scheduler) hashOf(r *seqState, j int) uint64 {
	B := s.cfg.BlockSize
	for len(r.hashes) <= j {
		k := len(r.hashes)
		var parent uint64
		if k > 0 {
			parent = r.hashes[k-1]
		}
		r.hashes = append(r.hashes, chainHash(parent, r.tokens[k*B:(k+1)*B+s.cfg.hashExtra()]))
	}
	return r.hashes[j]
}

// prefixHit gives a request without blocks the longest run of cached full
// blocks of its known tokens, one block at a time, and returns the tokens
// covered. At least the last token is always left to compute, so that the
// step yields its logits.
func (s *Scheduler) prefixHit(r *seqState) int {
	if !s.cfg.PrefixCaching || len(r.blocks) > 0 || r.promptLogits {
		return 0
	}
	B, x := s.cfg.BlockSize, s.cfg.hashExtra()
	limit := (len(r.tokens) - 1 - x) / B
	var parent uint64
	for j := range max(limit, 0) {
		h := s.hashOf(r, j)
		id, ok := s.blocks.lookup(h, parent, r.tokens[j*B:(j+1)*B+x])
		if !ok {
			break
		}
		s.blocks.acquire(id)
		r.blocks = append(r.blocks, id)
		parent = h
	}
	r.computed = len(r.blocks) * B
	r.reg = len(r.blocks)
	return r.computed
}

// Complete records the outcome of the last plan: every entry's tokens are
// now in the cache, and sampled[i] is the token drawn from entry i's logit
// row (ignored where Entry.Sample is false). forked holds, entry after entry,
// the first tokens of the sequences an entry forks off (Entry.Fork of them).
// It returns the requests that finished; their blocks are released. The
// result is valid until the next Complete.
func (s *Scheduler) Complete(sampled, forked []int32) ([]Finished, error) {
	return s.CompleteSpec(sampled, forked, nil)
}

// CompleteSpec is Complete for steps that verified drafts: accepted[i] is
// how many of entry i's drafts were accepted (nil: none had drafts). The
// accepted drafts are appended, then sampled[i] (the target's token after
// them), each checked against the request's stop tokens and limits, so a
// request may finish inside its accepted drafts; Taken says how many tokens
// each entry appended. Positions past the accepted ones hold rejected KV
// that no later step reads: the request's length ends before them.
func (s *Scheduler) CompleteSpec(sampled, forked []int32, accepted []int32) ([]Finished, error) {
	p := &s.plan
	if len(sampled) < len(p.Entries) {
		return nil, fmt.Errorf("complete: %d sampled tokens for %d plan entries", len(sampled), len(p.Entries))
	}
	s.finished = s.finished[:0]
	B, x := s.cfg.BlockSize, s.cfg.hashExtra()
	for i, e := range p.Entries {
		r, ok := s.seqs[e.ID]
		if !ok || !r.running {
			return nil, fmt.Errorf("complete: entry %d, request %d: %w", i, e.ID, errUnknownRequest)
		}
		s.taken[i] = 0
		a := 0
		if e.Drafts > 0 && accepted != nil {
			if a = int(accepted[i]); a < 0 || a > e.Drafts {
				return nil, fmt.Errorf("complete: entry %d accepted %d of %d drafts", i, a, e.Drafts)
			}
		}
		r.computed = e.Start + e.NumTokens - e.Drafts + a
		r.drafts = 0
		if r.computed >= r.prompt {
			r.promptLogits = false
		}
		if e.Sample {
			// The accepted drafts, then the sampled token, each until one ends
			// the request.
			n := len(r.tokens)
			for j := 0; j < a && !s.finishedLast(r.id); j++ {
				s.accept(r, r.tokens[n : n+a][j])
				s.taken[i]++
			}
			if s.finishedLast(r.id) {
				r.computed = min(r.computed, len(r.tokens)-1)
			}
		}
		if s.cfg.PrefixCaching {
			for ; r.reg < r.computed/B && (r.reg+1)*B+x <= len(r.tokens); r.reg++ {
				var parent uint64
				if r.reg > 0 {
					parent = s.hashOf(r, r.reg-1)
				}
				s.blocks.register(r.blocks[r.reg], s.hashOf(r, r.reg), parent, r.tokens[r.reg*B:(r.reg+1)*B+x])
			}
		}
		if !e.Sample || s.finishedLast(r.id) {
			continue
		}
		if e.Fork > 0 {
			if len(forked) < e.Fork {
				return nil, fmt.Errorf("complete: entry %d forks %d sequences, %d forked tokens left", i, e.Fork, len(forked))
			}
			for k := range e.Fork {
				s.fork(r, r.id+uint64(k+1), forked[k])
			}
			forked = forked[e.Fork:]
			s.reserved -= r.n - 1 // the children now hold their own slots
			r.n = 1
		}
		s.accept(r, sampled[i])
		s.taken[i]++
	}
	for _, f := range s.finished {
		s.drop(s.seqs[f.ID])
	}
	return s.finished, nil
}

// finishedLast reports whether request id is the last one recorded as
// finished in this Complete.
func (s *Scheduler) finishedLast(id uint64) bool {
	n := len(s.finished)
	return n > 0 && s.finished[n-1].ID == id
}

// Taken is, per entry of the last completed plan, the tokens it appended
// (0 for a prefill chunk that sampled nothing; 1 + its accepted drafts, or
// fewer when a stop token or a limit ended the request).
func (s *Scheduler) Taken() []int { return s.taken[:len(s.plan.Entries)] }

// blockTable is request id's block table (nil if unknown).
func (s *Scheduler) blockTable(id uint64) []int32 {
	if r, ok := s.seqs[id]; ok {
		return r.blocks
	}
	return nil
}

// Tokens is a view of request id's prompt and generated tokens (valid until
// the next Complete), or false if the request is unknown.
func (s *Scheduler) Tokens(id uint64) ([]int32, bool) {
	r, ok := s.seqs[id]
	if !ok {
		return nil, false
	}
	return r.tokens, true
}

// Draftable reports how many draft tokens request id's next decode step may
// carry, at most k, and makes its block table cover them: the positions of
// the step's rows (its last token and the drafts) and of the draft steps
// before it. It takes only free blocks, never preempting, and returns 0 when
// the request is not decoding, would pass --max-model-len or its output
// limit, or no block is free.
func (s *Scheduler) Draftable(id uint64, k int) int {
	r, ok := s.seqs[id]
	if !ok || !r.running || !r.isDecode() {
		return 0
	}
	k = min(k, s.cfg.MaxModelLen-len(r.tokens), r.maxOut-(len(r.tokens)-r.prompt)-1)
	for ; k > 0; k-- {
		need := s.cfg.BlocksFor(len(r.tokens)+k) - len(r.blocks)
		if need <= s.blocks.available() {
			if need > 0 {
				if err := s.grow(r, need); err != nil {
					panic(err) // available() was checked
				}
			}
			return k
		}
	}
	return 0
}

// SetDrafts gives request id's next decode step the drafts (at most what
// Draftable allowed); they are written after its tokens.
func (s *Scheduler) SetDrafts(id uint64, drafts []int32) error {
	r, ok := s.seqs[id]
	if !ok || !r.running || !r.isDecode() {
		return fmt.Errorf("set drafts: request %d is not decoding", id)
	}
	n := len(r.tokens)
	if n+len(drafts) > cap(r.tokens) || len(drafts) > s.cfg.SpecTokens {
		return fmt.Errorf("set drafts: %d drafts for request %d exceed the %d speculative tokens", len(drafts), id, s.cfg.SpecTokens)
	}
	if s.cfg.BlocksFor(n+len(drafts)) > len(r.blocks) {
		return fmt.Errorf("set drafts: request %d holds blocks for %d positions, %d drafts need %d; call Draftable first", id, len(r.blocks)*s.cfg.BlockSize, len(drafts), n+len(drafts))
	}
	copy(r.tokens[n:n+len(drafts)], drafts)
	r.drafts = len(drafts)
	return nil
}

// accept appends a sampled token to r and records r as finished when the
// token ends it.
func (s *Scheduler) accept(r *seqState, tok int32) {
	r.tokens = append(r.tokens, tok)
	reason := ""
	switch {
	case slices.Contains(r.stop, tok), r.ender != nil && r.ender.Ends(int(tok)):
		reason = FinishStop
	case len(r.tokens)-r.prompt >= r.maxOut, len(r.tokens) >= s.cfg.MaxModelLen:
		reason = FinishLength
	}
	if reason != "" {
		s.finished = append(s.finished, Finished{ID: r.id, Reason: reason})
	}
}

// fork starts sequence id from parent's computed prompt with first token
// tok: it shares the parent's full blocks and gets a copy of the last,
// partial one (copied at the start of the next step). Without a free block
// for the copy it waits at the front of the queue and recomputes the
// prompt (the prefix cache serves the full blocks).
func (s *Scheduler) fork(parent *seqState, id uint64, tok int32) {
	maxBlocks := s.cfg.BlocksFor(s.cfg.MaxModelLen)
	c := &seqState{
		id:     id,
		tokens: make([]int32, parent.prompt, s.cfg.MaxModelLen+1+s.cfg.SpecTokens),
		prompt: parent.prompt,
		maxOut: parent.maxOut,
		stop:   parent.stop,
		blocks: make([]int32, 0, maxBlocks),
		hashes: make([]uint64, 0, maxBlocks),
		n:      1,
	}
	if k := int(id - parent.id - 1); k < len(parent.forkEnders) {
		c.ender = parent.forkEnders[k]
	}
	copy(c.tokens, parent.tokens[:parent.prompt])
	s.seqs[id] = c
	s.accept(c, tok)
	if n := len(s.finished); n > 0 && s.finished[n-1].ID == id {
		return // finished at its first token: never runs
	}
	P, B := parent.prompt, s.cfg.BlockSize
	full := P / B
	partial := s.cfg.BlocksFor(P) > full
	if partial && s.blocks.available() == 0 {
		s.waiting = slices.Insert(s.waiting, 0, c)
		return
	}
	for _, b := range parent.blocks[:full] {
		s.blocks.acquire(b)
		c.blocks = append(c.blocks, b)
	}
	if partial {
		var err error
		if c.blocks, err = s.blocks.alloc(1, c.blocks); err != nil {
			panic(err) // available() was checked
		}
		s.copies = append(s.copies, model.BlockCopy{Src: parent.blocks[full], Dst: c.blocks[full]})
	}
	c.computed = P
	c.reg = min(parent.reg, full)
	c.hashes = append(c.hashes, parent.hashes[:min(len(parent.hashes), full)]...)
	c.running = true
	s.running = append(s.running, c)
	s.reserved++
}
