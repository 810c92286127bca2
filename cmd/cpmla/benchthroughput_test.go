package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

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
