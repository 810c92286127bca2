//go:build mpi

package mpi_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/comm/internal/collectivetest"
)

// opGroups caches the groups of testGroups: a group is split once.
var opGroups []comm.Group

// testGroups lists the groups to test on: the world, and the first k ranks
// of it for smaller k (in reverse order, so group ranks differ from world
// ranks).
func testGroups(t *testing.T, w comm.Group) []comm.Group {
	if opGroups != nil {
		return opGroups
	}
	groups := []comm.Group{w}
	for k := w.Size() - 1; k >= 1; k-- {
		members := make([]int, k)
		for i := range members {
			members[i] = k - 1 - i
		}
		if w.Rank() < k {
			groups = append(groups, split(t, w, fmt.Sprintf("first%d", k), members))
		}
	}
	opGroups = groups
	return groups
}

func TestOpsFloat32(t *testing.T) { testOps[float32](t) }
func TestOpsFloat64(t *testing.T) { testOps[float64](t) }
func TestOpsInt32(t *testing.T)   { testOps[int32](t) }
func TestOpsUint8(t *testing.T)   { testOps[uint8](t) }

// testOps runs every equal-split op at several sizes on the world and on
// smaller sub-groups, and compares this member's results with the
// reference. Sizes cover empty contributions, sizes that are not a
// multiple of the group size (AllGather, AllReduce, Broadcast only), and
// AllReduce on both sides of the staged/chunked switch.
func testOps[T comm.Elem](t *testing.T) {
	w := needWorld(t)
	ctx := context.Background()
	for _, g := range testGroups(t, w) {
		p, r := g.Size(), g.Rank()
		for _, n := range []int{0, 1, 5, 3 * p, 36 * p, 4099, 5000 * p} {
			t.Run(fmt.Sprintf("%s/n=%d", g.Name(), n), func(t *testing.T) {
				in := collectivetest.Inputs[T](p, n)
				want := map[string][]T{"ag": collectivetest.AllGather(in), "ar": collectivetest.Sum(in, 0, n), "bc": in[p-1]}
				got := map[string][]T{"ag": make([]T, n*p), "ar": make([]T, n), "bc": append([]T(nil), in[r]...)}
				if err := comm.AllGather(ctx, g, got["ag"], in[r]); err != nil {
					t.Fatal(err)
				}
				if err := comm.AllReduce(ctx, g, got["ar"], in[r]); err != nil {
					t.Fatal(err)
				}
				if err := comm.Broadcast(ctx, g, got["bc"], p-1); err != nil {
					t.Fatal(err)
				}
				if n%p == 0 {
					q := n / p
					want["rs"], want["a2a"] = collectivetest.Sum(in, r*q, (r+1)*q), collectivetest.AllToAll(in, r)
					got["rs"], got["a2a"] = make([]T, q), make([]T, n)
					if err := comm.ReduceScatter(ctx, g, got["rs"], in[r]); err != nil {
						t.Fatal(err)
					}
					if err := comm.AllToAll(ctx, g, got["a2a"], in[r]); err != nil {
						t.Fatal(err)
					}
				}
				for k := range want {
					if !bytes.Equal(comm.Bytes(want[k]), comm.Bytes(got[k])) { // bits; cmp.Diff only to report
						t.Errorf("rank %d %s (-want +got):\n%s", r, k, cmp.Diff(want[k], got[k], collectivetest.BitsEqual))
					}
				}
			})
		}
	}
}

// TestAllToAllV exchanges variable parts (including empty ones and a
// member that receives nothing) and checks this member's receive buffer.
// counts(i, j) is what member i sends to member j.
func TestAllToAllV(t *testing.T) {
	w := needWorld(t)
	p, r := w.Size(), w.Rank()
	cases := []struct {
		name   string
		counts func(i, j int) int
	}{
		{"uneven", func(i, j int) int { return (i*3 + j*5) % 4 }},
		{"all-empty", func(i, j int) int { return 0 }},
		{"to-last-only", func(i, j int) int { return map[bool]int{true: 100 + i}[j == p-1] }},
		{"large", func(i, j int) int { return 5000 + 17*i + 3*j }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			send, recv := make([]int, p), make([]int, p)
			var src, want []int32
			for j := range p {
				send[j], recv[j] = tc.counts(r, j), tc.counts(j, r)
				for k := range send[j] {
					src = append(src, int32(r*1_000_000+j*10_000+k))
				}
				for k := range recv[j] {
					want = append(want, int32(j*1_000_000+r*10_000+k))
				}
			}
			got := make([]int32, len(want))
			if err := comm.AllToAllV(context.Background(), w, got, src, send, recv); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("rank %d (-want +got):\n%s", r, d)
			}
		})
	}
}

// TestReductionsMatchInproc runs the same reductions over MPI and over an
// in-process world of the same size inside this process, and requires the
// same bits: both transports sum in group-rank order. The inputs span
// magnitudes so that the summation order changes the result.
func TestReductionsMatchInproc(t *testing.T) {
	w := needWorld(t)
	p, r := w.Size(), w.Rank()
	for _, n := range []int{64 * p, 16384 * p} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			in := make([][]float32, p)
			for j := range in {
				in[j] = make([]float32, n)
				for i := range in[j] {
					in[j][i] = float32(math.Pow(10, float64((j*3+i)%9-4))) * float32(1+i%5) * float32(1-2*(j%2))
				}
			}
			ctx := context.Background()
			arMPI, rsMPI := make([]float32, n), make([]float32, n/p)
			if err := comm.AllReduce(ctx, w, arMPI, in[r]); err != nil {
				t.Fatal(err)
			}
			if err := comm.ReduceScatter(ctx, w, rsMPI, in[r]); err != nil {
				t.Fatal(err)
			}
			local, err := inproc.NewWorld(p, inproc.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ar, rs := make([][]float32, p), make([][]float32, p)
			for j, err := range inproc.Run(ctx, local, func(ctx context.Context, g comm.Group) error {
				k := g.Rank()
				ar[k], rs[k] = make([]float32, n), make([]float32, n/p)
				if err := comm.AllReduce(ctx, g, ar[k], in[k]); err != nil {
					return err
				}
				return comm.ReduceScatter(ctx, g, rs[k], in[k])
			}) {
				if err != nil {
					t.Fatalf("inproc rank %d: %v", j, err)
				}
			}
			if p > 1 && cmp.Equal(collectivetest.Sum(in, 0, n), refSumReverse(in), collectivetest.BitsEqual) {
				t.Fatal("inputs do not distinguish summation orders; the test would prove nothing")
			}
			if d := cmp.Diff(ar[r], arMPI, collectivetest.BitsEqual); d != "" {
				t.Errorf("AllReduce bits (-inproc +mpi):\n%s", d)
			}
			if d := cmp.Diff(rs[r], rsMPI, collectivetest.BitsEqual); d != "" {
				t.Errorf("ReduceScatter bits (-inproc +mpi):\n%s", d)
			}
		})
	}
}

func refSumReverse(in [][]float32) []float32 {
	out := make([]float32, len(in[0]))
	for i := range out {
		for j := len(in) - 1; j >= 0; j-- {
			out[i] += in[j][i]
		}
	}
	return out
}
