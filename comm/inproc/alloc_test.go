package inproc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/comm/internal/collectivetest"
)

// allocOps are the collectives and a Stats call between barriers.
var allocOps = append(collectivetest.Ops[:len(collectivetest.Ops):len(collectivetest.Ops)],
	collectivetest.Op{Name: "Stats", Do: func(ctx context.Context, g comm.Group, _ *collectivetest.Bufs) error {
		if s := g.Stats(); s.Collectives > 1<<62 {
			return fmt.Errorf("impossible count %d", s.Collectives)
		}
		return comm.Barrier(ctx, g)
	}})

// TestNoAllocationsAfterWarmup pins that a used group allocates nothing per
// collective, on every rank: AllocsPerRun counts the whole process's
// allocations while the peers run the same collectives.
func TestNoAllocationsAfterWarmup(t *testing.T) {
	const runs = 50
	for _, size := range []int{2, 4} {
		for _, sub := range []bool{false, true} {
			for _, op := range allocOps {
				t.Run(fmt.Sprintf("ranks=%d/subgroup=%v/%s", size, sub, op.Name), func(t *testing.T) {
					world := newWorld(t, size, inproc.Options{TraceCapacity: 0})
					groups := world
					if sub { // a sub-group made of every rank in reverse order
						groups = make([]comm.Group, size)
						members := make([]int, size)
						for i := range members {
							members[i] = size - 1 - i
						}
						mustAll(t, inproc.Run(context.Background(), world, func(ctx context.Context, g comm.Group) error {
							s, err := comm.Split(g, "rev", members)
							groups[g.Rank()] = s
							return err
						}))
					}
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					bufs := make([]*collectivetest.Bufs, size)
					for r := range bufs {
						bufs[r] = collectivetest.NewBufs(size, 8*size)
					}
					var wg sync.WaitGroup
					errs := make([]error, size)
					for r := 1; r < size; r++ {
						wg.Go(func() {
							for range runs + 1 { // AllocsPerRun makes one extra warm-up call
								if errs[r] = op.Do(ctx, groups[r], bufs[r]); errs[r] != nil {
									return
								}
							}
						})
					}
					allocs := testing.AllocsPerRun(runs, func() {
						if err := op.Do(ctx, groups[0], bufs[0]); err != nil && errs[0] == nil {
							errs[0] = err
						}
					})
					wg.Wait()
					mustAll(t, errs)
					if allocs != 0 {
						t.Errorf("%v allocations per collective, want 0", allocs)
					}
				})
			}
		}
	}
}

// TestTraceAndStats pins that every rank issues the same collectives in the
// same order (the trace) and that the counters follow the documented
// bytes-sent definitions.
func TestTraceAndStats(t *testing.T) {
	const size, n = 4, 8
	world := newWorld(t, size, inproc.Options{TraceCapacity: 5})
	mustAll(t, inproc.Run(context.Background(), world, func(ctx context.Context, g comm.Group) error {
		b := collectivetest.NewBufs(size, n)
		for _, op := range collectivetest.Ops {
			if err := op.Do(ctx, g, b); err != nil {
				return err
			}
		}
		return nil
	}))
	wantTrace := []comm.TraceEntry{
		{Seq: 0, Op: comm.OpAllGather, DType: comm.F32, Count: n},
		{Seq: 1, Op: comm.OpReduceScatter, DType: comm.F32, Count: n},
		{Seq: 2, Op: comm.OpAllReduce, DType: comm.F32, Count: n},
		{Seq: 3, Op: comm.OpAllToAll, DType: comm.F32, Count: n},
		{Seq: 4, Op: comm.OpAllToAllV, DType: comm.F32, Count: n},
	}
	// Bytes sent per rank, from the definitions with n=8 f32 (32 bytes), P=4:
	// AllGather 32·3, ReduceScatter 32·3/4, AllReduce 2·32·3/4, AllToAll
	// 32·3/4, AllToAllV 3 peers × 2 elements × 4 bytes, Broadcast 32·3 on the
	// root only, Barrier 0.
	common := uint64(96 + 24 + 48 + 24 + 24)
	for r, g := range world {
		if d := cmp.Diff(wantTrace, g.Trace(nil)); d != "" {
			t.Errorf("rank %d trace (-want +got):\n%s", r, d)
		}
		s := g.Stats()
		want := comm.Stats{Collectives: 7, PerOp: [comm.NumOps]uint64{1, 1, 1, 1, 1, 1, 1}, BytesSent: common,
			Busy: s.Busy, Traced: 5, TraceDrop: 2}
		if r == 0 {
			want.BytesSent += 96
		}
		if d := cmp.Diff(want, s); d != "" {
			t.Errorf("rank %d stats (-want +got):\n%s", r, d)
		}
		if s.Busy <= 0 {
			t.Errorf("rank %d: busy time %v, want > 0", r, s.Busy)
		}
	}
}
