package engine

import (
	"runtime"
	"strings"
	"sync/atomic"
)

// AllocCounter counts the heap allocations the engine's own code makes
// during decode-only steps, the count the engine's tests pin at zero and
// `bench throughput` reports as allocs_per_decode_step.
// runtime.MemStats counts every allocation of the process: other
// goroutines' (a caller submitting requests while a step runs, a
// benchmark's progress bar) and objects the Go runtime allocates for
// itself — a goroutine that blocks on a semaphore (a kernel call joining
// its workers) takes a wait record from a per-processor cache that every
// garbage collection empties, and the scavenger grows its timer heap — so
// a process-wide count can report allocations of an engine that makes
// none.
//
// Instead the heap profiler records every allocation
// (runtime.MemProfileRate = 1) from StartAllocCounter to Finish, and an
// allocation counts when its call stack passes through a decode-only step
// of the engine (engine.(*Engine).decodeOnlyStep), an in-process rank's
// step loop or a kernel worker, and the function that allocated it is not
// the Go runtime's own bookkeeping. A rank's or a worker's allocation
// counts in whatever step it is made: neither allocates after warm-up.
// The rate stays at 1 throughout because the runtime profiles the first
// allocation of every processor after the rate changes, whatever the new
// rate: a rate switched off between steps would record the first
// allocation of the step after. MemProfileRate is the process's: one
// counter at a time.
type AllocCounter struct {
	base    map[[32]uintptr]int64
	decodes atomic.Int64 // decode-only steps observed
	prev    int
}

// StartAllocCounter starts profiling every allocation and takes the heap
// profile's baseline; call it after warm-up, before the measured requests,
// and hand the counter to the engine with Engine.CountAllocs.
func StartAllocCounter() *AllocCounter {
	a := &AllocCounter{prev: runtime.MemProfileRate}
	runtime.MemProfileRate = 1
	a.base = allocRecords()
	return a
}

// CountAllocs makes the engine count its decode-only steps for a (nil: no
// counter) from its next step on.
func (e *Engine) CountAllocs(a *AllocCounter) { e.allocs.Store(a) }

// Finish stops profiling and returns the engine's allocations over the
// decode-only steps and the number of those steps. Call it once the
// measured requests have ended (no step running).
func (a *AllocCounter) Finish() (allocs int64, decodeSteps int64) {
	for key, n := range allocRecords() {
		if d := n - a.base[key]; d > 0 && engineAllocation(stackFuncs(key)) {
			allocs += d
		}
	}
	runtime.MemProfileRate = a.prev
	return allocs, a.decodes.Load()
}

// allocRecords returns the allocated-object count of every stack of the
// heap profile, after two collections have published every allocation.
func allocRecords() map[[32]uintptr]int64 {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	out := make(map[[32]uintptr]int64, len(recs))
	for _, r := range recs {
		out[r.Stack0] += r.AllocObjects
	}
	return out
}

// stackFuncs names the functions of a profile stack, innermost first.
func stackFuncs(stack [32]uintptr) []string {
	var pcs []uintptr
	for _, pc := range stack {
		if pc == 0 {
			break
		}
		pcs = append(pcs, pc)
	}
	var names []string
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		names = append(names, f.Function)
		if !more {
			return names
		}
	}
}

// engineRoots are the functions one of which an allocation's stack must
// pass through to be the engine's: a decode-only step of the engine loop,
// the step loop of an in-process rank, a kernel worker.
var engineRoots = []string{
	"github.com/cpmla/cpmla/engine.(*Engine).decodeOnlyStep",
	"github.com/cpmla/cpmla/engine.(*rankGroup).loop",
	"github.com/cpmla/cpmla/kernels.worker",
}

// allocEntries are the runtime functions compiled code calls to allocate:
// an allocation made through them belongs to their caller.
var allocEntries = map[string]bool{
	"runtime.mallocgc": true, "runtime.newobject": true, "runtime.newarray": true, "runtime.makeslice": true,
	"runtime.makeslicecopy": true, "runtime.growslice": true, "runtime.makemap": true, "runtime.makemap_small": true,
	"runtime.makechan": true, "runtime.mapassign": true, "runtime.mapassign_fast32": true, "runtime.mapassign_fast64": true,
	"runtime.mapassign_faststr": true, "runtime.mapassign_fast64ptr": true, "runtime.rawstring": true,
	"runtime.rawstringtmp": true, "runtime.rawbyteslice": true, "runtime.rawruneslice": true,
	"runtime.concatstrings": true, "runtime.concatstring2": true, "runtime.concatstring3": true,
	"runtime.concatstring4": true, "runtime.concatstring5": true, "runtime.slicebytetostring": true,
	"runtime.stringtoslicebyte": true, "runtime.stringtoslicerune": true, "runtime.slicerunetostring": true,
	"runtime.convT": true, "runtime.convT16": true, "runtime.convT32": true, "runtime.convT64": true,
	"runtime.convTstring": true, "runtime.convTslice": true, "runtime.convTnoptr": true, "runtime.mallocgcSmallNoscan": true,
	"runtime.mallocgcSmallScanNoHeader": true, "runtime.mallocgcSmallScanHeader": true, "runtime.mallocgcLarge": true,
	"runtime.mallocgcTiny": true, "runtime.profilealloc": true, "runtime.mProf_Malloc": true,
}

// engineAllocation reports whether an allocation with the stack funcs
// (innermost first) is the engine's: made by code outside the Go runtime
// (the first frame past the allocation entry points) on a stack through one
// of the engine's roots.
func engineAllocation(funcs []string) bool {
	site := ""
	for _, f := range funcs {
		if !allocEntries[f] {
			site = f
			break
		}
	}
	if site == "" || strings.HasPrefix(site, "runtime.") {
		return false
	}
	for _, f := range funcs {
		for _, r := range engineRoots {
			if f == r {
				return true
			}
		}
	}
	// A stack the profile cut at its depth may have lost its root: it
	// counts when the engine's packages made the allocation.
	if len(funcs) >= profileDepth {
		for _, p := range enginePackages {
			if strings.HasPrefix(site, p) {
				return true
			}
		}
	}
	return false
}

// profileDepth is the number of frames runtime.MemProfile keeps.
const profileDepth = len(runtime.MemProfileRecord{}.Stack0)

// enginePackages are the packages a decode step runs.
var enginePackages = []string{"github.com/cpmla/cpmla/engine.", "github.com/cpmla/cpmla/model.", "github.com/cpmla/cpmla/kernels.",
	"github.com/cpmla/cpmla/mla.", "github.com/cpmla/cpmla/kvcache.", "github.com/cpmla/cpmla/cp.", "github.com/cpmla/cpmla/comm",
	"github.com/cpmla/cpmla/sampler."}
