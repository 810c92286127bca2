package inproc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/comm/internal/collectivetest"
)

// benchShape is one collective at a decode-step size. perRank is the
// number of f32 elements each member contributes (Collective.Count).
type benchShape struct {
	name    string
	op      comm.Op
	perRank func(p, tokens int) int
}

// Decode-step shapes of a 64-head MLA layer: the Q all-gather gives every
// member all 64 heads × 576 (latent 512 + rope 64) per token; the packed
// a2a combine sends 64 heads × (512 + 4) per token split across members
// (4 × 16 heads at P = 4); the ag_rs output reduce-scatter and the TP
// all-reduce carry 64 heads × 512 per token.
var benchShapes = []benchShape{
	{"AllGather-q64x576", comm.OpAllGather, func(p, t int) int { return t * 64 / p * 576 }},
	{"AllToAll-64x516", comm.OpAllToAll, func(p, t int) int { return t * 64 * 516 }},
	{"ReduceScatter-64x512", comm.OpReduceScatter, func(p, t int) int { return t * 64 * 512 }},
	{"AllReduce-64x512", comm.OpAllReduce, func(p, t int) int { return t * 64 * 512 }},
	{"Broadcast-64x512", comm.OpBroadcast, func(p, t int) int { return t * 64 * 512 }},
	{"Barrier", comm.OpBarrier, func(p, t int) int { return 0 }},
}

func benchCall(op comm.Op, ctx context.Context, g comm.Group, b *collectivetest.Bufs) error {
	switch op {
	case comm.OpAllGather:
		return comm.AllGather(ctx, g, b.Dst, b.Src)
	case comm.OpAllToAll:
		return comm.AllToAll(ctx, g, b.Buf, b.Src)
	case comm.OpReduceScatter:
		return comm.ReduceScatter(ctx, g, b.Part, b.Src)
	case comm.OpAllReduce:
		return comm.AllReduce(ctx, g, b.Buf, b.Src)
	case comm.OpBroadcast:
		return comm.Broadcast(ctx, g, b.Buf, 0)
	}
	return comm.Barrier(ctx, g)
}

// BenchmarkCollective reports latency (ns/op) and GB/s of bytes sent per
// member (comm.BytesSent of rank 0, the root for Broadcast) for each shape
// at 1 and 64 tokens on 2 and 4 ranks. The peers run the same collective
// in their own goroutines; cancelling their context ends them.
func BenchmarkCollective(b *testing.B) {
	for _, sh := range benchShapes {
		for _, p := range []int{2, 4} {
			for _, tokens := range []int{1, 64} {
				if sh.op == comm.OpBarrier && tokens > 1 {
					continue
				}
				b.Run(fmt.Sprintf("%s/ranks=%d/tokens=%d", sh.name, p, tokens), func(b *testing.B) {
					benchCollective(b, sh, p, tokens)
				})
			}
		}
	}
}

func benchCollective(b *testing.B, sh benchShape, p, tokens int) {
	world, err := inproc.NewWorld(p, inproc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	n := sh.perRank(p, tokens)
	bufs := make([]*collectivetest.Bufs, p)
	for r := range bufs {
		bufs[r] = collectivetest.NewBufs(p, n)
		for i := range bufs[r].Src {
			bufs[r].Src[i] = float32(r + i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for r := 1; r < p; r++ {
		wg.Go(func() {
			for benchCall(sh.op, ctx, world[r], bufs[r]) == nil {
			}
		})
	}
	if err := benchCall(sh.op, ctx, world[0], bufs[0]); err != nil {
		b.Fatal(err)
	}
	before := world[0].Stats()
	for b.Loop() {
		if err := benchCall(sh.op, ctx, world[0], bufs[0]); err != nil {
			b.Fatal(err)
		}
	}
	after := world[0].Stats()
	cancel()
	wg.Wait()
	if sent := after.BytesSent - before.BytesSent; sent > 0 {
		b.ReportMetric(float64(sent)/float64((after.Busy-before.Busy).Nanoseconds()), "GB/s")
	}
}
