package kernels

import (
	"unsafe"

	"github.com/cpmla/cpmla/numfmt"
)

// The interleaved fp8 layout: groups of fp8IlvRows rows whose codes
// alternate in steps of fp8IlvCols, each step of a group fp8IlvStep bytes
// (the generator's fp8Step). The AVX-512 tiles that read it assume all
// three.
const (
	fp8IlvRows = 8
	fp8IlvCols = 16
	fp8IlvStep = fp8IlvRows * fp8IlvCols
)

// fp8IlvAt is where codes k…k+fp8IlvCols-1 of row j (k a multiple of
// fp8IlvCols) start in the interleaved layout of a matrix of in columns.
func fp8IlvAt(in, j, k int) int {
	return (j/fp8IlvRows)*fp8IlvRows*in + (k/fp8IlvCols)*fp8IlvStep + (j%fp8IlvRows)*fp8IlvCols
}

// InterleaveFP8 stores an fp8 matrix in the layout the AVX-512 tiles read
// as one stream, front to back: the rows in groups of eight, each group's
// codes in steps of sixteen columns, row after row, so that code (j, k) is
// at
//
//	(j/8)·8·Cols + (k/16)·128 + (j%8)·16 + k%16.
//
// A one-row product of a row-major matrix reads eight or sixteen rows at
// once, as many short streams, which the hardware prefetchers follow less
// well than one (docs/performance.md, "fp8 rows interleaved"); the
// interleaved one-row product reads two. The block scales stay as they
// are: a group of eight rows lies in one block of 128 rows. The codes are
// copied into new storage, which on Linux is asked to sit on 2 MiB huge
// pages (toHugePages): a checkpoint's read-only view is left as it is. It
// reports whether the matrix is interleaved now; it does nothing unless
// the AVX-512 implementation is active, the codes were checked to hold no
// NaN code (NewFP8Matrix, CheckFP8Codes), every block scale decodes in
// registers (fp8InRegister), Rows is a positive multiple of 8, Cols of 16
// and the scales' offsets keep each group of eight rows in one block of
// rows and each step of sixteen columns in one block of columns. Products,
// Row, Dequantize and the slices give the same bits in either layout,
// under every implementation.
func (m *Matrix) InterleaveFP8() bool {
	if m.fp8Ilv || !m.FP8Interleavable() {
		return m.fp8Ilv
	}
	v := make([]uint8, len(m.FP8))
	m.interleaveFP8Into(v)
	fp8HugePages(v)
	return true
}

// InterleaveFP8Each moves every matrix of ms into the layout of
// InterleaveFP8 with all their codes in one new allocation, one matrix
// after another in the order of ms, so that a one-row product over all of
// them (MatMulTHeads over a layer's absorbed heads) reads one stream front
// to back, on huge pages where a matrix alone is too small for one. It
// does so only if every matrix takes the layout (FP8Interleavable; one
// already interleaved is copied as it is) and otherwise leaves every one
// as it is. It reports whether they are interleaved now.
func InterleaveFP8Each(ms []Matrix) bool {
	n := 0
	for i := range ms {
		if !ms[i].FP8Interleavable() {
			return false
		}
		n += len(ms[i].FP8)
	}
	v := make([]uint8, n)
	at := 0
	for i := range ms {
		m := &ms[i]
		part := v[at : at+len(m.FP8) : at+len(m.FP8)]
		at += len(m.FP8)
		if m.fp8Ilv {
			copy(part, m.FP8)
			m.FP8 = part
			continue
		}
		m.interleaveFP8Into(part)
	}
	fp8HugePages(v)
	return true
}

// interleaveFP8Into writes m's row-major codes to v (len(m.FP8) bytes) in
// the interleaved layout and makes v m's codes.
func (m *Matrix) interleaveFP8Into(v []uint8) {
	in := m.Cols
	for j := range m.Rows {
		for k := 0; k < in; k += fp8IlvCols {
			copy(v[fp8IlvAt(in, j, k):][:fp8IlvCols], m.FP8[j*in+k:])
		}
	}
	m.FP8, m.fp8Ilv = v, true
}

// fp8HugePages asks for huge pages under fp8 codes (toHugePages), as
// advice: ordinary pages give the same values.
func fp8HugePages(v []uint8) {
	_ = hugePages(unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(v))), len(v)/2))
}

// FP8Interleavable reports whether InterleaveFP8 would move m into the
// interleaved layout (or has): fp8 codes checked to hold no NaN code, the
// AVX-512 implementation active, and a shape, block offsets and scales the
// layout and its tiles take.
func (m *Matrix) FP8Interleavable() bool {
	return m.fp8Ilv || m.FP8 != nil && m.finite && activeLevel() == levelAVX512 && fp8IlvShape(m) && fp8InRegister(m, levelAVX512, 0, m.Rows)
}

// fp8IlvShape reports whether m's shape and block offsets take the
// interleaved fp8 layout: each group of eight rows in one block of rows,
// each step of sixteen columns in one block of columns (a column offset of
// 64, as half the heads of an absorbed W_UKᵀ have, is one).
func fp8IlvShape(m *Matrix) bool {
	return m.Rows > 0 && m.Rows%fp8IlvRows == 0 && m.Cols > 0 && m.Cols%fp8IlvCols == 0 &&
		m.Scales != nil && m.Scales.RowOff%fp8IlvRows == 0 && m.Scales.ColOff%fp8IlvCols == 0
}

// fp8IlvCodes copies the codes of row j from column k0 on (a multiple of
// fp8IlvCols) of an interleaved fp8 matrix into dst, in column order.
func (m *Matrix) fp8IlvCodes(dst []uint8, j, k0 int) {
	for q := 0; q < len(dst); q += fp8IlvCols {
		copy(dst[q:min(q+fp8IlvCols, len(dst))], m.FP8[fp8IlvAt(m.Cols, j, k0+q):])
	}
}

// dequantIlvFP8 writes row j's values [k0, k0+len(dst)) of an interleaved
// fp8 matrix (k0 a multiple of fp8IlvCols) to dst, the values Row gives,
// a block of columns at a time.
func (m *Matrix) dequantIlvFP8(dst []float32, j, k0 int) {
	var c [FP8Block]uint8
	srow, off := m.Scales.scaleRow(j), m.Scales.ColOff
	for k := 0; k < len(dst); {
		b := (k0 + k + off) / FP8Block
		end := min(len(dst), (b+1)*FP8Block-k0-off)
		m.fp8IlvCodes(c[:end-k], j, k0+k)
		DecodeE4M3Scaled(dst[k:end], c[:end-k], srow[b])
		k = end
	}
}

// rowMajorFP8 returns rows [lo, lo+n) of an interleaved fp8 matrix's codes
// in a new row-major slice.
func (m *Matrix) rowMajorFP8(lo, n int) []uint8 {
	v := make([]uint8, n*m.Cols)
	for r := range n {
		m.fp8IlvCodes(v[r*m.Cols:(r+1)*m.Cols], lo+r, 0)
	}
	return v
}

// dotIlvFP8 is dotFP8 over row j of an interleaved fp8 matrix (the
// reference's output element): the same order, a step of fp8IlvCols codes
// (four lanes of four) at a time, each step inside one block of columns.
func (m *Matrix) dotIlvFP8(x []float32, j int) float32 {
	in := m.Cols
	srow, off := m.Scales.scaleRow(j), m.Scales.ColOff
	var s0, s1, s2, s3 float32
	for q := 0; q < in; q += fp8IlvCols {
		c := m.FP8[fp8IlvAt(in, j, q):][:fp8IlvCols:fp8IlvCols]
		p := x[q : q+fp8IlvCols : q+fp8IlvCols]
		sc := srow[(q+off)/FP8Block]
		w := func(k int) float32 { return numfmt.F32FromE4M3(c[k]) * sc }
		for k := 0; k < fp8IlvCols; k += 4 {
			s0 += float32(p[k] * w(k))
			s1 += float32(p[k+1] * w(k+1))
			s2 += float32(p[k+2] * w(k+2))
			s3 += float32(p[k+3] * w(k+3))
		}
	}
	return (s0 + s1) + (s2 + s3)
}

// fp8At is where code (j, k) of an fp8 matrix lies in FP8 (k a multiple of
// fp8IlvCols when the matrix is interleaved).
func (w *Matrix) fp8At(j, k int) int {
	if w.fp8Ilv {
		return fp8IlvAt(w.Cols, j, k)
	}
	return j*w.Cols + k
}

// fp8IlvPrefetch is how many bytes ahead in its stream an interleaved fp8
// one-row tile prefetches: a group's codes for every column lie in one
// piece and the next group's follow, so the distance needs no care at a
// row's end.
var fp8IlvPrefetch = 2048

// gemmRangeIlvFP8 is gemmRangeFP8 on AVX-512 for the rows [j0, j1)
// (multiples of 8) of an interleaved fp8 matrix, with the row-major
// tiles' arithmetic, so every output keeps their bits: one activation row
// through the pair tile, two or three through the eight-row tile, four
// through the four-row tile, five to eight through the three-row tile and
// more through the decoded paths. It returns the first row it left for the
// panel: the one or two rows a walk of three-row tiles leaves, or j0 for
// row counts between the decoded and the prompt paths.
func gemmRangeIlvFP8(dst, x []float32, n int, w *Matrix, buf *[panelFloats]float32, j0, j1 int) int {
	in, out := w.Cols, w.Rows
	switch {
	case n == 1:
		gemvPairsIlvFP8(dst, x, w, j0, j1)
		return j1
	case n <= eightRowMaxRows:
		return panelWalkFP8(n, w, j0, j1, 8, func(jt, k0, pfd int) {
			var sc [1]*float32
			first := fp8TileScales(w, sc[:], jt, k0, 16)
			dotTileFP8Rows8Ilv(n, &x[k0], in, &w.FP8[fp8IlvAt(in, jt, k0)], min(gemmKC, in-k0), sc[0], first, pfd, dst[jt:], out, k0 > 0)
		})
	case n <= fp8RegisterMaxRows:
		return panelWalkFP8(n, w, j0, j1, 4, func(jt, k0, pfd int) {
			var sc [4]*float32
			first := fp8TileScales(w, sc[:], jt, k0, 16)
			dotTileFP8RowsIlv(n, &x[k0], in, &w.FP8[fp8IlvAt(in, jt, k0)], min(gemmKC, in-k0), &sc, first, pfd, dst[jt:], out, k0 > 0)
		})
	case n <= fp8ThreeRowMaxRows:
		return panelWalkFP8(n, w, j0, j1, 3, func(jt, k0, pfd int) {
			var sc [3]*float32
			first := fp8TileScales(w, sc[:], jt, k0, 16)
			at := fp8IlvAt(in, jt, k0)
			ldw, ldw2 := fp8IlvAt(in, jt+1, k0)-at, fp8IlvAt(in, jt+2, k0)-at
			dotTileFP8Rows3Ilv(n, &x[k0], in, &w.FP8[at], ldw, ldw2, min(gemmKC, in-k0), &sc, first, pfd, dst[jt:], out, k0 > 0)
		})
	case n <= fp8DecodedMaxRows:
		return gemmFP8Decoded(dst, x, n, w, levelAVX512, buf, j0, j1)
	case n >= promptGroupsMinRows:
		return gemmFP8Groups(dst, x, n, w, levelAVX512, buf, j0, j1)
	}
	return j0
}

// gemvPairsIlvFP8 is gemvPairsFP8 for the rows [j0, j1) (multiples of 8)
// of an interleaved fp8 matrix: group g with group g+half in one call of
// the pair tile per reduction block, two streams front to back, the odd
// middle group alone (groupIlvFP8). Every group lies in one block of rows
// and no two groups' lines meet in one cache set more than the streams
// do, so neither the row-major walk's single-group fallback nor its lag
// is needed.
func gemvPairsIlvFP8(dst, x []float32, w *Matrix, j0, j1 int) {
	in := w.Cols
	pairs, half, mid := pairedGroups((j1 - j0) / 8)
	ps := newPrescaled(w, x)
	defer ps.release()
	for g := range pairs {
		ja, jb := j0+g*8, j0+(g+half)*8
		a := pairGroup{dst, x, w, ja, ps.rows(0, ja)}
		b := pairGroup{dst, x, w, jb, ps.rows(1, jb)}
		for k0 := 0; k0 < in; k0 += gemmKC {
			pairBlockFP8(a, b, k0, k0, min(gemmKC, in-k0))
		}
	}
	if mid >= 0 {
		jm := j0 + mid*8
		groupIlvFP8(pairGroup{dst, x, w, jm, ps.rows(0, jm)})
	}
}

// groupIlvFP8 is the one-row product of the group of eight rows at a.j of
// an interleaved fp8 matrix: the pair tile with the group as both of its
// groups, the second's sums dropped (the same bits; one group's decoding
// twice, for the one group a walk has left over).
func groupIlvFP8(a pairGroup) {
	in := a.w.Cols
	var out [16]float32
	for k0 := 0; k0 < in; k0 += gemmKC {
		pairTileIlvFP8(a, a, k0, k0, min(gemmKC, in-k0), &out)
		addBlock(a.d[a.j:a.j+8:a.j+8], out[:8], k0 == 0)
	}
}

// pairTileIlvFP8 runs the interleaved pair tile on the block of kn columns
// at ka of group a and at kb of group b (both of interleaved matrices),
// prefetching each stream fp8IlvPrefetch bytes ahead, and leaves the sums
// in out.
func pairTileIlvFP8(a, b pairGroup, ka, kb, kn int, out *[16]float32) {
	wa, wb := &a.w.FP8[fp8IlvAt(a.w.Cols, a.j, ka)], &b.w.FP8[fp8IlvAt(b.w.Cols, b.j, kb)]
	if a.xs != nil && b.xs != nil {
		dotTile1x16FP8PrescaledIlv(&a.xs[ka], &b.xs[kb], wa, wb, kn, fp8IlvPrefetch, fp8IlvPrefetch, out)
		return
	}
	var sc [2]*float32
	first := fp8TileScales(a.w, sc[:1], a.j, ka, 16)
	fp8TileScales(b.w, sc[1:], b.j, kb, 16)
	dotTile1x16FP8Ilv(&a.x[ka], &b.x[kb], wa, wb, kn, &sc, first, fp8IlvPrefetch, fp8IlvPrefetch, out)
}
