//go:build mpi

package mpi

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpmla/cpmla/comm"
)

// Available reports whether this binary was built with the MPI transport
// (build tag mpi).
const Available = true

// task is work for the MPI goroutine. poll is called on that goroutine
// until it reports done; it may start MPI operations and test them, and
// must not block for long unless every peer is known to be ready.
type task interface {
	poll(now time.Time) (done bool)
}

// syncTask runs one function on the MPI goroutine.
type syncTask struct {
	fn   func()
	done chan struct{}
}

func (t *syncTask) poll(time.Time) bool {
	t.fn()
	close(t.done)
	return true
}

type failure struct{ err error }

// process is the MPI runtime of this process; it implements Process.
type process struct {
	opts  Options
	tasks chan task
	stop  bool // set on the MPI goroutine by the finalize or abort task

	rank, size int
	host       string
	world      *member

	failed  atomic.Pointer[failure]
	pending atomic.Int32 // collectives or handshakes that failed with MPI operations in flight
	closing atomic.Bool

	mu      sync.Mutex
	claimed map[string]bool // parent/sub-group names this process holds a handle on
	leaked  []*member       // members whose buffers MPI may still use
}

var initOnce atomic.Bool

func initMPI(opts Options) (Process, error) {
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("mpi: negative collective timeout %v; use 0 for the default %v", opts.Timeout, DefaultTimeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if !initOnce.CompareAndSwap(false, true) {
		return nil, errors.New("mpi: Init called twice; MPI can be initialized once per process, keep the first Process")
	}
	p := &process{opts: opts, tasks: make(chan task, 64), claimed: map[string]bool{}}
	ready := make(chan error, 1)
	var world commHandle
	go p.loop(func() error {
		var err error
		world, p.rank, p.size, p.host, err = mpiInit()
		return err
	}, ready)
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("mpi: start MPI: %w", err)
	}
	ranks := make([]int, p.size)
	for i := range ranks {
		ranks[i] = i
	}
	key := comm.GroupName("world", ranks)
	p.world = newMember(p, world, key, ranks, p.rank)
	return p, nil
}

// loop is the MPI goroutine: it locks itself to its OS thread for good (MPI
// was initialized on it), then runs tasks until the finalize or abort task
// stops it. With several tasks in flight it polls each in turn.
func (p *process) loop(start func() error, ready chan<- error) {
	runtime.LockOSThread()
	if err := start(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	var active []task
	for !p.stop {
		if len(active) == 0 {
			active = append(active, <-p.tasks)
		}
	drain:
		for {
			select {
			case t := <-p.tasks:
				active = append(active, t)
			default:
				break drain
			}
		}
		now := time.Now()
		keep := active[:0]
		for _, t := range active {
			if !t.poll(now) {
				keep = append(keep, t)
			}
		}
		clear(active[len(keep):])
		active = keep
	}
}

// fail poisons the world with err unless it already failed, and returns the
// error every later collective reports: the first one.
func (p *process) fail(err error) error {
	for {
		if f := p.failed.Load(); f != nil {
			return f.err
		}
		if p.failed.CompareAndSwap(nil, &failure{err}) {
			return err
		}
	}
}

func (p *process) World() comm.Group { return p.world }
func (p *process) Host() string      { return p.host }

func (p *process) Err() error {
	if f := p.failed.Load(); f != nil {
		return f.err
	}
	return nil
}

func (p *process) Close() error {
	if !p.closing.CompareAndSwap(false, true) {
		return errors.New("mpi: Close called twice")
	}
	if p.pending.Load() > 0 {
		p.Abort(1, fmt.Errorf("mpi: MPI operations of a failed collective are still pending, so the job cannot be finalized: %w", p.Err()))
	}
	done := make(chan error, 1)
	t := &syncTask{fn: func() { done <- mpiFinalize(); p.stop = true }, done: make(chan struct{})}
	p.tasks <- t
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("mpi: finalize rank %d: %w", p.rank, err)
		}
		return nil
	case <-time.After(p.opts.Timeout):
		p.Abort(1, fmt.Errorf("mpi: MPI_Finalize on rank %d did not return within %v; some rank did not call Close", p.rank, p.opts.Timeout))
		return nil
	}
}

func (p *process) Abort(code int, err error) {
	p.closing.Store(true)
	fmt.Fprintf(os.Stderr, "cpmla: rank %d aborts the MPI job: %v\n", p.rank, err)
	time.Sleep(p.opts.AbortGrace)
	if code == 0 {
		code = 1
	}
	aborted := make(chan struct{})
	select {
	case p.tasks <- &syncTask{fn: func() { mpiAbort(code); p.stop = true }, done: aborted}:
		select {
		case <-aborted:
		case <-time.After(5 * time.Second):
		}
	case <-time.After(time.Second):
	}
	// MPI_Abort returned, or the MPI goroutine is stuck in a blocking call:
	// end this process; mpirun ends the others.
	os.Exit(code)
}
