package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// listRows is a QueryRowsBF16 over a table: query i attends to pool rows
// sel[i], in that order.
type listRows struct {
	pool [][]uint16
	sel  [][]int
}

func (s *listRows) RowCount(i int) int { return len(s.sel[i]) }

func (s *listRows) RowsBF16(i int, rows [][]uint16) [][]uint16 {
	for j, r := range s.sel[i] {
		rows[j] = s.pool[r]
	}
	return rows[:len(s.sel[i])]
}

// TestAttendQueriesBF16: every query's output, lse and max logit have the
// bits of its own AttendRowsBF16 call, under every implementation and on one
// to three threads, over queries of no row, one row, one split and several
// splits, for head counts below, at and above one logit tile's sixteen.
func TestAttendQueriesBF16(t *testing.T) {
	const dim, vdim = 576, 512
	tests := []struct {
		heads  int
		counts []int
	}{
		{8, []int{0, 1, 37, 300, 5, 129}},
		{16, []int{600, 2, 1200, 64, 0, 511, 3}},
		{64, []int{1, 700}},
		{16, []int{250}},
	}
	forEachImpl(t, func(t *testing.T) {
		for k, tc := range tests {
			r := newRand(700 + uint64(k))
			pool := make([][]uint16, 1500)
			for j := range pool {
				pool[j] = make([]uint16, dim)
				for c, x := range randSlice(r, dim, 1) {
					pool[j][c] = toBF16(x)
				}
			}
			src := &listRows{pool: pool}
			maxRows := 0
			for _, c := range tc.counts {
				sel := make([]int, c)
				for j := range sel {
					sel[j] = r.IntN(len(pool))
				}
				src.sel = append(src.sel, sel)
				maxRows = max(maxRows, c)
			}
			nq := len(tc.counts)
			q := randSlice(r, nq*tc.heads*dim, 0.3)
			// Each query alone.
			want := make([]float32, 0, nq*tc.heads*(vdim+2))
			for i := range nq {
				out, lse, maxL := make([]float32, tc.heads*vdim), make([]float32, tc.heads), make([]float32, tc.heads)
				rows := src.RowsBF16(i, make([][]uint16, maxRows))
				AttendRowsBF16(out, lse, maxL, q[i*tc.heads*dim:(i+1)*tc.heads*dim], tc.heads, vdim, rows, 0.0625, make([]float32, AttendScratchLen(tc.heads, len(rows), vdim)))
				want = append(append(append(want, out...), lse...), maxL...)
			}
			for _, threads := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("heads=%d/queries=%d/threads=%d", tc.heads, nq, threads), func(t *testing.T) {
					defer SetThreads(SetThreads(threads))
					for _, withMax := range []bool{true, false} {
						out, lse, maxL := nanSlice(nq*tc.heads*vdim), nanSlice(nq*tc.heads), nanSlice(nq*tc.heads)
						ml := maxL
						if !withMax {
							ml = nil
						}
						AttendQueriesBF16(out, lse, ml, q, nq, tc.heads, vdim, src, 0.0625, make([][]uint16, maxRows), make([]float32, AttendScratchLen(tc.heads, maxRows, vdim)))
						got, wantHere := make([]float32, 0, len(want)), make([]float32, 0, len(want))
						for i := range nq {
							w := want[i*tc.heads*(vdim+2) : (i+1)*tc.heads*(vdim+2)]
							got = append(append(got, out[i*tc.heads*vdim:(i+1)*tc.heads*vdim]...), lse[i*tc.heads:(i+1)*tc.heads]...)
							wantHere = append(wantHere, w[:tc.heads*(vdim+1)]...)
							if withMax {
								got = append(got, maxL[i*tc.heads:(i+1)*tc.heads]...)
								wantHere = append(wantHere, w[tc.heads*(vdim+1):]...)
							}
						}
						if d := cmp.Diff(bitsOf(wantHere), bitsOf(got)); d != "" {
							t.Errorf("maxLogits %v (-each query alone +AttendQueriesBF16):\n%s", withMax, d)
						}
					}
				})
			}
		}
	})
}

func nanSlice(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(math.NaN())
	}
	return s
}

// TestAttendQueriesBF16RefusesBadSizes: inconsistent sizes and short scratch
// panic with the sizes instead of writing past a slice.
func TestAttendQueriesBF16RefusesBadSizes(t *testing.T) {
	src := &listRows{pool: [][]uint16{make([]uint16, 64)}, sel: [][]int{{0}, {0, 0}}}
	tests := []struct {
		name string
		call func()
	}{
		{"short out", func() {
			AttendQueriesBF16(make([]float32, 63), make([]float32, 2), nil, make([]float32, 128), 2, 1, 64-32, src, 1, make([][]uint16, 2), make([]float32, 1000))
		}},
		{"short rows", func() {
			AttendQueriesBF16(make([]float32, 128), make([]float32, 2), nil, make([]float32, 128), 2, 1, 64, src, 1, make([][]uint16, 1), make([]float32, 1000))
		}},
		{"short logits", func() {
			AttendQueriesBF16(make([]float32, 128), make([]float32, 2), nil, make([]float32, 128), 2, 1, 64, src, 1, make([][]uint16, 2), make([]float32, 1))
		}},
		{"q not whole heads", func() {
			AttendQueriesBF16(make([]float32, 128), make([]float32, 2), nil, make([]float32, 127), 2, 1, 64, src, 1, make([][]uint16, 2), make([]float32, 1000))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tc.call()
		})
	}
}
