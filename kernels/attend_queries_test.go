package kernels

import (
	"fmt"
	"math"
	"sync/atomic"
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

// listDecoded is a QueryRowDecoder over the same table: record r is pool
// row r, widened exactly; it counts the rows it decodes.
type listDecoded struct {
	*listRows
	decoded atomic.Int64 // DecodeRows runs on several threads
}

func (s *listDecoded) Select(i int, sel []int32) []int32 {
	for j, r := range s.sel[i] {
		sel[j] = int32(r)
	}
	return sel[:len(s.sel[i])]
}

func (s *listDecoded) DecodeRows(dst []float32, sel []int32, j0, j1 int) {
	for j := j0; j < j1; j++ {
		row := s.pool[sel[j]]
		to := dst[(j-j0)*len(row) : (j-j0+1)*len(row)]
		for c, h := range row {
			to[c] = bf16ToF32(h)
		}
	}
	s.decoded.Add(int64(j1 - j0))
}

// listF32 is a QueryRows over the same table: every other pool row is a
// view of a widened copy, the rest are written to the scratch.
type listF32 struct {
	*listRows
	wide [][]float32
}

func newListF32(src *listRows) *listF32 {
	l := &listF32{listRows: src, wide: make([][]float32, len(src.pool))}
	for j, row := range src.pool {
		l.wide[j] = make([]float32, len(row))
		for c, h := range row {
			l.wide[j][c] = bf16ToF32(h)
		}
	}
	return l
}

func (s *listF32) Rows(i int, rows [][]float32, scratch []float32) [][]float32 {
	for j, r := range s.sel[i] {
		if r%2 == 0 {
			rows[j] = s.wide[r]
			continue
		}
		dim := len(s.wide[r])
		rows[j] = scratch[j*dim : (j+1)*dim]
		copy(rows[j], s.wide[r])
	}
	return rows[:len(s.sel[i])]
}

// queryDecoder is the RowDecoder of query i of a listDecoded.
type queryDecoder struct {
	src *listDecoded
	sel []int32
}

func (d *queryDecoder) DecodeRows(dst []float32, j0, j1 int) { d.src.DecodeRows(dst, d.sel, j0, j1) }

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
				t.Run(fmt.Sprintf("f32/heads=%d/queries=%d/threads=%d", tc.heads, nq, threads), func(t *testing.T) {
					defer SetThreads(SetThreads(threads))
					f32 := newListF32(src)
					// Each query alone through AttendRows.
					wantF32 := make([]float32, 0, nq*tc.heads*(vdim+2))
					for i := range nq {
						out, lse, maxL := make([]float32, tc.heads*vdim), make([]float32, tc.heads), make([]float32, tc.heads)
						n := f32.RowCount(i)
						rows := f32.Rows(i, make([][]float32, n), make([]float32, n*dim))
						AttendRows(out, lse, maxL, q[i*tc.heads*dim:(i+1)*tc.heads*dim], tc.heads, vdim, rows, 0.0625, make([]float32, AttendScratchLen(tc.heads, n, vdim)))
						wantF32 = append(append(append(wantF32, out...), lse...), maxL...)
					}
					out, lse, maxL := nanSlice(nq*tc.heads*vdim), nanSlice(nq*tc.heads), nanSlice(nq*tc.heads)
					AttendQueries(out, lse, maxL, q, nq, tc.heads, vdim, dim, f32, 0.0625, make([]float32, AttendScratchLen(tc.heads, maxRows, vdim)),
						make([]float32, maxRows*dim), make([][]float32, maxRows))
					got := make([]float32, 0, len(wantF32))
					for i := range nq {
						got = append(append(append(got, out[i*tc.heads*vdim:(i+1)*tc.heads*vdim]...), lse[i*tc.heads:(i+1)*tc.heads]...), maxL[i*tc.heads:(i+1)*tc.heads]...)
					}
					if d := cmp.Diff(bitsOf(wantF32), bitsOf(got)); d != "" {
						t.Errorf("(-each query alone +AttendQueries):\n%s", d)
					}
					// The bf16 rows widened give the bits of the bf16 call.
					if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
						t.Errorf("(-AttendRowsBF16 +AttendQueries on the widened rows):\n%s", d)
					}
				})
				t.Run(fmt.Sprintf("decoded/heads=%d/queries=%d/threads=%d", tc.heads, nq, threads), func(t *testing.T) {
					defer SetThreads(SetThreads(threads))
					dec := &listDecoded{listRows: src}
					// Each query alone through AttendDecodedRows.
					wantDec := make([]float32, 0, nq*tc.heads*(vdim+2))
					for i := range nq {
						out, lse, maxL := make([]float32, tc.heads*vdim), make([]float32, tc.heads), make([]float32, tc.heads)
						n := dec.RowCount(i)
						qd := &queryDecoder{src: dec, sel: dec.Select(i, make([]int32, n))}
						AttendDecodedRows(out, lse, maxL, q[i*tc.heads*dim:(i+1)*tc.heads*dim], tc.heads, vdim, n, dim, qd, 0.0625,
							make([]float32, AttendScratchLen(tc.heads, n, vdim)), make([]float32, n*dim), make([][]float32, n))
						wantDec = append(append(append(wantDec, out...), lse...), maxL...)
					}
					dec.decoded.Store(0)
					out, lse, maxL := nanSlice(nq*tc.heads*vdim), nanSlice(nq*tc.heads), nanSlice(nq*tc.heads)
					AttendQueriesDecoded(out, lse, maxL, q, nq, tc.heads, vdim, dim, dec, 0.0625, make([]float32, AttendScratchLen(tc.heads, maxRows, vdim)),
						make([]float32, maxRows*dim), make([][]float32, maxRows), make([]int32, maxRows))
					got := make([]float32, 0, len(wantDec))
					for i := range nq {
						got = append(append(append(got, out[i*tc.heads*vdim:(i+1)*tc.heads*vdim]...), lse[i*tc.heads:(i+1)*tc.heads]...), maxL[i*tc.heads:(i+1)*tc.heads]...)
					}
					if d := cmp.Diff(bitsOf(wantDec), bitsOf(got)); d != "" {
						t.Errorf("(-each query alone +AttendQueriesDecoded):\n%s", d)
					}
					// On one thread every row a query attends to is decoded
					// once. On more, a call that keeps the per-call split
					// (one query, or too little work to share) may decode a
					// row once per unit of heads that reads it.
					total := 0
					for _, c := range tc.counts {
						total += c
					}
					if n := dec.decoded.Load(); n < int64(total) || (threads == 1 && n != int64(total)) {
						t.Errorf("%d rows decoded on %d threads; the queries attend to %d", n, threads, total)
					}
				})
			}
		}
	})
}

// TestAttendQueriesDecodedRefusesBadSizes: short scratch and a source
// whose records disagree with its row counts panic with the sizes instead
// of writing past a slice.
func TestAttendQueriesDecodedRefusesBadSizes(t *testing.T) {
	src := &listDecoded{listRows: &listRows{pool: [][]uint16{make([]uint16, 64)}, sel: [][]int{{0}, {0, 0}}}}
	call := func(logits, scratch, rows, sel int) func() {
		return func() {
			AttendQueriesDecoded(make([]float32, 128), make([]float32, 2), nil, make([]float32, 128), 2, 1, 64, 64, src, 1,
				make([]float32, logits), make([]float32, scratch), make([][]float32, rows), make([]int32, sel))
		}
	}
	tests := []struct {
		name string
		call func()
	}{
		{"short logits", call(1, 128, 2, 2)},
		{"short scratch", call(1000, 127, 2, 2)},
		{"short rows", call(1000, 128, 1, 2)},
		{"short records", call(1000, 128, 2, 1)},
		{"negative row length", func() {
			AttendQueriesDecoded(make([]float32, 128), make([]float32, 2), nil, make([]float32, 128), 2, 1, 64, -1, src, 1,
				make([]float32, 1000), make([]float32, 128), make([][]float32, 2), make([]int32, 2))
		}},
		{"records disagree with the count", func() {
			bad := &miscounted{src}
			AttendQueriesDecoded(make([]float32, 128), make([]float32, 2), nil, make([]float32, 128), 2, 1, 64, 64, bad, 1,
				make([]float32, 1000), make([]float32, 192), make([][]float32, 3), make([]int32, 3))
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

// TestAttendQueriesRefusesBadSizes: short scratch and a source whose rows
// disagree with its row counts panic with the sizes.
func TestAttendQueriesRefusesBadSizes(t *testing.T) {
	src := newListF32(&listRows{pool: [][]uint16{make([]uint16, 64), make([]uint16, 64)}, sel: [][]int{{0}, {1, 1}}})
	call := func(logits, scratch, rows int) func() {
		return func() {
			AttendQueries(make([]float32, 128), make([]float32, 2), nil, make([]float32, 128), 2, 1, 64, 64, src, 1,
				make([]float32, logits), make([]float32, scratch), make([][]float32, rows))
		}
	}
	tests := []struct {
		name string
		call func()
	}{
		{"short logits", call(1, 128, 2)},
		{"short scratch", call(1000, 127, 2)},
		{"short rows", call(1000, 128, 1)},
		{"rows disagree with the count", func() {
			AttendQueries(make([]float32, 128), make([]float32, 2), nil, make([]float32, 128), 2, 1, 64, 64, &miscountedF32{src}, 1,
				make([]float32, 1000), make([]float32, 192), make([][]float32, 3))
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

// miscountedF32 reports one row more than it gives.
type miscountedF32 struct{ *listF32 }

func (m *miscountedF32) RowCount(i int) int { return m.listF32.RowCount(i) + 1 }

// miscounted reports one row more than it selects.
type miscounted struct{ *listDecoded }

func (m *miscounted) RowCount(i int) int { return m.listDecoded.RowCount(i) + 1 }

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
