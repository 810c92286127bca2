package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestEngineAllocation: an allocation counts when code of the engine made
// it on a stack through the engine's step, an in-process rank or a kernel
// worker; the Go runtime's bookkeeping (a wait record of a blocked join)
// and the benchmark's own goroutines do not count.
func TestEngineAllocation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stack []string
		want  bool
	}{
		{"engine step", []string{"runtime.mallocgc", "runtime.makeslice", "github.com/cpmla/cpmla/sampler.(*State).Sample",
			"github.com/cpmla/cpmla/engine.(*Engine).sample", "github.com/cpmla/cpmla/engine.(*Engine).step", "github.com/cpmla/cpmla/engine.(*Engine).loop"}, true},
		{"rank goroutine", []string{"runtime.mallocgc", "runtime.newobject", "github.com/cpmla/cpmla/model.(*Runner).layer",
			"github.com/cpmla/cpmla/model.(*Runner).Forward", "github.com/cpmla/cpmla/engine.(*rankGroup).loop"}, true},
		{"kernel worker", []string{"runtime.mallocgc", "runtime.growslice", "github.com/cpmla/cpmla/kernels.(*gemmTask).runPart", "github.com/cpmla/cpmla/kernels.worker"}, true},
		{"blocked join", []string{"runtime.mallocgc", "runtime.newobject", "runtime.acquireSudog", "runtime.semacquire1",
			"sync.runtime_SemacquireWaitGroup", "sync.(*WaitGroup).Wait", "github.com/cpmla/cpmla/kernels.runParts",
			"github.com/cpmla/cpmla/engine.(*Engine).step"}, false},
		{"scavenger", []string{"runtime.mallocgc", "runtime.growslice", "runtime.(*timers).addHeap", "runtime.bgscavenge"}, false},
		{"benchmark goroutine", []string{"runtime.mallocgc", "runtime.growslice", "main.runLatencyIteration.func1"}, false},
	} {
		if got := engineAllocation(tc.stack); got != tc.want {
			t.Errorf("%s: engineAllocation = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBenchThroughputCountsTheEngineAlone: on two threads (kernel calls
// join their workers, blocking when a worker is late) the engine's decode
// steps allocate nothing, whatever the process around them does.
func TestBenchThroughputCountsTheEngineAlone(t *testing.T) {
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"bench", "throughput", "--model", tinyCheckpoint(t), "--num-prompts", "6", "--input-len", "9", "--output-len", "24",
		"--kv-cache-memory", "64MiB", "--threads-per-rank", "2", "--quiet", "--json"})
	if err := root.Execute(); err != nil {
		t.Fatalf("bench throughput: %v\n%s", err, errOut.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if _, ok := res["process_allocs_per_decode_step"]; !ok {
		t.Errorf("no process_allocs_per_decode_step in %s", out.String())
	}
	if got := res["allocs_per_decode_step"]; got != 0.0 {
		t.Errorf("allocs_per_decode_step = %v, want 0 (the engine's decode steps allocate nothing)", got)
	}
	if got := res["decode_steps"].(float64); got < 20 {
		t.Errorf("%v decode steps, want at least 20", got)
	}
}
