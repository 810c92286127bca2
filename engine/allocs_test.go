package engine

import "testing"

// TestEngineAllocation: an allocation counts when code of the engine made
// it on a stack through a decode-only step, an in-process rank or a kernel
// worker; the Go runtime's bookkeeping (a wait record of a blocked join)
// and the benchmark's own goroutines do not count.
func TestEngineAllocation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stack []string
		want  bool
	}{
		{"decode-only step", []string{"runtime.mallocgc", "runtime.makeslice", "github.com/cpmla/cpmla/sampler.(*State).Sample",
			"github.com/cpmla/cpmla/engine.(*Engine).sample", "github.com/cpmla/cpmla/engine.(*Engine).runStep",
			"github.com/cpmla/cpmla/engine.(*Engine).decodeOnlyStep", "github.com/cpmla/cpmla/engine.(*Engine).step", "github.com/cpmla/cpmla/engine.(*Engine).loop"}, true},
		{"prefill step", []string{"runtime.mallocgc", "runtime.makeslice", "github.com/cpmla/cpmla/engine.(*Scheduler).fork",
			"github.com/cpmla/cpmla/engine.(*Scheduler).CompleteSpec", "github.com/cpmla/cpmla/engine.(*Engine).runStep",
			"github.com/cpmla/cpmla/engine.(*Engine).step", "github.com/cpmla/cpmla/engine.(*Engine).loop"}, false},
		{"rank goroutine", []string{"runtime.mallocgc", "runtime.newobject", "github.com/cpmla/cpmla/model.(*Runner).layer",
			"github.com/cpmla/cpmla/model.(*Runner).Forward", "github.com/cpmla/cpmla/engine.(*rankGroup).loop"}, true},
		{"kernel worker", []string{"runtime.mallocgc", "runtime.growslice", "github.com/cpmla/cpmla/kernels.(*gemmTask).runPart", "github.com/cpmla/cpmla/kernels.worker"}, true},
		{"blocked join", []string{"runtime.mallocgc", "runtime.newobject", "runtime.acquireSudog", "runtime.semacquire1",
			"sync.runtime_SemacquireWaitGroup", "sync.(*WaitGroup).Wait", "github.com/cpmla/cpmla/kernels.runParts",
			"github.com/cpmla/cpmla/engine.(*Engine).runStep", "github.com/cpmla/cpmla/engine.(*Engine).decodeOnlyStep"}, false},
		{"scavenger", []string{"runtime.mallocgc", "runtime.growslice", "runtime.(*timers).addHeap", "runtime.bgscavenge"}, false},
		{"benchmark goroutine", []string{"runtime.mallocgc", "runtime.growslice", "main.runLatencyIteration.func1"}, false},
	} {
		if got := engineAllocation(tc.stack); got != tc.want {
			t.Errorf("%s: engineAllocation = %v, want %v", tc.name, got, tc.want)
		}
	}
}
