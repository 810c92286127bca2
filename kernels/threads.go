package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The worker pool behind SetThreads. A parallel kernel splits its work into
// a fixed number of parts by a static rule (output-column blocks for MatMulT,
// row splits and head blocks for AttendRows), runs part 0 itself and hands
// the others to the workers. Which goroutine runs a part never changes what
// the part computes, so results are bit-identical for every thread count.

// parter is one parallel call: runPart computes part p of parts.
type parter interface {
	runPart(p, parts int)
}

type poolJob struct {
	t        parter
	p, parts int
	join     *joiner
}

// joiner is how the caller of a parallel call waits for its parts: pending
// counts the parts handed to workers that have not finished; wg backs it for
// a caller that stops polling. It belongs to the call's task (so nothing is
// allocated per call).
type joiner struct {
	pending atomic.Int32
	wg      sync.WaitGroup
}

// spinWait is how long an idle worker polls for its next part, and a caller
// for its workers to finish, before blocking. Parallel calls of a decode step
// come back to back (every layer, every query row), and waking a parked
// thread costs tens to hundreds of microseconds on a virtual machine — as
// long as a whole attention call on few rows — so both sides poll briefly
// first, yielding the processor between polls (OpenMP runtimes do the same
// with their spin count).
const spinWait = 100 * time.Microsecond

var pool struct {
	mu      sync.Mutex
	threads atomic.Int32 // parts a parallel kernel may use; 1 runs everything on the caller
	workers int          // goroutines started so far (never stopped)
	jobs    chan poolJob
}

func init() {
	pool.threads.Store(1)
	pool.jobs = make(chan poolJob, 256)
}

// SetThreads sets how many threads a parallel kernel (MatMulT, MatVecT,
// AttendRows) may use per call, counting the calling goroutine, and returns
// the previous value. The default is 1: no goroutine is started and every
// kernel runs on its caller. n > 1 starts n−1 long-lived workers shared by all
// callers (they are never stopped; lowering n leaves them idle). Results are
// bit-identical for every n. n < 1 panics.
func SetThreads(n int) (previous int) {
	if n < 1 {
		panic(fmt.Sprintf("kernels: SetThreads(%d): need at least 1 thread (1 runs kernels on the caller only)", n))
	}
	pool.mu.Lock()
	defer pool.mu.Unlock()
	previous = int(pool.threads.Swap(int32(n)))
	for pool.workers < n-1 {
		pool.workers++
		go worker()
	}
	return previous
}

// Threads reports the current SetThreads value.
func Threads() int { return int(pool.threads.Load()) }

func worker() {
	for {
		j := nextJob()
		j.t.runPart(j.p, j.parts)
		j.join.pending.Add(-1)
		j.join.wg.Done()
	}
}

// nextJob polls for a part for spinWait, then blocks until one comes.
func nextJob() poolJob {
	start := time.Now()
	for {
		select {
		case j := <-pool.jobs:
			return j
		default:
		}
		if time.Since(start) > spinWait {
			return <-pool.jobs
		}
		runtime.Gosched()
	}
}

// runParts runs t's parts 0..parts−1, part 0 on the caller, and returns when
// all are done. join belongs to t (so that nothing is allocated per call).
func runParts(t parter, parts int, join *joiner) {
	if parts <= 1 {
		t.runPart(0, 1)
		return
	}
	join.wg.Add(parts - 1)
	join.pending.Store(int32(parts - 1))
	for p := 1; p < parts; p++ {
		pool.jobs <- poolJob{t: t, p: p, parts: parts, join: join}
	}
	t.runPart(0, parts)
	start := time.Now()
	for join.pending.Load() > 0 && time.Since(start) <= spinWait {
		runtime.Gosched()
	}
	join.wg.Wait()
}

// partRange splits [0, n) into parts ranges whose bounds are multiples of
// align (except n) and returns range p.
func partRange(n, align, p, parts int) (lo, hi int) {
	units := (n + align - 1) / align
	lo = min(n, (units*p/parts)*align)
	hi = min(n, (units*(p+1)/parts)*align)
	return lo, hi
}

// planParts is the number of parts for work of the given size: at most the
// thread setting, at most the number of align-sized units, and 1 when the
// call is too small to pay for a hand-off.
func planParts(units int, flops float64) int {
	const minFlopsPerPart = 1 << 18
	t := Threads()
	if t <= 1 || units <= 1 {
		return 1
	}
	return max(1, min(t, units, int(flops/minFlopsPerPart)))
}
