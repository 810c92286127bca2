package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cpmla/cpmla/engine"
)

// fakeEngine is a deterministic engine.Submitter: every request generates
// the script's tokens (the reply, then EOS) up to MaxTokens, one event per
// token after a fixed delay, with logprob -(i+1)/8 for the i-th token. It
// records every request and whether it ended by cancellation.
type fakeEngine struct {
	script []int // generated ids, in order
	eos    int
	delay  time.Duration
	// finalCarriesToken puts the last token on the finishing event
	// instead of sending a separate finishing event.
	finalCarriesToken bool
	// block makes every request wait for its context to end.
	block bool

	mu        sync.Mutex
	live      map[string]bool
	submitted []engine.Request
	cancelled []string
	cancelCh  chan string
}

func newFakeEngine(script []int, eos int) *fakeEngine {
	return &fakeEngine{script: script, eos: eos, live: map[string]bool{}, cancelCh: make(chan string, 1024)}
}

func fakeLogprob(i int) float64 { return -float64(i+1) / 8 }

func (f *fakeEngine) Submit(ctx context.Context, req engine.Request) (<-chan engine.Event, error) {
	if req.MaxTokens < 1 {
		return nil, fmt.Errorf("max tokens %d < 1", req.MaxTokens)
	}
	f.mu.Lock()
	if f.live[req.ID] {
		f.mu.Unlock()
		return nil, fmt.Errorf("duplicate request id %q", req.ID)
	}
	f.live[req.ID] = true
	f.submitted = append(f.submitted, req)
	f.mu.Unlock()
	ch := make(chan engine.Event)
	go f.run(ctx, req, ch)
	return ch, nil
}

func (f *fakeEngine) run(ctx context.Context, req engine.Request, ch chan<- engine.Event) {
	defer close(ch)
	cancelled := func() {
		f.mu.Lock()
		delete(f.live, req.ID)
		f.cancelled = append(f.cancelled, req.ID)
		f.mu.Unlock()
		select {
		case f.cancelCh <- req.ID:
		default:
		}
	}
	if f.block {
		<-ctx.Done()
		cancelled()
		return
	}
	// The tokens this request generates and why it ends.
	var toks []int
	finish := engine.FinishLength
	for _, id := range f.script {
		if len(toks) == req.MaxTokens {
			break
		}
		toks = append(toks, id)
		if slices.Contains(req.StopTokenIDs, id) {
			finish = engine.FinishStop
			break
		}
	}
	send := func(ev engine.Event) bool {
		if f.delay > 0 {
			t := time.NewTimer(f.delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
		}
		select {
		case <-ctx.Done():
			return false
		case ch <- ev:
			return true
		}
	}
	final := engine.Event{Finish: finish, PromptTokens: len(req.PromptIDs), OutputTokens: len(toks)}
	for i, id := range toks {
		ev := engine.Event{Token: id, Logprob: fakeLogprob(i)}
		if f.finalCarriesToken && i == len(toks)-1 {
			final.Token, final.Logprob = ev.Token, ev.Logprob
			break
		}
		if !send(ev) {
			cancelled()
			return
		}
	}
	if !send(final) {
		cancelled()
		return
	}
	f.mu.Lock()
	delete(f.live, req.ID)
	f.mu.Unlock()
}

// liveRequests is the number of requests the fake still runs.
func (f *fakeEngine) liveRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// submittedCount is the number of requests that reached the fake.
func (f *fakeEngine) submittedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.submitted)
}

// cancelledCount is the number of requests the fake saw cancelled.
func (f *fakeEngine) cancelledCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cancelled)
}

func (f *fakeEngine) lastRequest() engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.submitted[len(f.submitted)-1]
}

// fakeStats is a fixed Stats source.
type fakeStats struct {
	kv         []float64
	collective float64
	builds     uint64
}

func (s fakeStats) KVUsage() []float64            { return s.kv }
func (s fakeStats) CollectiveSeconds() float64    { return s.collective }
func (s fakeStats) PlanBuildsAfterWarmup() uint64 { return s.builds }

func (s fakeStats) Preemptions() int64                 { return 2 }
func (s fakeStats) PrefixCache() (queries, hits int64) { return 100, 40 }
