package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
)

// ErrOverloaded is returned by Submit when the queue of requests waiting for
// admission is full (an HTTP front end answers 429).
var ErrOverloaded = errors.New("engine overloaded")

// ErrClosed is returned by Submit after Close, and ends streams Close aborts.
var ErrClosed = errors.New("engine closed")

// Stats are the engine's counters since start-up.
type Stats struct {
	Steps, DecodeSteps int64 // DecodeSteps: steps of decode rows only
	ScheduledTokens    int64
	OutputTokens       int64
	Finished, Aborted  int64
	Preemptions        int64
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

type request struct {
	id      uint64
	events  chan Event
	sampler *sampler.Sampler
	prompt  int
	out     int
	finish  string
	stop    func() bool

	// Scheduler inputs, handed to the loop with the request.
	promptIDs []int32
	maxOut    int
	stopIDs   []int32
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
	stats   Stats
	wake    chan struct{}
	done    chan struct{}
	live    map[uint64]*request // owned by the loop
	sampled []int32
	logprob []float64
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
	e.live = make(map[uint64]*request, opt.MaxNumSeqs)
	e.sampled = make([]int32, opt.MaxNumSeqs)
	e.logprob = make([]float64, opt.MaxNumSeqs)
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
		MaxLogitRows: o.MaxNumSeqs, MaxSeqs: o.MaxNumSeqs, BlockSize: o.scheduler(numBlocks).LocalBlockSize(),
		NumBlocks: numBlocks, KVDType: o.KVDType, IndexerDType: o.IndexerDType,
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

// Submit queues a request and returns its event stream, which ends with an
// event carrying Finish (and Err when the request failed or was aborted).
// A prompt longer than --max-model-len is refused naming both numbers; a full
// queue is refused with an error wrapping ErrOverloaded.
func (e *Engine) Submit(ctx context.Context, req Request) (<-chan Event, error) {
	if err := e.validate(&req); err != nil {
		return nil, err
	}
	if n := e.pending.Add(1); n > int64(e.opt.MaxQueue) {
		e.pending.Add(-1)
		return nil, fmt.Errorf("%d requests wait for admission, the queue holds %d; retry later: %w", n-1, e.opt.MaxQueue, ErrOverloaded)
	}
	s, err := sampler.New(req.Sampling, e.cfg.VocabSize)
	if err != nil {
		e.pending.Add(-1)
		return nil, fmt.Errorf("request %s: %w", req.ID, err)
	}
	maxOut := min(req.MaxTokens, e.opt.MaxModelLen-len(req.PromptIDs)+1)
	r := &request{id: e.nextID.Add(1), events: make(chan Event, maxOut+1), sampler: s, prompt: len(req.PromptIDs)}
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
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.pending.Add(-1)
		return nil, ErrClosed
	}
	e.mu.Unlock()
	r.promptIDs, r.maxOut, r.stopIDs = prompt, req.MaxTokens, stop
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
	switch {
	case len(req.PromptIDs) == 0:
		return fmt.Errorf("request %s: empty prompt; give at least one token", req.ID)
	case len(req.PromptIDs) > e.opt.MaxModelLen:
		return fmt.Errorf("request %s: prompt of %d tokens is longer than --max-model-len %d; shorten the prompt to at most %d tokens",
			req.ID, len(req.PromptIDs), e.opt.MaxModelLen, e.opt.MaxModelLen)
	case req.MaxTokens < 1:
		return fmt.Errorf("request %s: max tokens must be ≥ 1, got %d", req.ID, req.MaxTokens)
	}
	for i, t := range req.PromptIDs {
		if t < 0 || t >= e.cfg.VocabSize {
			return fmt.Errorf("request %s: prompt token %d is %d, outside the vocabulary [0, %d)", req.ID, i, t, e.cfg.VocabSize)
		}
	}
	if err := req.Sampling.Validate(); err != nil {
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

// end sends r's last event and forgets it.
func (e *Engine) end(r *request, ev Event) {
	ev.PromptTokens, ev.OutputTokens = r.prompt, r.out
	r.events <- ev
	close(r.events)
	r.stop()
	delete(e.live, r.id)
}

// closeExecutor stops an executor that holds goroutines or other resources.
func closeExecutor(x Executor) {
	if c, ok := x.(io.Closer); ok {
		c.Close()
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
			e.live[r.id] = r
			if err := e.sched.Add(r.id, r.promptIDs, r.maxOut, r.stopIDs); err != nil {
				e.pending.Add(-1)
				e.end(r, Event{Finish: FinishAbort, Err: err})
			}
		}
		for _, id := range aborts {
			r, ok := e.live[id]
			if !ok {
				continue
			}
			if e.sched.Queued(id) {
				e.pending.Add(-1)
			}
			e.sched.Abort(id)
			e.mu.Lock()
			e.stats.Aborted++
			e.mu.Unlock()
			e.end(r, Event{Finish: FinishAbort, Err: fmt.Errorf("request cancelled: %w", context.Canceled)})
		}
		if closed {
			for id, r := range e.live {
				e.sched.Abort(id)
				e.end(r, Event{Finish: FinishAbort, Err: ErrClosed})
			}
			return
		}
		p := e.sched.Schedule()
		if len(p.Entries) == 0 {
			e.publish(p, false, 0)
			<-e.wake
			continue
		}
		e.pending.Add(-int64(len(p.Admitted)))
		e.step(p)
	}
}

// step runs one plan and delivers its tokens.
func (e *Engine) step(p *StepPlan) {
	decodeOnly := p.NumDecodes == len(p.Entries)
	measure := e.opt.MeasureAllocs && decodeOnly
	var before, after runtime.MemStats
	if measure {
		runtime.ReadMemStats(&before)
	}
	if err := e.exec.Forward(&p.Batch); err != nil {
		e.fail(p, fmt.Errorf("step of %d tokens, %d sequences: %w", p.NumTokens, len(p.Entries), err))
		return
	}
	for i, en := range p.Entries {
		e.sampled[i] = -1
		if en.Sample {
			_, logits := e.exec.Logits(i)
			tok, lp := e.live[en.ID].sampler.Sample(logits)
			e.sampled[i], e.logprob[i] = int32(tok), lp
		}
	}
	fin, err := e.sched.Complete(e.sampled)
	if err != nil {
		e.fail(p, err)
		return
	}
	for _, f := range fin {
		e.live[f.ID].finish = f.Reason
	}
	// Counters first, so that a reader who saw a stream end sees its step.
	e.publish(p, decodeOnly, len(fin))
	for i, en := range p.Entries {
		if !en.Sample {
			continue
		}
		r := e.live[en.ID]
		r.out++
		ev := Event{Token: int(e.sampled[i]), Logprob: e.logprob[i]}
		if r.finish != "" {
			ev.Finish = r.finish
			e.end(r, ev)
			continue
		}
		r.events <- ev
	}
	if measure {
		runtime.ReadMemStats(&after)
		e.mu.Lock()
		e.stats.MeasuredDecodeSteps++
		e.stats.DecodeStepAllocs += after.Mallocs - before.Mallocs
		e.mu.Unlock()
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
			s.OutputTokens++
		}
	}
	if len(p.Entries) > 0 {
		s.Steps++
		s.ScheduledTokens += int64(p.NumTokens)
		if decodeOnly {
			s.DecodeSteps++
		}
	}
	s.Preemptions = e.sched.Preemptions
	s.PrefixQueryTokens, s.PrefixHitTokens = e.sched.PromptTokens, e.sched.PrefixHitTokens
	s.KVBlocksInUse, s.KVBlocksPeak = e.sched.HeldBlocks(), e.sched.PeakBlocks
	s.Running, s.Waiting = e.sched.Running(), e.sched.Waiting()
	if e.plans != nil {
		s.KernelPlansBuiltAfterWarmup = e.plans.KernelPlansBuilt() - e.plans0
	}
}

// fail ends every request of a failed step with the error.
func (e *Engine) fail(p *StepPlan, err error) {
	for _, en := range p.Entries {
		r, ok := e.live[en.ID]
		if !ok {
			continue
		}
		e.sched.Abort(en.ID)
		e.end(r, Event{Finish: FinishAbort, Err: err})
	}
	e.mu.Lock()
	e.stats.Aborted += int64(len(p.Entries))
	e.mu.Unlock()
}

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
