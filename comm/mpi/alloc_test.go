//go:build mpi

package mpi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/internal/collectivetest"
)

// TestNoAllocationsAfterWarmup pins that a used group allocates nothing per
// collective on the Go heap, for every op, on the world and on a
// sub-group, at a small size and at one that takes the chunked AllReduce.
// Every process measures its own allocations while the others run the same
// number of collectives (AllocsPerRun makes one extra warm-up call).
func TestNoAllocationsAfterWarmup(t *testing.T) {
	w := needWorld(t)
	p := w.Size()
	all := make([]int, p)
	for i := range all {
		all[i] = p - 1 - i
	}
	rev := split(t, w, "alloc-rev", all)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, g := range []comm.Group{w, rev} {
		for _, n := range []int{8 * p, 8192 * p} {
			b := collectivetest.NewBufs(p, n)
			for _, op := range collectivetest.Ops {
				t.Run(fmt.Sprintf("%s/n=%d/%s", g.Name(), n, op.Name), func(t *testing.T) {
					var err error
					allocs := testing.AllocsPerRun(20, func() {
						if e := op.Do(ctx, g, b); e != nil && err == nil {
							err = e
						}
					})
					if err != nil {
						t.Fatal(err)
					}
					if allocs != 0 {
						t.Errorf("%v allocations per collective, want 0", allocs)
					}
				})
			}
		}
	}
}

// TestTraceAndStats pins the trace and the bytes-sent counters on a fresh
// sub-group against the definitions in comm.BytesSent.
func TestTraceAndStats(t *testing.T) {
	w := needWorld(t)
	p, r := w.Size(), w.Rank()
	all := make([]int, p)
	for i := range all {
		all[i] = i
	}
	g := split(t, w, "stats", all)
	n := 2 * p
	b := collectivetest.NewBufs(p, n)
	for _, op := range collectivetest.Ops {
		if err := op.Do(context.Background(), g, b); err != nil {
			t.Fatal(err)
		}
	}
	var wantTrace []comm.TraceEntry
	var sent uint64
	for i, op := range collectivetest.Ops {
		c := comm.Collective{Op: op.Op, DType: comm.F32, Count: n, SendCounts: b.Send}
		if op.Op == comm.OpBarrier {
			c = comm.Collective{Op: op.Op}
		}
		sent += uint64(comm.BytesSent(&c, r, p))
		wantTrace = append(wantTrace, comm.TraceEntry{Seq: uint64(i), Op: c.Op, DType: c.DType, Count: c.Count})
	}
	if d := cmp.Diff(wantTrace, g.Trace(nil)); d != "" {
		t.Errorf("trace (-want +got):\n%s", d)
	}
	s := g.Stats()
	want := comm.Stats{Collectives: 7, PerOp: [comm.NumOps]uint64{1, 1, 1, 1, 1, 1, 1}, BytesSent: sent, Busy: s.Busy, Traced: 7}
	if d := cmp.Diff(want, s); d != "" {
		t.Errorf("stats (-want +got):\n%s", d)
	}
	if s.Busy <= 0 {
		t.Errorf("busy time %v, want > 0", s.Busy)
	}
}
