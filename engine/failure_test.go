package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cpmla/cpmla/kvcache"
)

// A step that fails (a rank that did not arrive) ends the engine: the
// running request and the one queued behind it fail with the step's error,
// which names the rank, and every later Submit is refused with ErrFailed
// until the engine closes; no block stays held.
func TestFailedStepEndsTheEngine(t *testing.T) {
	cfg := fakeModel(t)
	factory, made := fakeFactory(kvcache.Layout{N: 1, I: 1}, cfg.VocabSize)
	e, err := New(cfg, 0, factory, Options{MaxNumBatchedTokens: 32, MaxNumSeqs: 1, MaxModelLen: 48, MemoryLimit: 1 << 30, MaxQueue: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fx := (*made)[len(*made)-1]
	fx.hold.Store(true)
	running, err := e.Submit(context.Background(), Request{PromptIDs: []int{1, 2, 3}, MaxTokens: 40, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	fx.gate <- struct{}{} // the first step runs
	queued, err := e.Submit(context.Background(), Request{PromptIDs: []int{4}, MaxTokens: 4, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	lost := errors.New("collective timeout after 1s in group world[0 1] seq 9 (AllGather f32 count 4) on rank 0: ranks [1] did not arrive")
	fx.failWith.Store(&lost)
	fx.hold.Store(false)
	close(fx.gate)
	for name, ch := range map[string]<-chan Event{"running": running, "queued": queued} {
		_, _, last := collect(ch)
		if last.Finish != FinishAbort || !errors.Is(last.Err, ErrFailed) || !strings.Contains(last.Err.Error(), "ranks [1] did not arrive") {
			t.Errorf("%s request ended with %+v, want FinishAbort with the step's error", name, last)
		}
	}
	<-e.Failed()
	if err := e.Err(); !errors.Is(err, ErrFailed) || !errors.Is(err, lost) {
		t.Errorf("Err() = %v, want ErrFailed wrapping the step's error", err)
	}
	if _, err := e.Submit(context.Background(), Request{PromptIDs: []int{5}, MaxTokens: 2}); !errors.Is(err, ErrFailed) {
		t.Errorf("Submit after the failure: %v, want ErrFailed", err)
	}
	if st := e.Stats(); st.KVBlocksInUse != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Errorf("after the failure: %d blocks held, %d running, %d waiting", st.KVBlocksInUse, st.Running, st.Waiting)
	}
}
