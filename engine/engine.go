package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/spec"
)

// ErrOverloaded is returned by Submit when the queue of requests waiting for
// admission is full (an HTTP front end answers 429).
var ErrOverloaded = errors.New("engine overloaded")

// ErrClosed is returned by Submit after Close, and ends streams Close aborts.
var ErrClosed = errors.New("engine closed")

// ErrFailed wraps the executor error that ended the engine: a step that
// fails leaves the ranks' collectives poisoned (a rank unreachable, a
// ledger mismatch), so every request still held then fails with it and
// Submit refuses new ones with it (an HTTP front end answers 503).
var ErrFailed = errors.New("engine failed")

// Stats are the engine's counters since start-up.
type Stats struct {
	Steps, DecodeSteps int64 // DecodeSteps: steps of decode rows only
	ScheduledTokens    int64
	// PrefillTokens are the scheduled tokens of entries that are not
	// one-token decodes (prompt chunks and recomputation).
	PrefillTokens     int64
	OutputTokens      int64
	Finished, Aborted int64
	Preemptions       int64
	// PrefixQueryTokens are the tokens requests needed in the cache when
	// admitted; PrefixHitTokens of them came from the prefix cache.
	PrefixQueryTokens, PrefixHitTokens    int64
	KVBlocks, KVBlocksInUse, KVBlocksPeak int
	Running, Waiting                      int
	// KernelPlansBuiltAfterWarmup counts executor plan builds since warm-up.
	KernelPlansBuiltAfterWarmup int64
	// MeasuredDecodeSteps and DecodeStepAllocs: heap allocations over the
	// decode-only steps measured (Options.MeasureAllocs).
	MeasuredDecodeSteps int64
	DecodeStepAllocs    uint64
	// Spec counts speculative decoding (zero without it): draft rounds,
	// drafts proposed and accepted, and acceptances per draft position.
	Spec spec.Stats
}

// KVUsagePeak is the largest fraction of KV blocks held at once.
func (s Stats) KVUsagePeak() float64 { return ratio(float64(s.KVBlocksPeak), float64(s.KVBlocks)) }

// PrefixHitRate is the fraction of admitted tokens served from the prefix cache.
func (s Stats) PrefixHitRate() float64 {
	return ratio(float64(s.PrefixHitTokens), float64(s.PrefixQueryTokens))
}

// AllocsPerDecodeStep is the mean heap allocations of a measured decode step.
func (s Stats) AllocsPerDecodeStep() float64 {
	return ratio(float64(s.DecodeStepAllocs), float64(s.MeasuredDecodeSteps))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// request is one submitted request: its sequences share the prompt and the
// event stream, which closes when the last of them ends.
type request struct {
	id        uint64 // sequence k has scheduler id id+k
	events    chan Event
	seqs      []*sequence
	open      int // sequences not ended
	prompt    int
	maxTokens int // 0: score the prompt, deliver no token
	topN      int
	stop      func() bool

	// Prompt logprobs (promptN ≥ 0 alternatives; -1: none): filled as prompt chunks are computed,
	// delivered with the first event.
	promptN   int
	promptLPs []PromptLogprob
	sentFirst bool
	scheduled time.Time // first admitted to a step

	// Scheduler inputs, handed to the loop with the request.
	promptIDs []int32
	maxOut    int
	stopIDs   []int32
	enders    []StopMatcher // one per sequence; nil without Request.StopText
}

// sequence is one of a request's N sequences.
type sequence struct {
	req     *request
	index   int
	sampler *sampler.State
	out     int
	finish  string
	top     []sampler.TokenLogprob // maxOut × topN, one run per token
	ended   bool
}

// Engine serves requests on one executor: a single goroutine runs the
// scheduler's steps, Submit hands requests to it, and cancelling a request's
// context aborts it and frees its blocks before the next step.
type Engine struct {
	cfg    *config.Model
	opt    Options
	exec   Executor
	sched  *Scheduler
	memory Memory
	plans  PlanCounter
	plans0 int64

	nextID  atomic.Uint64
	pending atomic.Int64 // submitted, not yet admitted or ended

	mu      sync.Mutex
	inbox   []*request
	aborts  []uint64
	closed  bool
	failed  error         // the step error that ended the engine
	failCh  chan struct{} // closed when failed is set
	stats   Stats
	wake    chan struct{}
	done    chan struct{}
	live    map[uint64]*sequence // by scheduler id; owned by the loop
	reqs    map[uint64]*request  // by request id; owned by the loop
	scratch *sampler.Scratch
	sampled []int32
	logprob []float64
	forked  []int32
	forkLP  []float64
	spec    *speculator                  // nil without speculative decoding
	allocs  atomic.Pointer[AllocCounter] // counts decode-only steps; nil: none
	spare   []*request
	spareID []uint64
}

var _ Submitter = (*Engine)(nil)

// New sizes and starts an engine: it validates opt, profiles the largest
// step on a first executor to measure activations and workspaces, sizes the
// KV cache from the memory budget (refusing budgets that cannot hold one
// max-model-len request), builds the serving executor, warms it up and
// starts the step loop. weightBytes is one rank's weight memory.
func New(cfg *config.Model, weightBytes int64, newExec ExecutorFactory, opt Options) (*Engine, error) {
	opt = opt.WithDefaults(cfg)
	if err := opt.Validate(cfg); err != nil {
		return nil, err
	}
	slot, err := opt.SlotBytes(cfg)
	if err != nil {
		return nil, err
	}
	sc := opt.scheduler(1)
	// Profile: the largest step on an executor with just enough cache.
	ro := opt.runnerOptions(profileBlocks(sc))
	pex, err := newExec(ro)
	if err != nil {
		return nil, fmt.Errorf("profile executor: %w", err)
	}
	e := &Engine{cfg: cfg, opt: opt}
	mem := &e.memory
	mem.WeightBytes = weightBytes
	mem.Workspaces = append([]model.Buffer(nil), pex.Buffers()...)
	for _, b := range mem.Workspaces {
		mem.WorkspaceBytes += b.Bytes
	}
	if mem.Overrides, err = checkWorkspaceOverrides(opt.WorkspaceBytes, mem.Workspaces, opt); err != nil {
		return nil, err
	}
	mem.ActivationBytes, err = profile(pex, sc, ro.NumBlocks)
	closeExecutor(pex)
	if err != nil {
		return nil, err
	}
	pex = nil
	runtime.GC()
	if err := sizeKV(opt, sc, slot, mem); err != nil {
		return nil, err
	}
	sc = opt.scheduler(mem.NumBlocks)
	if e.sched, err = NewScheduler(sc); err != nil {
		return nil, err
	}
	ro.NumBlocks = mem.NumBlocks
	if e.exec, err = newExec(ro); err != nil {
		return nil, fmt.Errorf("serving executor of %d blocks: %w", mem.NumBlocks, err)
	}
	if err := warmUp(e.exec, sc, mem.NumBlocks); err != nil {
		return nil, err
	}
	if pc, ok := e.exec.(PlanCounter); ok {
		e.plans, e.plans0 = pc, pc.KernelPlansBuilt()
	}
	e.wake = make(chan struct{}, 1)
	e.done = make(chan struct{})
	e.failCh = make(chan struct{})
	e.live = make(map[uint64]*sequence, opt.MaxNumSeqs)
	e.reqs = make(map[uint64]*request, opt.MaxNumSeqs)
	e.scratch = sampler.NewScratch(cfg.VocabSize)
	e.sampled = make([]int32, opt.MaxNumSeqs)
	e.logprob = make([]float64, opt.MaxNumSeqs)
	e.forked = make([]int32, opt.MaxNumSeqs)
	e.forkLP = make([]float64, opt.MaxNumSeqs)
	if opt.Speculative != nil {
		e.spec = newSpeculator(opt.Speculative, opt.MaxNumSeqs, opt.MaxNumBatchedTokens, cfg.VocabSize)
	}
	e.stats.KVBlocks = mem.NumBlocks
	go e.loop()
	return e, nil
}

// runnerOptions sizes an executor for the worst step the scheduler can
// produce under o: every batched token, every sequence asking for logits,
// every sequence at max-model-len.
func (o Options) runnerOptions(numBlocks int) model.RunnerOptions {
	return model.RunnerOptions{
		MaxTokens: o.MaxNumBatchedTokens, MaxModelLen: o.MaxModelLen,
		MaxLogitRows: o.scheduler(numBlocks).MaxLogitRows(), MaxSeqs: o.MaxNumSeqs, BlockSize: o.scheduler(numBlocks).LocalBlockSize(),
		NumBlocks: numBlocks, KVDType: o.KVDType, IndexerDType: o.IndexerDType, MTP: o.Speculative != nil,
	}
}

// Memory is the start-up memory account.
func (e *Engine) Memory() *Memory { return &e.memory }

// Options are the options the engine runs with, defaults filled.
func (e *Engine) Options() Options { return e.opt }

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// Submit queues a request and returns its event stream, which carries the
// tokens of every sequence and ends with an event carrying Finish per
// sequence (and Err when the request failed or was aborted).
// A prompt longer than --max-model-len is refused naming both numbers; a full
// queue is refused with an error wrapping ErrOverloaded.
func (e *Engine) Submit(ctx context.Context, req Request) (<-chan Event, error) {
	if err := e.Err(); err != nil {
		return nil, err
	}
	if err := e.validate(&req); err != nil {
		return nil, err
	}
	n := max(req.N, 1)
	prompt := make([]int32, len(req.PromptIDs))
	for i, t := range req.PromptIDs {
		prompt[i] = int32(t)
	}
	stop := make([]int32, 0, len(req.StopTokenIDs)+len(e.cfg.EOSTokenIDs))
	for _, t := range req.StopTokenIDs {
		stop = append(stop, int32(t))
	}
	if !req.IgnoreEOS {
		for _, t := range e.cfg.EOSTokenIDs {
			stop = append(stop, int32(t))
		}
	}
	maxOut := min(max(req.MaxTokens, 1), e.opt.MaxModelLen-len(req.PromptIDs)+1)
	r := &request{events: make(chan Event, n*(maxOut+1)), prompt: len(req.PromptIDs), maxTokens: req.MaxTokens,
		topN: req.TopLogprobs, promptN: -1, open: n}
	if req.ScorePrompt {
		r.promptN = req.PromptTopLogprobs
	}
	sp := req.Sampling
	sp.StopTokenIDs = make([]int, len(stop))
	for i, t := range stop {
		sp.StopTokenIDs[i] = int(t)
	}
	for k := range n {
		p := sp
		p.Seed = sp.Seed + uint64(k)
		st, err := sampler.NewState(p, e.cfg.VocabSize, prompt, maxOut)
		if err != nil {
			return nil, fmt.Errorf("request %s: %w", req.ID, err)
		}
		if req.Constraint != nil {
			c, err := req.Constraint.NewConstraint(sp.StopTokenIDs, maxOut)
			if err != nil {
				return nil, fmt.Errorf("request %s: structured output: %w", req.ID, err)
			}
			st.Constrain(c)
		}
		if req.StopText != nil {
			r.enders = append(r.enders, req.StopText.NewStopMatcher())
		}
		sq := &sequence{req: r, index: k, sampler: st}
		if r.topN > 0 {
			sq.top = make([]sampler.TokenLogprob, maxOut*r.topN)
		}
		r.seqs = append(r.seqs, sq)
	}
	if r.promptN >= 0 {
		r.promptLPs = make([]PromptLogprob, len(prompt))
		if r.promptN > 0 {
			top := make([]sampler.TokenLogprob, len(prompt)*r.promptN)
			for i := range r.promptLPs {
				r.promptLPs[i].Top = top[i*r.promptN : (i+1)*r.promptN]
			}
		}
	}
	if q := e.pending.Add(1); q > int64(e.opt.MaxQueue) {
		e.pending.Add(-1)
		return nil, fmt.Errorf("%d requests wait for admission, the queue holds %d; retry later: %w", q-1, e.opt.MaxQueue, ErrOverloaded)
	}
	r.id = e.nextID.Add(uint64(n)) - uint64(n) + 1
	r.promptIDs, r.maxOut, r.stopIDs = prompt, maxOut, stop
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.pending.Add(-1)
		return nil, ErrClosed
	}
	e.mu.Unlock()
	// The cancellation hook exists before the loop can see the request; an
	// abort that overtakes the request is repeated once it is queued.
	r.stop = context.AfterFunc(ctx, func() { e.abort(r.id) })
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		r.stop()
		e.pending.Add(-1)
		return nil, ErrClosed
	}
	e.inbox = append(e.inbox, r)
	if ctx.Err() != nil { // drained with the request, after it
		e.aborts = append(e.aborts, r.id)
	}
	e.mu.Unlock()
	e.signal()
	return r.events, nil
}

func (e *Engine) validate(req *Request) error {
	if req.Sampling.TopP == 0 {
		req.Sampling.TopP = 1 // the zero value keeps every token
	}
	minTokens := 1
	if req.ScorePrompt {
		minTokens = 0
	}
	switch n := max(req.N, 1); {
	case len(req.PromptIDs) == 0:
		return fmt.Errorf("request %s: empty prompt; give at least one token", req.ID)
	case len(req.PromptIDs) > e.opt.MaxModelLen:
		return fmt.Errorf("request %s: prompt of %d tokens is longer than --max-model-len %d; shorten the prompt to at most %d tokens",
			req.ID, len(req.PromptIDs), e.opt.MaxModelLen, e.opt.MaxModelLen)
	case req.MaxTokens < minTokens:
		return fmt.Errorf("request %s: max tokens must be ≥ %d, got %d", req.ID, minTokens, req.MaxTokens)
	case n > e.opt.MaxNumSeqs:
		return fmt.Errorf("request %s: n is %d, more sequences than --max-num-seqs %d runs at once; ask for at most %d", req.ID, n, e.opt.MaxNumSeqs, e.opt.MaxNumSeqs)
	case req.TopLogprobs < 0 || req.TopLogprobs > e.cfg.VocabSize || req.PromptTopLogprobs < 0 || req.PromptTopLogprobs > e.cfg.VocabSize:
		return fmt.Errorf("request %s: top logprobs %d and prompt top logprobs %d must be in [0, %d], the vocabulary", req.ID, req.TopLogprobs, req.PromptTopLogprobs, e.cfg.VocabSize)
	case req.ScorePrompt && e.opt.MaxPromptLogitRows == 0:
		return fmt.Errorf("request %s: prompt logprobs need logit rows for the prompt, and the engine runs with --max-prompt-logit-rows 0; start it with --max-prompt-logit-rows %d", req.ID, DefaultMaxPromptLogitRows)
	}
	for i, t := range req.PromptIDs {
		if t < 0 || t >= e.cfg.VocabSize {
			return fmt.Errorf("request %s: prompt token %d is %d, outside the vocabulary [0, %d)", req.ID, i, t, e.cfg.VocabSize)
		}
	}
	for i, t := range req.StopTokenIDs {
		if t < 0 || t >= e.cfg.VocabSize {
			return fmt.Errorf("request %s: stop token %d is %d, outside the vocabulary [0, %d)", req.ID, i, t, e.cfg.VocabSize)
		}
	}
	if err := req.Sampling.Validate(e.cfg.VocabSize); err != nil {
		return fmt.Errorf("request %s: %w", req.ID, err)
	}
	return nil
}

func (e *Engine) abort(id uint64) {
	e.mu.Lock()
	e.aborts = append(e.aborts, id)
	e.mu.Unlock()
	e.signal()
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Close stops the loop; requests still in flight end with FinishAbort and
// ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	already := e.closed
	e.closed = true
	e.mu.Unlock()
	if !already {
		e.signal()
	}
	<-e.done
	return nil
}

// closeExecutor stops an executor that holds goroutines or other resources.
func closeExecutor(x Executor) {
	if c, ok := x.(io.Closer); ok {
		c.Close()
	}
}

// send delivers one event of sq, with the prompt logprobs if the stream has
// not carried them yet.
func (e *Engine) send(sq *sequence, ev Event) {
	r := sq.req
	ev.Index = sq.index
	if !r.sentFirst && ev.Err == nil {
		r.sentFirst, ev.Scheduled = true, r.scheduled
		if r.promptN >= 0 {
			ev.Prompt = r.promptLPs
		}
	}
	r.events <- ev
}

// end sends sq's last event and forgets it; the stream closes with the
// request's last sequence.
func (e *Engine) end(sq *sequence, ev Event) {
	if sq.ended {
		return
	}
	r := sq.req
	ev.PromptTokens, ev.OutputTokens = r.prompt, sq.out
	e.send(sq, ev)
	sq.ended = true
	delete(e.live, r.id+uint64(sq.index))
	if r.open--; r.open == 0 {
		close(r.events)
		r.stop()
		delete(e.reqs, r.id)
	}
}

// endRequest aborts every sequence of r still running.
func (e *Engine) endRequest(r *request, ev Event) {
	for _, sq := range r.seqs {
		if !sq.ended {
			e.sched.Abort(r.id + uint64(sq.index))
			e.end(sq, ev)
		}
	}
}

func (e *Engine) loop() {
	defer close(e.done)
	defer closeExecutor(e.exec)
	for {
		e.mu.Lock()
		inbox, aborts, closed := e.inbox, e.aborts, e.closed
		e.inbox, e.aborts = e.spare[:0], e.spareID[:0]
		e.mu.Unlock()
		e.spare, e.spareID = inbox, aborts
		for _, r := range inbox {
			e.reqs[r.id] = r
			for _, sq := range r.seqs {
				e.live[r.id+uint64(sq.index)] = sq
			}
			err := e.sched.AddWith(r.id, r.promptIDs, r.maxOut, r.stopIDs, SeqOptions{N: len(r.seqs), PromptLogits: r.promptN >= 0, Enders: r.enders})
			if err != nil {
				e.pending.Add(-1)
				e.endRequest(r, Event{Finish: FinishAbort, Err: err})
			}
		}
		for _, id := range aborts {
			r, ok := e.reqs[id]
			if !ok {
				continue
			}
			if e.sched.Queued(id) {
				e.pending.Add(-1)
			}
			e.mu.Lock()
			e.stats.Aborted++
			e.mu.Unlock()
			e.endRequest(r, Event{Finish: FinishAbort, Err: fmt.Errorf("request cancelled: %w", context.Canceled)})
		}
		if closed {
			for _, r := range e.reqs {
				e.endRequest(r, Event{Finish: FinishAbort, Err: ErrClosed})
			}
			return
		}
		if err := e.Err(); err != nil {
			// A request that slipped in as the engine failed ends at once.
			e.failAll(err)
			e.publish(&StepPlan{}, false, 0)
			<-e.wake
			continue
		}
		p := e.sched.Schedule()
		if len(p.Entries) == 0 {
			e.publish(p, false, 0)
			e.idle()
			continue
		}
		e.pending.Add(-int64(len(p.Admitted)))
		if len(p.Admitted) > 0 {
			now := time.Now()
			for _, id := range p.Admitted {
				if r, ok := e.reqs[id]; ok {
					r.scheduled = now
				}
			}
		}
		e.step(p)
	}
}

// step runs one plan and delivers its tokens; a decode-only plan runs
// through decodeOnlyStep.
func (e *Engine) step(p *StepPlan) {
	if p.NumDecodes == len(p.Entries) {
		e.decodeOnlyStep(p)
		return
	}
	e.runStep(p, false)
}

// decodeOnlyStep runs a plan whose every entry decodes: the heap profile
// tells its allocations from those of other steps by this frame
// (AllocCounter).
//
//go:noinline
func (e *Engine) decodeOnlyStep(p *StepPlan) {
	if a := e.allocs.Load(); a != nil {
		a.decodes.Add(1)
	}
	e.runStep(p, true)
}

// runStep runs one plan and delivers its tokens.
func (e *Engine) runStep(p *StepPlan, decodeOnly bool) {
	measure := e.opt.MeasureAllocs && decodeOnly
	var before, after runtime.MemStats
	if measure {
		runtime.ReadMemStats(&before)
	}
	if err := e.exec.Forward(&p.Batch); err != nil {
		err = fmt.Errorf("%w: step of %d tokens, %d sequences: %w", ErrFailed, p.NumTokens, len(p.Entries), err)
		e.fail(p, err)
		e.die(err)
		return
	}
	sp := e.spec
	row, nf := 0, 0
	for i, en := range p.Entries {
		e.sampled[i] = -1
		sq := e.live[en.ID]
		if p.Batch.Seqs[i].LogitsAll && en.Drafts == 0 {
			e.scorePrompt(sq.req, en, row)
		}
		first := row
		row += en.LogitRows
		if sp != nil {
			sp.accepted[i] = 0
		}
		if !en.Sample {
			continue
		}
		if en.Drafts > 0 {
			sp.accepted[i], e.sampled[i] = e.verify(sq, i, first, p.Batch.Seqs[i].Tokens[1:])
			continue
		}
		_, logits := e.exec.Logits(row - 1)
		e.sampled[i], e.logprob[i] = e.sample(sq, logits)
		if sp != nil {
			sp.tokLP[i*(1+sp.k)] = e.logprob[i]
		}
		for k := range en.Fork {
			e.forked[nf+k], e.forkLP[nf+k] = e.sample(sq.req.seqs[k+1], logits)
		}
		nf += en.Fork
	}
	var accepted []int32
	if sp != nil {
		accepted = sp.accepted
	}
	fin, err := e.sched.CompleteSpec(e.sampled, e.forked[:nf], accepted)
	if err != nil {
		e.fail(p, err)
		return
	}
	for _, f := range fin {
		e.live[f.ID].finish = f.Reason
	}
	// Counters first, so that a reader who saw a stream end sees its step.
	e.publish(p, decodeOnly, len(fin))
	nf = 0
	taken := e.sched.Taken()
	for i, en := range p.Entries {
		if !en.Sample {
			continue
		}
		sq, ok := e.live[en.ID]
		if !ok { // its request failed earlier in this step
			nf += en.Fork
			continue
		}
		if en.Drafts > 0 {
			e.deliverRound(sq, p.Batch.Seqs[i].Tokens[1:1+sp.accepted[i]], e.sampled[i], sp.tokLP[i*(1+sp.k):], taken[i])
			continue
		}
		e.deliver(sq, int(e.sampled[i]), e.logprob[i])
		for k := range en.Fork {
			e.deliver(sq.req.seqs[k+1], int(e.forked[nf+k]), e.forkLP[nf+k])
		}
		nf += en.Fork
	}
	if sp != nil {
		if err := e.draft(p); err != nil {
			e.fail(p, err)
			return
		}
	}
	if measure {
		runtime.ReadMemStats(&after)
		e.mu.Lock()
		e.stats.MeasuredDecodeSteps++
		e.stats.DecodeStepAllocs += after.Mallocs - before.Mallocs
		e.mu.Unlock()
	}
}

// sample draws sq's next token from logits and, when the request asks for
// them, records the step's most likely tokens.
func (e *Engine) sample(sq *sequence, logits []float32) (int32, float64) {
	return e.sampleAt(sq, logits, 0)
}

// sampleAt is sample for the j-th token sq emits in this step (a
// verification emits several): its top logprobs go to output slot out+j.
func (e *Engine) sampleAt(sq *sequence, logits []float32, j int) (int32, float64) {
	tok, lp := sq.sampler.Sample(e.scratch, logits)
	if n := sq.req.topN; n > 0 && sq.out+j < sq.req.maxOut {
		o := sq.out + j
		sampler.TopLogprobs(logits, sampler.LogSumExp(logits), sq.top[o*n:(o+1)*n])
	}
	return int32(tok), lp
}

// deliverRound sends the n tokens a verification appended to sq: of its
// accepted drafts, then the target's token after them; the last one sent
// carries the finish when the scheduler ended sq (possibly inside the
// accepted drafts).
func (e *Engine) deliverRound(sq *sequence, accepted []int32, last int32, lps []float64, n int) {
	finish := sq.finish
	sq.finish = ""
	for j := 0; j < n; j++ {
		tok := last
		if j < len(accepted) {
			tok = accepted[j]
		}
		if j < n-1 {
			e.emit(sq, int(tok), lps[j]) // drawn before the round's last draw, which alone can fail
			continue
		}
		sq.finish = finish
		e.deliver(sq, int(tok), lps[j])
	}
}

// deliver sends sq's sampled token, ending sq when the scheduler finished
// it. A request that only scores its prompt (max tokens 0) delivers no token.
func (e *Engine) deliver(sq *sequence, tok int, lp float64) {
	r := sq.req
	if sq.ended {
		return // its request failed earlier in this step
	}
	if err := sq.sampler.Err(); err != nil {
		e.endRequest(r, Event{Finish: FinishAbort, Err: fmt.Errorf("request sequence %d: structured output: %w", sq.index, err)})
		e.mu.Lock()
		e.stats.Aborted++
		e.mu.Unlock()
		return
	}
	e.emit(sq, tok, lp)
}

// emit sends sq's token, ending sq when the scheduler finished it.
func (e *Engine) emit(sq *sequence, tok int, lp float64) {
	r := sq.req
	if sq.ended {
		return // its request failed earlier in this step
	}
	if r.maxTokens == 0 {
		e.end(sq, Event{Finish: FinishLength})
		return
	}
	ev := Event{Token: tok, Logprob: lp}
	if n := r.topN; n > 0 {
		ev.Top = sq.top[sq.out*n : (sq.out+1)*n]
	}
	sq.out++
	if sq.finish != "" {
		ev.Finish = sq.finish
		e.end(sq, ev)
		return
	}
	e.send(sq, ev)
}

// scorePrompt records the logprobs of the prompt tokens that entry en's
// logit rows (from row first on) predict: row j holds position en.Start+j,
// which scores prompt token en.Start+j+1.
func (e *Engine) scorePrompt(r *request, en Entry, first int) {
	for j := range en.LogitRows {
		pos := en.Start + j + 1
		if pos >= r.prompt {
			break
		}
		_, logits := e.exec.Logits(first + j)
		lse := sampler.LogSumExp(logits)
		tok := int(r.promptIDs[pos])
		pl := &r.promptLPs[pos]
		pl.Logprob = float64(logits[tok]) - lse
		pl.Rank = sampler.Rank(logits, tok)
		if r.promptN > 0 {
			sampler.TopLogprobs(logits, lse, pl.Top)
		}
	}
}

// publish copies the scheduler's counters into the stats after a step.
func (e *Engine) publish(p *StepPlan, decodeOnly bool, finished int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &e.stats
	s.Finished += int64(finished)
	for _, en := range p.Entries {
		if en.Sample {
			s.OutputTokens += int64(1 + en.Fork)
		}
	}
	if len(p.Entries) > 0 {
		s.Steps++
		s.ScheduledTokens += int64(p.NumTokens)
		if decodeOnly {
			s.DecodeSteps++
		}
		for _, en := range p.Entries {
			if !en.Decode {
				s.PrefillTokens += int64(en.NumTokens)
			}
		}
	}
	s.Preemptions = e.sched.Preemptions
	s.PrefixQueryTokens, s.PrefixHitTokens = e.sched.PromptTokens, e.sched.PrefixHitTokens
	s.KVBlocksInUse, s.KVBlocksPeak = e.sched.HeldBlocks(), e.sched.PeakBlocks
	s.Running, s.Waiting = e.sched.Running(), e.sched.Waiting()
	if sp := e.spec; sp != nil {
		s.Spec = sp.stats
	}
	if e.plans != nil {
		s.KernelPlansBuiltAfterWarmup = e.plans.KernelPlansBuilt() - e.plans0
	}
}

// fail ends every request of a failed step with the error.
func (e *Engine) fail(p *StepPlan, err error) {
	n := 0
	for _, en := range p.Entries {
		sq, ok := e.live[en.ID]
		if !ok || sq.ended {
			continue
		}
		n++
		e.endRequest(sq.req, Event{Finish: FinishAbort, Err: err})
	}
	e.mu.Lock()
	e.stats.Aborted += int64(n)
	e.mu.Unlock()
}

// breakable is implemented by executors that can learn, while no step
// runs, that their ranks are gone (the multi-process executor's heartbeat).
type breakable interface {
	Broken() <-chan struct{}
	BrokenErr() error
}

// setFailed records the error that ended the engine, once.
func (e *Engine) setFailed(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed == nil {
		e.failed = err
		close(e.failCh)
	}
}

// idle waits for work, or for the executor to break while there is none.
func (e *Engine) idle() {
	var broken <-chan struct{}
	if b, ok := e.exec.(breakable); ok && e.Err() == nil {
		broken = b.Broken()
	}
	select {
	case <-e.wake:
	case <-broken:
		e.die(fmt.Errorf("%w: %w", ErrFailed, e.exec.(breakable).BrokenErr()))
	}
}

// die ends every request the engine holds with err, publishes the emptied
// scheduler's counters, and only then records err and closes Failed, so
// whoever wakes on Failed sees no request running and no block held.
func (e *Engine) die(err error) {
	e.failAll(err)
	e.publish(&StepPlan{}, false, 0)
	e.setFailed(err)
}

// failAll ends every request the engine still holds, queued or running,
// with err.
func (e *Engine) failAll(err error) {
	n := 0
	for id, r := range e.reqs {
		if e.sched.Queued(id) {
			e.pending.Add(-1)
		}
		n++
		e.endRequest(r, Event{Finish: FinishAbort, Err: err})
	}
	e.mu.Lock()
	e.stats.Aborted += int64(n)
	e.mu.Unlock()
}

// Err is the error that ended the engine (wrapping ErrFailed and the step's
// executor error, which names the rank that failed or did not arrive), or
// nil while it serves.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

// Failed is closed when the engine fails (Err is then set).
func (e *Engine) Failed() <-chan struct{} { return e.failCh }

// CollectiveTimer is implemented by executors whose ranks run collectives.
type CollectiveTimer interface {
	CollectiveSeconds() float64
}

// CollectiveSeconds is the time the executor's ranks have spent inside
// collectives (0 for a single rank).
func (e *Engine) CollectiveSeconds() float64 {
	if ct, ok := e.exec.(CollectiveTimer); ok {
		return ct.CollectiveSeconds()
	}
	return 0
}
