package inproc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpmla/cpmla/comm"
)

// DefaultTimeout is the deadline of every collective unless Options.Timeout
// sets another.
const DefaultTimeout = 30 * time.Second

// Options configure a world.
type Options struct {
	// Timeout bounds the wait for the other members of a collective
	// (DefaultTimeout if zero).
	Timeout time.Duration
	// TraceCapacity is the number of collectives each member records per
	// group for Group.Trace (0: no trace).
	TraceCapacity int
}

// world is the state shared by all groups of one set of ranks.
type world struct {
	opts   Options
	failed chan struct{} // closed when err is set
	err    atomic.Pointer[failure]

	mu     sync.Mutex
	groups map[string]*shared
}

type failure struct{ err error }

// fail poisons the world with err unless it already failed, and returns the
// error every member must report: the first one.
func (w *world) fail(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.err.Load(); f != nil {
		return f.err
	}
	w.err.Store(&failure{err})
	close(w.failed)
	return err
}

// shared is the rendezvous state of one group, common to its members.
type shared struct {
	name    string
	ranks   []int // world rank of each member
	claimed []bool

	// Published by each member before it arrives, read by all after.
	records []comm.Record
	calls   []comm.Collective
	argErr  []error

	entered []atomic.Uint64 // seq+1 of the last collective each member entered

	arrivals atomic.Uint64   // barrier counter: a barrier completes at each multiple of len(ranks)
	wake     []chan struct{} // per member, capacity 1
}

func newShared(name string, ranks []int) *shared {
	n := len(ranks)
	s := &shared{
		name: name, ranks: ranks, claimed: make([]bool, n),
		records: make([]comm.Record, n), calls: make([]comm.Collective, n), argErr: make([]error, n),
		entered: make([]atomic.Uint64, n),
		wake:    make([]chan struct{}, n),
	}
	for i := range s.wake {
		s.wake[i] = make(chan struct{}, 1)
	}
	return s
}

// NewWorld returns the world groups of size ranks: element r is rank r's
// handle, to be used by that rank's goroutine.
func NewWorld(size int, opts Options) ([]comm.Group, error) {
	if size < 1 {
		return nil, fmt.Errorf("inproc world of %d ranks: need at least 1", size)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("inproc world: negative collective timeout %v; use 0 for the default %v", opts.Timeout, DefaultTimeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	w := &world{opts: opts, failed: make(chan struct{}), groups: map[string]*shared{}}
	ranks := make([]int, size)
	for i := range ranks {
		ranks[i] = i
	}
	name := comm.GroupName("world", ranks)
	s := newShared(name, ranks)
	w.groups[name] = s
	gs := make([]comm.Group, size)
	for i := range gs {
		s.claimed[i] = true
		gs[i] = newMember(w, s, i)
	}
	return gs, nil
}

// Run calls fn concurrently for every group of world (one goroutine per
// rank), waits for all of them and returns their errors by rank.
func Run(ctx context.Context, world []comm.Group, fn func(ctx context.Context, g comm.Group) error) []error {
	errs := make([]error, len(world))
	var wg sync.WaitGroup
	for i, g := range world {
		wg.Go(func() { errs[i] = fn(ctx, g) })
	}
	wg.Wait()
	return errs
}
