package inproc_test

import (
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

type opCase struct {
	size, n int // ranks, elements per member contribution
}

var opCases = []opCase{
	{1, 0}, {1, 5}, {2, 0}, {2, 6}, {3, 0}, {3, 9}, {3, 12}, {4, 4}, {4, 36}, {8, 0}, {8, 8}, {8, 40}, {5, 15},
	{3, 4098}, {4, 4097}, // long enough for the chunked AllReduce, uneven chunks
}

func TestOpsFloat32(t *testing.T) { testOps[float32](t) }
func TestOpsFloat64(t *testing.T) { testOps[float64](t) }
func TestOpsInt32(t *testing.T)   { testOps[int32](t) }
func TestOpsUint8(t *testing.T)   { testOps[uint8](t) }

// testOps runs every equal-split op on every case and compares each rank's
// result with the reference, bit for bit: sums are defined as a left fold
// in group-rank order, chunked AllReduce included.
func testOps[T comm.Elem](t *testing.T) {
	for _, tc := range opCases {
		t.Run(fmt.Sprintf("ranks=%d/n=%d", tc.size, tc.n), func(t *testing.T) {
			in := collectivetest.Inputs[T](tc.size, tc.n)
			type result struct{ ag, rs, ar, a2a, bc []T }
			got := make([]result, tc.size)
			mustAll(t, run(t, tc.size, inproc.Options{}, func(ctx context.Context, g comm.Group) error {
				r := g.Rank()
				res := &got[r]
				res.ag = make([]T, tc.n*tc.size)
				if err := comm.AllGather(ctx, g, res.ag, in[r]); err != nil {
					return err
				}
				res.ar = make([]T, tc.n)
				if err := comm.AllReduce(ctx, g, res.ar, in[r]); err != nil {
					return err
				}
				if tc.n%tc.size == 0 {
					res.rs = make([]T, tc.n/tc.size)
					if err := comm.ReduceScatter(ctx, g, res.rs, in[r]); err != nil {
						return err
					}
					res.a2a = make([]T, tc.n)
					if err := comm.AllToAll(ctx, g, res.a2a, in[r]); err != nil {
						return err
					}
				}
				res.bc = make([]T, tc.n)
				copy(res.bc, in[r])
				return comm.Broadcast(ctx, g, res.bc, tc.size-1)
			}))
			for r := range tc.size {
				want := result{ag: collectivetest.AllGather(in), ar: collectivetest.Sum(in, 0, tc.n), bc: in[tc.size-1]}
				if tc.n%tc.size == 0 {
					q := tc.n / tc.size
					want.rs = collectivetest.Sum(in, r*q, (r+1)*q)
					want.a2a = collectivetest.AllToAll(in, r)
				}
				if d := cmp.Diff(want, got[r], cmp.AllowUnexported(result{}), collectivetest.BitsEqual); d != "" {
					t.Errorf("rank %d (-want +got):\n%s", r, d)
				}
			}
		})
	}
}

// TestAllToAllV exchanges variable parts, including empty ones, and checks
// each rank's receive buffer against the definition.
func TestAllToAllV(t *testing.T) {
	cases := []struct {
		name   string
		counts [][]int // counts[i][j]: elements rank i sends to rank j
	}{
		{"single", [][]int{{3}}},
		{"two", [][]int{{1, 2}, {3, 0}}},
		{"three-uneven", [][]int{{0, 5, 1}, {2, 0, 0}, {4, 1, 3}}},
		{"all-empty", [][]int{{0, 0}, {0, 0}}},
		{"four", [][]int{{1, 2, 3, 4}, {0, 0, 0, 9}, {2, 2, 2, 2}, {7, 0, 1, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, want := runAllToAllV(t, tc.counts)
			if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// runAllToAllV runs one AllToAllV of int32 with the given count matrix and
// returns every rank's receive buffer and the expected ones.
func runAllToAllV(t testing.TB, counts [][]int) (got, want [][]int32) {
	p := len(counts)
	src := make([][]int32, p)
	for i := range p {
		for j, c := range counts[i] {
			for k := range c {
				src[i] = append(src[i], int32(i*1_000_000+j*1000+k))
			}
		}
	}
	want = make([][]int32, p)
	for r := range p {
		for i := range p {
			for k := range counts[i][r] {
				want[r] = append(want[r], int32(i*1_000_000+r*1000+k))
			}
		}
	}
	got = make([][]int32, p)
	mustAll(t, run(t, p, inproc.Options{}, func(ctx context.Context, g comm.Group) error {
		r := g.Rank()
		recv := make([]int, p)
		total := 0
		for i := range p {
			recv[i] = counts[i][r]
			total += recv[i]
		}
		got[r] = make([]int32, total)
		return comm.AllToAllV(ctx, g, got[r], src[r], counts[r], recv)
	}))
	return got, want
}

// FuzzAllToAllV derives a consistent count matrix from the fuzz input and
// checks the exchange against the definition.
func FuzzAllToAllV(f *testing.F) {
	f.Add([]byte{2, 1, 2, 3, 0})
	f.Add([]byte{3, 0, 5, 1, 2, 0, 0, 4, 1, 3})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		p := int(data[0])%5 + 1
		counts := make([][]int, p)
		k := 1
		for i := range counts {
			counts[i] = make([]int, p)
			for j := range counts[i] {
				if k < len(data) {
					counts[i][j] = int(data[k]) % 17
					k++
				}
			}
		}
		got, want := runAllToAllV(t, counts)
		if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("counts %v (-want +got):\n%s", counts, d)
		}
	})
}

// TestReductionsDeterministic pins that every member gets the same bits,
// equal to the sum in group-rank order, on every run.
func TestReductionsDeterministic(t *testing.T) {
	for _, n := range []int{64, 8192} { // direct and chunked AllReduce
		t.Run(fmt.Sprint(n), func(t *testing.T) { testReductionsDeterministic(t, n) })
	}
}

func testReductionsDeterministic(t *testing.T, n int) {
	const size = 4
	in := make([][]float32, size)
	for r := range in {
		in[r] = make([]float32, n)
		for i := range in[r] {
			// Magnitudes far apart, so the order of addition changes the result.
			in[r][i] = float32(math.Pow(10, float64((r*3+i)%9-4))) * float32(1+i%5) * float32(1-2*(r%2))
		}
	}
	rankOrder := make([]uint32, n)
	for i := range n {
		var s float32
		for r := range size {
			s += in[r][i]
		}
		rankOrder[i] = math.Float32bits(s)
	}
	reverse := 0
	for i := range n {
		var s float32
		for r := size - 1; r >= 0; r-- {
			s += in[r][i]
		}
		if math.Float32bits(s) != rankOrder[i] {
			reverse++
		}
	}
	if reverse == 0 {
		t.Fatal("inputs do not distinguish summation orders; the test would prove nothing")
	}
	for run := range 3 {
		ar := make([][]uint32, size)
		rs := make([][]uint32, size)
		mustAll(t, inproc.Run(context.Background(), newWorld(t, size, inproc.Options{}), func(ctx context.Context, g comm.Group) error {
			r := g.Rank()
			out := make([]float32, n)
			if err := comm.AllReduce(ctx, g, out, in[r]); err != nil {
				return err
			}
			part := make([]float32, n/size)
			if err := comm.ReduceScatter(ctx, g, part, in[r]); err != nil {
				return err
			}
			for _, v := range out {
				ar[r] = append(ar[r], math.Float32bits(v))
			}
			for _, v := range part {
				rs[r] = append(rs[r], math.Float32bits(v))
			}
			return nil
		}))
		for r := range size {
			if d := cmp.Diff(rankOrder, ar[r]); d != "" {
				t.Errorf("run %d rank %d AllReduce bits (-rank order +got):\n%s", run, r, d)
			}
			q := n / size
			if d := cmp.Diff(rankOrder[r*q:(r+1)*q], rs[r]); d != "" {
				t.Errorf("run %d rank %d ReduceScatter bits (-rank order +got):\n%s", run, r, d)
			}
		}
	}
}
