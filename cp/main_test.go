package cp_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newWorld builds an in-process world of n ranks that traces collectives.
func newWorld(t testing.TB, n int) []comm.Group {
	t.Helper()
	w, err := inproc.NewWorld(n, inproc.Options{TraceCapacity: 64})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// runRanks runs fn on every rank of world and fails the test on any error.
func runRanks(t testing.TB, world []comm.Group, fn func(ctx context.Context, g comm.Group) error) {
	t.Helper()
	for r, err := range inproc.Run(context.Background(), world, fn) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// allocsOnRank0 measures the allocations per call of step on rank 0 while
// every other rank runs the same step concurrently (the collectives need
// every member). step is called runs+1 times on every rank.
func allocsOnRank0(t *testing.T, world []comm.Group, runs int, step func(ctx context.Context, g comm.Group) error) float64 {
	t.Helper()
	ctx := context.Background()
	errs := make([]error, len(world))
	var wg sync.WaitGroup
	for r := 1; r < len(world); r++ {
		wg.Go(func() {
			for range runs + 1 {
				if errs[r] = step(ctx, world[r]); errs[r] != nil {
					return
				}
			}
		})
	}
	allocs := testing.AllocsPerRun(runs, func() {
		if err := step(ctx, world[0]); err != nil && errs[0] == nil {
			errs[0] = err
		}
	})
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return allocs
}

// traces returns the collective trace of every member.
func traces(world []comm.Group) [][]comm.TraceEntry {
	out := make([][]comm.TraceEntry, len(world))
	for r, g := range world {
		out[r] = g.Trace(nil)
	}
	return out
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	return v
}
