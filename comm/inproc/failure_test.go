package inproc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
)

// sameError checks that every rank got exactly one shared error value of
// type E, and returns it.
func sameError[E error](t *testing.T, errs []error) E {
	t.Helper()
	var first E
	for r, err := range errs {
		var e E
		if !errors.As(err, &e) {
			t.Fatalf("rank %d: got %v (%T), want a %T", r, err, err, e)
		}
		if r == 0 {
			first = e
		} else if error(e) != error(first) {
			t.Fatalf("rank %d got a different error value than rank 0:\n%v\n%v", r, e, first)
		}
	}
	return first
}

// TestLedgerMismatch makes members enter disagreeing collectives and checks
// that all of them fail with one mismatch error (not a timeout: the world
// timeout is the 30 s default) that names every rank's record.
func TestLedgerMismatch(t *testing.T) {
	cases := []struct {
		name string
		size int
		call func(ctx context.Context, g comm.Group) error
		want string
	}{{
		name: "count",
		size: 2,
		call: func(ctx context.Context, g comm.Group) error {
			n := 4608 + g.Rank()
			return comm.AllGather(ctx, g, make([]float32, 2*n), make([]float32, n))
		},
		want: "collective mismatch in group world[0 1] seq 0: rank 0 AllGather f32 count 4608, rank 1 AllGather f32 count 4609",
	}, {
		name: "op",
		size: 3,
		call: func(ctx context.Context, g comm.Group) error {
			if g.Rank() == 1 {
				return comm.AllReduce(ctx, g, make([]float32, 6), make([]float32, 6))
			}
			return comm.AllToAll(ctx, g, make([]float32, 6), make([]float32, 6))
		},
		want: "collective mismatch in group world[0 1 2] seq 0: rank 0 AllToAll f32 count 6, rank 1 AllReduce f32 count 6, rank 2 AllToAll f32 count 6",
	}, {
		name: "dtype",
		size: 2,
		call: func(ctx context.Context, g comm.Group) error {
			if g.Rank() == 0 {
				return comm.AllReduce(ctx, g, make([]int32, 3), make([]int32, 3))
			}
			return comm.AllReduce(ctx, g, make([]float32, 3), make([]float32, 3))
		},
		want: "collective mismatch in group world[0 1] seq 0: rank 0 AllReduce i32 count 3, rank 1 AllReduce f32 count 3",
	}, {
		name: "root",
		size: 2,
		call: func(ctx context.Context, g comm.Group) error {
			return comm.Broadcast(ctx, g, make([]uint8, 8), g.Rank())
		},
		want: "collective mismatch in group world[0 1] seq 0: rank 0 Broadcast u8 count 8 root 0, rank 1 Broadcast u8 count 8 root 1",
	}, {
		name: "barrier-vs-allgather",
		size: 2,
		call: func(ctx context.Context, g comm.Group) error {
			if g.Rank() == 0 {
				return comm.Barrier(ctx, g)
			}
			return comm.AllGather(ctx, g, make([]float32, 2), make([]float32, 1))
		},
		want: "collective mismatch in group world[0 1] seq 0: rank 0 Barrier, rank 1 AllGather f32 count 1",
	}, {
		name: "split-counts",
		size: 2,
		call: func(ctx context.Context, g comm.Group) error {
			send := [][]int{{1, 2}, {3, 4}}[g.Rank()]
			recv := [][]int{{1, 3}, {2, 5}}[g.Rank()] // rank 1 expects 5 from itself, sends 4
			return comm.AllToAllV(ctx, g, make([]float32, recv[0]+recv[1]), make([]float32, send[0]+send[1]), send, recv)
		},
		want: "collective mismatch in group world[0 1] seq 0: AllToAllV split counts disagree: rank 1 sends 4 to rank 1 but rank 1 expects 5 from rank 1; " +
			"rank 0 AllToAllV f32 send [1 2] recv [1 3], rank 1 AllToAllV f32 send [3 4] recv [2 5]",
	}, {
		name: "later-seq",
		size: 2,
		call: func(ctx context.Context, g comm.Group) error {
			buf := make([]float32, 4)
			for range 3 {
				if err := comm.AllReduce(ctx, g, buf, make([]float32, 4)); err != nil {
					return err
				}
			}
			n := 2 + g.Rank()
			return comm.AllGather(ctx, g, make([]float32, 2*n), make([]float32, n))
		},
		want: "collective mismatch in group world[0 1] seq 3: rank 0 AllGather f32 count 2, rank 1 AllGather f32 count 3",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := sameError[*comm.MismatchError](t, run(t, tc.size, inproc.Options{}, tc.call))
			if d := cmp.Diff(tc.want, e.Error()); d != "" {
				t.Errorf("message (-want +got):\n%s", d)
			}
		})
	}
}

// TestRefusedArgumentsFailEveryMember: a member whose own buffers are wrong
// is refused, and its peers fail with the same error instead of waiting.
func TestRefusedArgumentsFailEveryMember(t *testing.T) {
	errs := run(t, 3, inproc.Options{}, func(ctx context.Context, g comm.Group) error {
		dst := make([]float32, 6)
		if g.Rank() == 2 {
			dst = dst[:5]
		}
		return comm.AllGather(ctx, g, dst, make([]float32, 2))
	})
	for r, err := range errs {
		if err == nil || err != errs[0] {
			t.Fatalf("rank %d: %v, want the shared error %v", r, err, errs[0])
		}
	}
	want := "collective refused in group world[0 1 2] seq 0 on rank 2: AllGather f32 count 2 in a group of 3: receive buffer has 5 elements, want 6"
	if d := cmp.Diff(want, errs[0].Error()); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestTimeoutNamesMissingRank leaves rank 2 out of a collective and checks
// that the others fail with a timeout naming it, and that rank 2's late
// call fails at once with the same error.
func TestTimeoutNamesMissingRank(t *testing.T) {
	world := newWorld(t, 3, inproc.Options{Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	errs := inproc.Run(ctx, world, func(ctx context.Context, g comm.Group) error {
		if err := comm.Barrier(ctx, g); err != nil {
			return err
		}
		if g.Rank() == 2 {
			return nil
		}
		return comm.AllGather(ctx, g, make([]float32, 12), make([]float32, 4))
	})
	e := sameError[*comm.AbortError](t, errs[:2])
	if !errors.Is(e, comm.ErrTimeout) {
		t.Errorf("cause %v, want ErrTimeout", e.Cause)
	}
	if d := cmp.Diff([]int{2}, e.Missing); d != "" {
		t.Errorf("missing ranks (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int64{0}, e.LastSeq); d != "" {
		t.Errorf("last seq of missing ranks (-want +got):\n%s", d)
	}
	want := "collective timeout after 200ms in group world[0 1 2] seq 1 (AllGather f32 count 4) on rank " +
		map[int]string{0: "0", 1: "1"}[e.Record.Rank] + ": ranks [2] did not arrive (rank 2 last entered seq 0)"
	if d := cmp.Diff(want, e.Error()); d != "" {
		t.Errorf("message (-want +got):\n%s", d)
	}
	late := comm.AllGather(ctx, world[2], make([]float32, 12), make([]float32, 4))
	if late != error(e) {
		t.Errorf("late rank got %v, want the original error", late)
	}
}

// TestContextCancellation: a member's cancelled or expired context aborts
// the collective for every member long before the 30 s world deadline.
func TestContextCancellation(t *testing.T) {
	cases := []struct {
		name  string
		ctx   func() (context.Context, context.CancelFunc)
		cause error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(20 * time.Millisecond); cancel() }()
			return ctx, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, context.DeadlineExceeded},
		{"already-cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			world := newWorld(t, 2, inproc.Options{})
			ctx, cancel := tc.ctx()
			defer cancel()
			err := comm.AllReduce(ctx, world[0], make([]float32, 3), make([]float32, 3))
			var e *comm.AbortError
			if !errors.As(err, &e) || !errors.Is(err, tc.cause) {
				t.Fatalf("got %v, want an AbortError caused by %v", err, tc.cause)
			}
			if d := cmp.Diff([]int{1}, e.Missing); d != "" {
				t.Errorf("missing (-want +got):\n%s", d)
			}
			late := comm.AllReduce(context.Background(), world[1], make([]float32, 3), make([]float32, 3))
			if late != err {
				t.Errorf("late rank got %v, want the original error", late)
			}
		})
	}
}

// TestPoisonedWorldFailsFast: after a mismatch in a sub-group, every later
// collective on any group of the world fails at once with that error.
func TestPoisonedWorldFailsFast(t *testing.T) {
	world := newWorld(t, 4, inproc.Options{})
	subs := make([]comm.Group, 4)
	mustAll(t, inproc.Run(context.Background(), world, func(ctx context.Context, g comm.Group) error {
		r := g.Rank()
		sub, err := comm.Split(g, "pair", []int{r / 2 * 2, r/2*2 + 1})
		subs[r] = sub
		return err
	}))
	// Ranks 0 and 1 disagree in their pair; ranks 2 and 3 are fine.
	errs := inproc.Run(context.Background(), world[:2], func(ctx context.Context, g comm.Group) error {
		sub := subs[g.Rank()]
		n := 1 + sub.Rank()
		return comm.AllGather(ctx, sub, make([]int32, 2*n), make([]int32, n))
	})
	orig := sameError[*comm.MismatchError](t, errs)
	for r, g := range world {
		for _, grp := range []comm.Group{g, subs[r]} {
			err := comm.AllReduce(context.Background(), grp, make([]float32, 2), make([]float32, 2))
			if err != error(orig) {
				t.Errorf("rank %d group %s: got %v, want the original error", r, grp.Name(), err)
			}
		}
	}
}

// TestWithMismatch injects a wrong count into rank 1's third collective and
// checks that the ledger reports it on every member.
func TestWithMismatch(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, g comm.Group) error
		want string
	}{{
		name: "allgather",
		call: func(ctx context.Context, g comm.Group) error {
			return comm.AllGather(ctx, g, make([]float32, 3*64), make([]float32, 64))
		},
		want: "collective mismatch in group world[0 1 2] seq 2: rank 0 AllGather f32 count 64, rank 1 AllGather f32 count 65, rank 2 AllGather f32 count 64",
	}, {
		name: "alltoallv",
		call: func(ctx context.Context, g comm.Group) error {
			c := []int{1, 1, 1}
			return comm.AllToAllV(ctx, g, make([]int32, 3), make([]int32, 3), c, c)
		},
		want: "collective mismatch in group world[0 1 2] seq 2: AllToAllV split counts disagree: rank 2 sends 1 to rank 1 but rank 1 expects 2 from rank 2; " +
			"rank 0 AllToAllV i32 send [1 1 1] recv [1 1 1], rank 1 AllToAllV i32 send [1 1 1] recv [1 1 2], rank 2 AllToAllV i32 send [1 1 1] recv [1 1 1]",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := run(t, 3, inproc.Options{}, func(ctx context.Context, g comm.Group) error {
				if g.Rank() == 1 {
					g = comm.WithMismatch(g, 2, 1)
				}
				for range 3 {
					if err := tc.call(ctx, g); err != nil {
						return err
					}
				}
				return nil
			})
			e := sameError[*comm.MismatchError](t, errs)
			if d := cmp.Diff(tc.want, e.Error()); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestCancelAtRandomPoints cancels one rank's context at varying moments
// of a stream of collectives: every rank must return (no member may be
// left waiting for one that withdrew), the collectives completed before the
// failure must be correct, and every rank that failed reports the world's
// one error.
func TestCancelAtRandomPoints(t *testing.T) {
	const size, n, iters = 3, 5000, 40
	cancelled := 0
	defer func() { t.Logf("%d of 12 trials cancelled mid-stream", cancelled) }()
	for trial := range 12 {
		world := newWorld(t, size, inproc.Options{Timeout: 5 * time.Second})
		ctx0, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Duration(trial*trial*40) * time.Microsecond)
			cancel()
		}()
		errs := inproc.Run(context.Background(), world, func(ctx context.Context, g comm.Group) error {
			if g.Rank() == 0 {
				ctx = ctx0
			}
			src := make([]float32, n)
			dst := make([]float32, n)
			for it := range iters {
				for i := range src {
					src[i] = float32(g.Rank() + it)
				}
				if err := comm.AllReduce(ctx, g, dst, src); err != nil {
					return err
				}
				if want := float32(0 + 1 + 2 + 3*it); dst[0] != want || dst[n-1] != want {
					return fmt.Errorf("iteration %d: got %v..%v, want %v", it, dst[0], dst[n-1], want)
				}
			}
			return nil
		})
		cancel()
		var shared error
		for r, err := range errs {
			if err != nil && r == 0 {
				cancelled++
			}
			if err == nil {
				continue
			}
			var ae *comm.AbortError
			if !errors.As(err, &ae) || !errors.Is(err, context.Canceled) {
				t.Fatalf("trial %d rank %d: %v", trial, r, err)
			}
			if shared == nil {
				shared = err
			} else if err != shared {
				t.Fatalf("trial %d: ranks report different errors:\n%v\n%v", trial, shared, err)
			}
		}
	}
}
