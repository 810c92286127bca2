package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
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

// TestProcsSpeculativeDecoding runs speculative decoding on the
// multi-process protocol (TP 2 × PCP 2, KV over 2 DCP ranks, experts
// parallel): rank 0 broadcasts every draft step beside the target's, and the
// outputs, drafts scripted right in part, are plain decoding's on the same
// ranks.
func TestProcsSpeculativeDecoding(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-moe-mini on four ranks")
	}
	cfg, err := config.Load("glm5-moe-mini")
	if err != nil {
		t.Fatal(err)
	}
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
	reqs := []specRequest{
		{prompt: []int{5, 6, 7, 8, 9, 10, 11, 12, 13}, maxOut: 7},
		{prompt: []int{400, 401}, maxOut: 9, params: sampler.Params{Temperature: 0.7, Seed: 5}},
		{prompt: []int{7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}, maxOut: 6, n: 2},
	}
	var plain, got []specOutput
	var st Stats
	errs := inproc.Run(context.Background(), world, func(ctx context.Context, g comm.Group) error {
		pr, weights, err := NewProcs(ctx, cfg, src, g, Parallel{Layout: l, Interleave: 1, Backend: bp, ExpertParallel: true})
		if err != nil {
			return err
		}
		if g.Rank() != 0 {
			return pr.Follow()
		}
		defer pr.Shutdown()
		o := Options{MaxNumBatchedTokens: 32, MaxNumSeqs: 4, MaxModelLen: 32, BlockSize: B, KVDType: kvcache.KVF32,
			Layout: kvcache.Layout{N: l.DCP, I: 1}, MemoryLimit: 1 << 30, KVCacheMemory: 1 << 20}
		e, err := New(cfg, weights, pr.Factory(), o)
		if err != nil {
			return err
		}
		plain = serveAll(t, e, reqs)
		e.Close()
		o.Speculative = mtpConfig(3)
		if e, err = New(cfg, weights, pr.Factory(), o); err != nil {
			return err
		}
		e.spec.script = scriptFrom(reqs, plain, cfg.VocabSize)
		got = serveAll(t, e, reqs)
		e.Close()
		st = e.Stats()
		return nil
	})
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
	if d := cmp.Diff(plain, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("speculative decoding differs from plain decoding (-plain +spec):\n%s", d)
	}
	if s := st.Spec; s.AcceptedTokens == 0 || s.AcceptedTokens == s.DraftTokens {
		t.Errorf("%d of %d drafts accepted: want some kept and some rejected", s.AcceptedTokens, s.DraftTokens)
	}
}
