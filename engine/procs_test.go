package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
)

// TestProcsBroadcastPlans runs the multi-process protocol on an in-process
// world: rank 0 runs the engine (its executor broadcasts every build, step
// and close), the other ranks follow; greedy outputs equal one rank's and
// every follower ends cleanly at shutdown.
func TestProcsBroadcastPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-mini on four ranks")
	}
	cfg, m := glm5Mini(t)
	src := model.RandomTensors(cfg, model.DefaultWeightSeed)
	l := comm.Layout{TP: 2, PCP: 2, DCP: 2}
	const B = 8
	bp, err := cp.NewBackendPlan(cp.BackendConfig{Layout: l, Interleave: 1, BlockSize: B / l.DCP, KVDtype: "f32", Backend: "auto",
		HeadsPerRank: cfg.NumHeads / l.TP, QKNopeHeadDim: cfg.QKNopeHeadDim, Sparse: true})
	if err != nil {
		t.Fatal(err)
	}
	world, err := inproc.NewWorld(l.World(), inproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int{{5, 6, 7, 8, 9, 10, 11, 12, 13}, {400, 401}, {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}}
	const maxOut = 5
	got := make([][]int32, len(prompts))
	var forked [2][]int32 // n = 2 on prompt 0: its partial block is copied on every process
	errs := inproc.Run(context.Background(), world, func(ctx context.Context, g comm.Group) error {
		pr, weights, err := NewProcs(ctx, cfg, src, g, Parallel{Layout: l, Interleave: 1, Backend: bp})
		if err != nil {
			return err
		}
		if g.Rank() != 0 {
			return pr.Follow()
		}
		defer pr.Shutdown()
		stop := pr.Heartbeat(time.Millisecond)
		defer stop()
		o := Options{MaxNumBatchedTokens: 32, MaxNumSeqs: 3, MaxModelLen: 32, BlockSize: B, KVDType: kvcache.KVF32,
			Layout: kvcache.Layout{N: l.DCP, I: 1}, MemoryLimit: 1 << 30, KVCacheMemory: 1 << 20}
		e, err := New(cfg, weights, pr.Factory(), o)
		if err != nil {
			return err
		}
		defer e.Close()
		chans := make([]<-chan Event, len(prompts))
		for i, p := range prompts {
			if chans[i], err = e.Submit(ctx, Request{ID: strconv.Itoa(i), PromptIDs: p, MaxTokens: maxOut, IgnoreEOS: true}); err != nil {
				return err
			}
		}
		for i, ch := range chans {
			toks, _, last := collect(ch)
			if last.Err != nil {
				return last.Err
			}
			got[i] = toks
		}
		ch, err := e.Submit(ctx, Request{ID: "n2", PromptIDs: prompts[0], MaxTokens: maxOut, IgnoreEOS: true, N: 2})
		if err != nil {
			return err
		}
		for ev := range ch {
			if ev.Err != nil {
				return ev.Err
			}
			if ev.Finish == "" || ev.OutputTokens > len(forked[ev.Index]) {
				forked[ev.Index] = append(forked[ev.Index], int32(ev.Token))
			}
		}
		return nil
	})
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
	for i, p := range prompts {
		want, _ := runAloneKV(t, m, p, maxOut, B, kvcache.KVF32)
		if d := cmp.Diff(want, got[i]); d != "" {
			t.Errorf("prompt %d: (-one rank +broadcast ranks):\n%s", i, d)
		}
	}
	for k, toks := range forked {
		if d := cmp.Diff(got[0], toks); d != "" {
			t.Errorf("n = 2, sequence %d: greedy tokens differ from n = 1 (-n 1 +forked):\n%s", k, d)
		}
	}
}
