package cp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/plan"
)

// combineBytesPerRank is the formula of the bytes one rank sends per layer
// for a combine of rows rows with nh gathered heads of width d over n ranks,
// from the collectives' bytes-sent definitions (comm.BytesSent):
//
//	ag_rs: LSE all-gather 4·rows·nh·(n−1) + reduce-scatter 4·rows·nh·d·(n−1)/n
//	a2a:   one packed all-to-all 4·rows·nh·(d+1)·(n−1)/n
func combineBytesPerRank(backend string, n, rows, nh, d int) uint64 {
	if backend == plan.CommA2A {
		return uint64(4 * rows * nh * (d + 1) * (n - 1) / n)
	}
	return uint64(4*rows*nh*(n-1) + 4*rows*nh*d*(n-1)/n)
}

// glm5Combine is the GLM-5 decode shape: 64 gathered heads per rank over a
// DCP group of 4 (16 heads kept per rank), latent width 512.
const glm5Ranks, glm5GatheredHeads = 4, 64

func TestCombineBytesMatchFormulas(t *testing.T) {
	for _, backend := range []string{plan.CommAGRS, plan.CommA2A} {
		for _, rows := range []int{1, 64} {
			t.Run(fmt.Sprintf("%s/T=%d", backend, rows), func(t *testing.T) {
				n, nh, d := glm5Ranks, glm5GatheredHeads, mla.LatentDim
				world := newWorld(t, n)
				rng := rand.New(rand.NewPCG(9, uint64(rows)))
				out, lse := randVec(rng, rows*nh*d), randVec(rng, rows*nh)
				got := make([]uint64, n)
				runRanks(t, world, func(ctx context.Context, g comm.Group) error {
					c, err := cp.NewCombiner(backend, n, rows, nh/n, d)
					if err != nil {
						return err
					}
					dst, dstLSE := make([]float32, rows*nh/n*d), make([]float32, rows*nh/n)
					if err := c.Combine(ctx, g, dst, dstLSE, out, lse, rows); err != nil {
						return err
					}
					got[g.Rank()] = g.Stats().BytesSent
					return nil
				})
				want := make([]uint64, n)
				for r := range want {
					want[r] = combineBytesPerRank(backend, n, rows, nh, d)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("bytes sent per rank (-formula +comm stats):\n%s", diff)
				}
			})
		}
	}
}

// BenchmarkCombine measures one layer's DCP combine at GLM-5 decode shapes
// on rank 0 while the other ranks run the same combine, and reports the bytes
// each rank sends (from comm Stats) and the rate.
func BenchmarkCombine(b *testing.B) {
	for _, backend := range []string{plan.CommAGRS, plan.CommA2A} {
		for _, rows := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/T=%d", backend, rows), func(b *testing.B) {
				n, nh, d := glm5Ranks, glm5GatheredHeads, mla.LatentDim
				world := newWorld(b, n)
				rng := rand.New(rand.NewPCG(9, uint64(rows)))
				out, lse := randVec(rng, rows*nh*d), randVec(rng, rows*nh)
				type rankState struct {
					c           *cp.Combiner
					dst, dstLSE []float32
				}
				st := make([]rankState, n)
				for r := range n {
					c, err := cp.NewCombiner(backend, n, rows, nh/n, d)
					if err != nil {
						b.Fatal(err)
					}
					st[r] = rankState{c, make([]float32, rows*nh/n*d), make([]float32, rows*nh/n)}
				}
				ctx := context.Background()
				step := func(r int) error {
					return st[r].c.Combine(ctx, world[r], st[r].dst, st[r].dstLSE, out, lse, rows)
				}
				goes := make([]chan struct{}, n)
				errs := make(chan error, n)
				for r := 1; r < n; r++ {
					goes[r] = make(chan struct{})
					go func() {
						var err error
						for range goes[r] {
							if err == nil {
								err = step(r)
							}
						}
						errs <- err
					}()
				}
				before := world[0].Stats().BytesSent
				calls := 0
				for b.Loop() {
					for r := 1; r < n; r++ {
						goes[r] <- struct{}{}
					}
					if err := step(0); err != nil {
						b.Fatal(err)
					}
					calls++
				}
				for r := 1; r < n; r++ {
					close(goes[r])
				}
				for r := 1; r < n; r++ {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				sent := float64(world[0].Stats().BytesSent-before) / float64(calls)
				b.ReportMetric(sent, "sent-B/rank/layer")
				b.ReportMetric(sent*float64(calls)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
