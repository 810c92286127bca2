package kernels

import (
	"fmt"
	"math"
	"slices"

	"golang.org/x/sys/cpu"
)

//go:generate sh -c "cd ../_gen && go run . -out ../kernels/asm_amd64.s -stubs ../kernels/asm_stub_amd64.go -pkg kernels"

// supported reports whether this CPU runs level l. AVX-512 kernels use
// F (arithmetic, VSCALEFPS, VCVTPH2PS), VL (EVEX forms of 256/128-bit ops
// on the upper registers) and DQ/BW for the widening loads; AVX2 kernels
// FMA and F16C (VCVTPH2PS, the fp8 records' decoding), which every CPU with
// AVX2 and FMA has.
func supported(l level) bool {
	switch l {
	case levelRef:
		return true
	case levelAVX2:
		return cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	case levelAVX512:
		return cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512BW && cpu.X86.HasFMA
	}
	return false
}

// bestLevel is the widest level the CPU supports.
func bestLevel() level {
	switch {
	case supported(levelAVX512):
		return levelAVX512
	case supported(levelAVX2):
		return levelAVX2
	}
	return levelRef
}

// dotTileF32 runs the m×4 dot-product tile of level l (m ≤ maxTileRows(l)).
// Direct calls keep the asm's noescape pragma effective.
func dotTileF32(l level, m int, x *float32, ldx int, w0, w1, w2, w3 *float32, kn int, out *[24]float32) {
	o := &out[0]
	if l == levelAVX512 {
		switch m {
		case 1:
			dotTile1x4F32AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		case 2:
			dotTile2x4F32AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		case 3:
			dotTile3x4F32AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		case 4:
			dotTile4x4F32AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		case 5:
			dotTile5x4F32AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		default:
			dotTile6x4F32AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		}
		return
	}
	switch m {
	case 1:
		dotTile1x4F32AVX2(x, ldx, w0, w1, w2, w3, kn, o)
	case 2:
		dotTile2x4F32AVX2(x, ldx, w0, w1, w2, w3, kn, o)
	default:
		dotTile3x4F32AVX2(x, ldx, w0, w1, w2, w3, kn, o)
	}
}

// dotTileBF16 is dotTileF32 with bf16 weights widened in registers.
func dotTileBF16(l level, m int, x *float32, ldx int, w0, w1, w2, w3 *uint16, kn int, out *[24]float32) {
	o := &out[0]
	if l == levelAVX512 {
		switch m {
		case 1:
			dotTile1x4BF16AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		case 2:
			dotTile2x4BF16AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		case 3:
			dotTile3x4BF16AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		case 4:
			dotTile4x4BF16AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		case 5:
			dotTile5x4BF16AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		default:
			dotTile6x4BF16AVX512(x, ldx, w0, w1, w2, w3, kn, o)
		}
		return
	}
	switch m {
	case 1:
		dotTile1x4BF16AVX2(x, ldx, w0, w1, w2, w3, kn, o)
	case 2:
		dotTile2x4BF16AVX2(x, ldx, w0, w1, w2, w3, kn, o)
	default:
		dotTile3x4BF16AVX2(x, ldx, w0, w1, w2, w3, kn, o)
	}
}

// stripF32 runs the m×4 strip kernel of level l (m ≤ maxTileRows(l)) over
// f32 weight rows; on AVX-512 each weight line read prefetches the line pfd
// bytes further on (AVX2 ignores pfd: its callers stream one block of rows).
func stripF32(l level, m int, x *float32, ldx int, w *float32, ldw, groups, kn int, dst *float32, ldd, add, pfd int) {
	if l == levelAVX512 {
		switch m {
		case 1:
			gemmStrip1x4F32AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		case 2:
			gemmStrip2x4F32AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		case 3:
			gemmStrip3x4F32AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		case 4:
			gemmStrip4x4F32AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		case 5:
			gemmStrip5x4F32AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		default:
			gemmStrip6x4F32AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		}
		return
	}
	switch m {
	case 1:
		gemmStrip1x4F32AVX2(x, ldx, w, ldw, groups, kn, dst, ldd, add)
	case 2:
		gemmStrip2x4F32AVX2(x, ldx, w, ldw, groups, kn, dst, ldd, add)
	default:
		gemmStrip3x4F32AVX2(x, ldx, w, ldw, groups, kn, dst, ldd, add)
	}
}

// tileF32x8 runs the AVX-512 tile of m (1 ≤ m ≤ eightRowMaxRows)
// activation rows by eight f32 weight rows (gemmTile{m}x8F32AVX512): row i's
// eight sums stored to (add = 0) or added to (add = 1) out + i·ldo.
func tileF32x8(m int, x *float32, ldx int, w *float32, ldw, kn int, out *float32, ldo, add int) {
	switch m {
	case 1:
		gemmTile1x8F32AVX512(x, ldx, w, ldw, kn, out, ldo, add)
	case 2:
		gemmTile2x8F32AVX512(x, ldx, w, ldw, kn, out, ldo, add)
	default:
		gemmTile3x8F32AVX512(x, ldx, w, ldw, kn, out, ldo, add)
	}
}

// widenIlvGroup runs widenIlvGroupAVX512: n32 chunks of 32 values of a
// group of eight interleaved bf16 rows (src) widened into eight f32 rows at
// dst + r·ldd floats, prefetching as far past pf into L2.
func widenIlvGroup(dst *float32, ldd int, src *uint16, n32 int, pf *uint16) {
	widenIlvGroupAVX512(dst, ldd, src, n32, pf)
}

// stripBF16 is stripF32 with bf16 weights widened in registers.
func stripBF16(l level, m int, x *float32, ldx int, w *uint16, ldw, groups, kn int, dst *float32, ldd, add, pfd int) {
	if l == levelAVX512 {
		switch m {
		case 1:
			gemmStrip1x4BF16AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		case 2:
			gemmStrip2x4BF16AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		case 3:
			gemmStrip3x4BF16AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		case 4:
			gemmStrip4x4BF16AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		case 5:
			gemmStrip5x4BF16AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		default:
			gemmStrip6x4BF16AVX512(x, ldx, w, ldw, groups, kn, dst, ldd, add, pfd)
		}
		return
	}
	switch m {
	case 1:
		gemmStrip1x4BF16AVX2(x, ldx, w, ldw, groups, kn, dst, ldd, add)
	case 2:
		gemmStrip2x4BF16AVX2(x, ldx, w, ldw, groups, kn, dst, ldd, add)
	default:
		gemmStrip3x4BF16AVX2(x, ldx, w, ldw, groups, kn, dst, ldd, add)
	}
}

// stripBF16Ilv is stripBF16 on AVX-512 for weights in the interleaved
// layout of Matrix.InterleaveBF16: w is the first value of a half of a
// group of eight rows in the reduction block, groups (1 or 2) the halves the
// call takes. Instead of a distance per line read, the call prefetches pfs
// bytes (0, 128 or 256) per 32 values it reads, front to back from pfd bytes
// past w, through all its halves.
func stripBF16Ilv(m int, x *float32, ldx int, w *uint16, groups, kn int, dst *float32, ldd, add, pfd, pfs int) {
	switch m {
	case 1:
		gemmStrip1x4BF16IlvAVX512(x, ldx, w, groups, kn, dst, ldd, add, pfd, pfs)
	case 2:
		gemmStrip2x4BF16IlvAVX512(x, ldx, w, groups, kn, dst, ldd, add, pfd, pfs)
	case 3:
		gemmStrip3x4BF16IlvAVX512(x, ldx, w, groups, kn, dst, ldd, add, pfd, pfs)
	case 4:
		gemmStrip4x4BF16IlvAVX512(x, ldx, w, groups, kn, dst, ldd, add, pfd, pfs)
	case 5:
		gemmStrip5x4BF16IlvAVX512(x, ldx, w, groups, kn, dst, ldd, add, pfd, pfs)
	default:
		gemmStrip6x4BF16IlvAVX512(x, ldx, w, groups, kn, dst, ldd, add, pfd, pfs)
	}
}

// groupBF16Ilv runs gemmGroup{m}x8BF16IlvAVX512 (2 ≤ m ≤ groupIlvMaxRows;
// one row goes through dotTile1x8BF16Ilv):
// m activation rows (x, stride ldx) by a whole group of eight rows of the
// interleaved layout over kn values, added to (add ≠ 0) or stored in dst
// (stride ldd), prefetching pfl lines per 512 bytes read from pfd bytes
// past w on. carry splits a reduction block over several calls without
// changing a bit: with carryIn the call starts from the unreduced
// accumulators in acc, with carryOut it leaves its own there instead of
// reducing them into dst.
func groupBF16Ilv(m int, x *float32, ldx int, w *uint16, kn int, dst *float32, ldd, add, pfd, pfl int, acc *groupAcc, carry int) {
	if m == 2 {
		gemmGroup2x8BF16IlvAVX512(x, ldx, w, kn, dst, ldd, add, pfd, pfl, &acc[0], carry)
		return
	}
	gemmGroup3x8BF16IlvAVX512(x, ldx, w, kn, dst, ldd, add, pfd, pfl, &acc[0], carry)
}

// pairBF16Ilv runs gemmPair8x2BF16IlvAVX512: eight activation rows
// against the pair of interleaved bf16 weight rows whose lines start at w.
func pairBF16Ilv(x *float32, ldx int, w *uint16, kn int, dst *float32, ldd, add, pfd, pfl int) {
	gemmPair8x2BF16IlvAVX512(x, ldx, w, kn, dst, ldd, add, pfd, pfl)
}

// dotTile1x8BF16Ilv is dotTile1x8BF16 on AVX-512 for a group of eight rows
// in the interleaved layout of Matrix.InterleaveBF16.
func dotTile1x8BF16Ilv(x *float32, w *uint16, kn int, out *[8]float32) {
	dotTile1x8BF16IlvAVX512(x, w, kn, &out[0])
}

// dotTile1x16BF16Ilv is dotTile1x8BF16Ilv over two groups at once, w's
// outputs in out[:8], w2's in out[8:].
func dotTile1x16BF16Ilv(x *float32, w, w2 *uint16, kn int, out *[16]float32) {
	dotTile1x16BF16IlvAVX512(x, w, w2, kn, &out[0])
}

// dotTile1x8F32 runs the one-row, eight-weight-row tile of level l.
func dotTile1x8F32(l level, x, w *float32, ldw, kn int, out *[8]float32) {
	if l == levelAVX512 {
		dotTile1x8F32AVX512(x, w, ldw, kn, &out[0])
		return
	}
	dotTile1x8F32AVX2(x, w, ldw, kn, &out[0])
}

// dotTile1x8BF16 is dotTile1x8F32 with bf16 weights.
func dotTile1x8BF16(l level, x *float32, w *uint16, ldw, kn int, out *[8]float32) {
	if l == levelAVX512 {
		dotTile1x8BF16AVX512(x, w, ldw, kn, &out[0])
		return
	}
	dotTile1x8BF16AVX2(x, w, ldw, kn, &out[0])
}

// dotTile1x8FP8 runs the AVX-512 one-row tile over eight fp8 weight rows
// (see gemvTileFP8), prefetching each row pfd bytes past what it reads, and
// reports whether a full 64-byte chunk of codes held a NaN code.
func dotTile1x8FP8(x *float32, w *uint8, ldw, kn int, sc *[8]*float32, first, pfd int, out *[8]float32) bool {
	return dotTile1x8FP8AVX512(x, w, ldw, kn, sc, first, pfd, &out[0], 0) != 0
}

// dotTile1x8FP8Finite is dotTile1x8FP8 for codes known to hold no NaN
// code (Matrix.finite): it does not check them, and it stores (add false)
// or adds its eight sums to out.
func dotTile1x8FP8Finite(x *float32, w *uint8, ldw, kn int, sc *[8]*float32, first, pfd int, out *[8]float32, add bool) {
	dotTile1x8FP8FiniteAVX512(x, w, ldw, kn, sc, first, pfd, &out[0], tileAdd(add))
}

// checkTileOut panics unless out holds m rows of cols sums at a stride of
// ldo, all that an fp8 tile writes.
func checkTileOut(m, cols, ldo int, out []float32) {
	if len(out) < (m-1)*ldo+cols {
		panic(fmt.Sprintf("kernels: fp8 tile of %d rows writes %d values at a stride of %d, have %d", m, cols, ldo, len(out)))
	}
}

// dotTileFP8Rows runs the AVX-512 tile of m (2 ≤ m ≤ 4) activation rows
// over four fp8 weight rows (see fewTileFP8), prefetching each row pfd
// bytes past what it reads, stores (add false) or adds its four sums of row
// i at out[i·ldo:], and reports whether a full 64-byte chunk of codes held
// a NaN code; with finite (codes checked when the matrix was made) it does
// not check them.
func dotTileFP8Rows(m int, x *float32, ldx int, w *uint8, ldw, kn int, sc *[4]*float32, first, pfd int, out []float32, ldo int, add, finite bool) bool {
	checkTileOut(m, 4, ldo, out)
	a, o := tileAdd(add), &out[0]
	switch {
	case m == 2 && finite:
		return dotTile2x4FP8FiniteAVX512(x, ldx, w, ldw, kn, sc, first, pfd, o, ldo, a) != 0
	case m == 2:
		return dotTile2x4FP8AVX512(x, ldx, w, ldw, kn, sc, first, pfd, o, ldo, a) != 0
	case m == 3 && finite:
		return dotTile3x4FP8FiniteAVX512(x, ldx, w, ldw, kn, sc, first, pfd, o, ldo, a) != 0
	case m == 3:
		return dotTile3x4FP8AVX512(x, ldx, w, ldw, kn, sc, first, pfd, o, ldo, a) != 0
	case finite:
		return dotTile4x4FP8FiniteAVX512(x, ldx, w, ldw, kn, sc, first, pfd, o, ldo, a) != 0
	}
	return dotTile4x4FP8AVX512(x, ldx, w, ldw, kn, sc, first, pfd, o, ldo, a) != 0
}

// dotTileFP8Rows3 runs the AVX-512 tile of m (5 ≤ m ≤ 8) activation rows
// over three fp8 weight rows whose codes hold no NaN code (see
// threeTileFP8), prefetching each row pfd bytes past what it reads, and
// stores (add false) or adds its three sums of row i at out[i·ldo:].
func dotTileFP8Rows3(m int, x *float32, ldx int, w *uint8, ldw, kn int, sc *[3]*float32, first, pfd int, out []float32, ldo int, add bool) {
	checkTileOut(m, 3, ldo, out)
	a := tileAdd(add)
	switch m {
	case 5:
		dotTile5x3FP8AVX512(x, ldx, w, ldw, kn, sc, first, pfd, &out[0], ldo, a)
	case 6:
		dotTile6x3FP8AVX512(x, ldx, w, ldw, kn, sc, first, pfd, &out[0], ldo, a)
	case 7:
		dotTile7x3FP8AVX512(x, ldx, w, ldw, kn, sc, first, pfd, &out[0], ldo, a)
	default:
		dotTile8x3FP8AVX512(x, ldx, w, ldw, kn, sc, first, pfd, &out[0], ldo, a)
	}
}

// dotTileFP8Rows8 runs the AVX-512 tile of m (2 ≤ m ≤ eightRowMaxRows)
// activation rows over eight fp8 weight rows whose codes hold no NaN code
// and whose blocks share the scales at sc (see eightTileFP8), prefetching
// each row pfd bytes past what it reads, and stores (add false) or adds its
// eight sums of row i at out[i·ldo:].
func dotTileFP8Rows8(m int, x *float32, ldx int, w *uint8, ldw, kn int, sc *float32, first, pfd int, out []float32, ldo int, add bool) {
	checkTileOut(m, 8, ldo, out)
	a := tileAdd(add)
	if m == 2 {
		dotTile2x8FP8AVX512(x, ldx, w, ldw, kn, sc, first, pfd, &out[0], ldo, a)
		return
	}
	dotTile3x8FP8AVX512(x, ldx, w, ldw, kn, sc, first, pfd, &out[0], ldo, a)
}

// dotTile1x16FP8 is dotTile1x8FP8Finite for two groups of eight weight
// rows, those at wa with the activations at xa and those at wb with the
// activations at xb, each group's rows sharing the block scales at *sc[g]
// and prefetched pfa (group a) or pfb (group b) bytes ahead: group a's sums
// in out[0:8], group b's in out[8:16].
func dotTile1x16FP8(xa, xb *float32, wa, wb *uint8, ldw, kn int, sc *[2]*float32, first, pfa, pfb int, out *[16]float32) {
	dotTile1x16FP8AVX512(xa, xb, wa, wb, ldw, kn, sc, first, pfa, pfb, out)
}

// dotTile1x16FP8Prescaled is dotTile1x16FP8 for activations prescaled by
// their group's power-of-two block scales and 2^120 (prescaleRows): the
// codes are decoded without a multiply, over kn columns in one stretch.
func dotTile1x16FP8Prescaled(xa, xb *float32, wa, wb *uint8, ldw, kn, pfa, pfb int, out *[16]float32) {
	dotTile1x16FP8PrescaledAVX512(xa, xb, wa, wb, ldw, kn, pfa, pfb, out)
}

// dotTile1x16FP8Ilv is dotTile1x16FP8 for two groups of an interleaved
// fp8 matrix (Matrix.InterleaveFP8), each a stream prefetched pfa and pfb
// bytes ahead.
func dotTile1x16FP8Ilv(xa, xb *float32, wa, wb *uint8, kn int, sc *[2]*float32, first, pfa, pfb int, out *[16]float32) {
	dotTile1x16FP8IlvAVX512(xa, xb, wa, wb, kn, sc, first, pfa, pfb, out)
}

// dotTile1x16FP8PrescaledIlv is dotTile1x16FP8Prescaled for two groups of
// an interleaved fp8 matrix.
func dotTile1x16FP8PrescaledIlv(xa, xb *float32, wa, wb *uint8, kn, pfa, pfb int, out *[16]float32) {
	dotTile1x16FP8PrescaledIlvAVX512(xa, xb, wa, wb, kn, pfa, pfb, out)
}

// dotTileFP8Rows8Ilv is dotTileFP8Rows8 for one group of eight rows of an
// interleaved fp8 matrix, the group's stream prefetched pfd bytes ahead.
func dotTileFP8Rows8Ilv(m int, x *float32, ldx int, w *uint8, kn int, sc *float32, first, pfd int, out []float32, ldo int, add bool) {
	checkTileOut(m, 8, ldo, out)
	a := tileAdd(add)
	if m == 2 {
		dotTile2x8FP8IlvAVX512(x, ldx, w, fp8IlvCols, kn, sc, first, pfd, &out[0], ldo, a)
		return
	}
	dotTile3x8FP8IlvAVX512(x, ldx, w, fp8IlvCols, kn, sc, first, pfd, &out[0], ldo, a)
}

// dotTileFP8RowsIlv is dotTileFP8Rows (codes holding no NaN code) for four
// rows of one group of an interleaved fp8 matrix.
func dotTileFP8RowsIlv(m int, x *float32, ldx int, w *uint8, kn int, sc *[4]*float32, first, pfd int, out []float32, ldo int, add bool) {
	checkTileOut(m, 4, ldo, out)
	o, a := &out[0], tileAdd(add)
	switch m {
	case 2:
		dotTile2x4FP8IlvAVX512(x, ldx, w, fp8IlvCols, kn, sc, first, pfd, o, ldo, a)
	case 3:
		dotTile3x4FP8IlvAVX512(x, ldx, w, fp8IlvCols, kn, sc, first, pfd, o, ldo, a)
	default:
		dotTile4x4FP8IlvAVX512(x, ldx, w, fp8IlvCols, kn, sc, first, pfd, o, ldo, a)
	}
}

// dotTileFP8Rows3Ilv is dotTileFP8Rows3 for three rows of an interleaved
// fp8 matrix, the second ldw and the third ldw2 bytes after the first.
func dotTileFP8Rows3Ilv(m int, x *float32, ldx int, w *uint8, ldw, ldw2, kn int, sc *[3]*float32, first, pfd int, out []float32, ldo int, add bool) {
	checkTileOut(m, 3, ldo, out)
	a := tileAdd(add)
	switch m {
	case 5:
		dotTile5x3FP8IlvAVX512(x, ldx, w, ldw, ldw2, kn, sc, first, pfd, &out[0], ldo, a)
	case 6:
		dotTile6x3FP8IlvAVX512(x, ldx, w, ldw, ldw2, kn, sc, first, pfd, &out[0], ldo, a)
	case 7:
		dotTile7x3FP8IlvAVX512(x, ldx, w, ldw, ldw2, kn, sc, first, pfd, &out[0], ldo, a)
	default:
		dotTile8x3FP8IlvAVX512(x, ldx, w, ldw, ldw2, kn, sc, first, pfd, &out[0], ldo, a)
	}
}

// decodeFP8RowIlv is decodeFP8Row on AVX-512 for one row of an
// interleaved fp8 matrix whose codes hold no NaN code, prefetching from pf
// on as it reads.
func decodeFP8RowIlv(dst *float32, w *uint8, kn int, sc *float32, first int, pf *uint8) {
	decodeFP8RowIlvAVX512(dst, w, kn, sc, first, pf)
}

// dotTile1x4FP8 is dotTile1x8FP8 for AVX2: four rows, 32-byte chunks,
// each row prefetched pfd bytes past the codes it reads.
func dotTile1x4FP8(x *float32, w *uint8, ldw, kn int, sc *[4]*float32, first, pfd int, out *[4]float32) bool {
	return dotTile1x4FP8AVX2(x, w, ldw, kn, sc, first, pfd, &out[0], 0) != 0
}

// decodeFP8Row decodes kn (a multiple of vecWidth(l)) codes of one fp8
// weight row into dst with level l's in-register decoding (see
// gemmFP8Decoded), prefetching kn bytes at pf, and reports whether one of
// them was a NaN code.
func decodeFP8Row(l level, dst *float32, w *uint8, kn int, sc *float32, first int, pf *uint8) bool {
	if l == levelAVX512 {
		return decodeFP8RowAVX512(dst, w, kn, sc, first, pf) != 0
	}
	return decodeFP8RowAVX2(dst, w, kn, sc, first, pf) != 0
}

// axpyFast runs Axpy with vectors on an assembly level (the caller checked
// the lengths) and reports whether it did. Elements past the last multiple
// of 64 (32 for AVX2) and calls shorter than that use the scalar loop; long
// calls go in chunks of 64 Ki values so each assembly call stays short.
func axpyFast(alpha float32, x, y []float32) bool {
	l := activeLevel()
	if l == levelRef {
		return false
	}
	step := 64
	if l == levelAVX2 {
		step = 32
	}
	nv := len(x) &^ (step - 1)
	for k := 0; k < nv; k += 1 << 16 {
		c := min(nv-k, 1<<16)
		if l == levelAVX512 {
			axpyAVX512(alpha, &x[k], &y[k], c)
		} else {
			axpyAVX2(alpha, &x[k], &y[k], c)
		}
	}
	for k := nv; k < len(x); k++ {
		y[k] += float32(alpha * x[k])
	}
	return true
}

// axpyTile runs the m-row weighted-row-sum tile of level l: 64 columns on
// AVX-512, 16 on AVX2.
func axpyTile(l level, m int, out *float32, ldo int, p *float32, ldp int, rows *[]float32, n, coff int) {
	if l == levelAVX512 {
		switch m {
		case 1:
			axpyTile1x64F32AVX512(out, ldo, p, ldp, rows, n, coff)
		case 2:
			axpyTile2x64F32AVX512(out, ldo, p, ldp, rows, n, coff)
		case 3:
			axpyTile3x64F32AVX512(out, ldo, p, ldp, rows, n, coff)
		case 4:
			axpyTile4x64F32AVX512(out, ldo, p, ldp, rows, n, coff)
		case 5:
			axpyTile5x64F32AVX512(out, ldo, p, ldp, rows, n, coff)
		default:
			axpyTile6x64F32AVX512(out, ldo, p, ldp, rows, n, coff)
		}
		return
	}
	switch m {
	case 1:
		axpyTile1x16F32AVX2(out, ldo, p, ldp, rows, n, coff)
	case 2:
		axpyTile2x16F32AVX2(out, ldo, p, ldp, rows, n, coff)
	case 3:
		axpyTile3x16F32AVX2(out, ldo, p, ldp, rows, n, coff)
	default:
		axpyTile4x16F32AVX2(out, ldo, p, ldp, rows, n, coff)
	}
}

// axpyTileBF16 is axpyTile over bf16 rows widened in registers.
func axpyTileBF16(l level, m int, out *float32, ldo int, p *float32, ldp int, rows *[]uint16, n, coff int) {
	if l == levelAVX512 {
		switch m {
		case 1:
			axpyTile1x64BF16AVX512(out, ldo, p, ldp, rows, n, coff)
		case 2:
			axpyTile2x64BF16AVX512(out, ldo, p, ldp, rows, n, coff)
		case 3:
			axpyTile3x64BF16AVX512(out, ldo, p, ldp, rows, n, coff)
		case 4:
			axpyTile4x64BF16AVX512(out, ldo, p, ldp, rows, n, coff)
		case 5:
			axpyTile5x64BF16AVX512(out, ldo, p, ldp, rows, n, coff)
		default:
			axpyTile6x64BF16AVX512(out, ldo, p, ldp, rows, n, coff)
		}
		return
	}
	switch m {
	case 1:
		axpyTile1x16BF16AVX2(out, ldo, p, ldp, rows, n, coff)
	case 2:
		axpyTile2x16BF16AVX2(out, ldo, p, ldp, rows, n, coff)
	case 3:
		axpyTile3x16BF16AVX2(out, ldo, p, ldp, rows, n, coff)
	default:
		axpyTile4x16BF16AVX2(out, ldo, p, ldp, rows, n, coff)
	}
}

// qkTileTBF16 is qkTileT with bf16 key rows (dim even).
func qkTileTBF16(qT *float32, ldq, dim int, k0, k1, k2, k3 *uint16, out *float32, ldo, heads, mask int, scale float32) {
	switch (heads + 15) / 16 {
	case 1:
		qkTileT1BF16AVX512(qT, ldq, dim, k0, k1, k2, k3, out, ldo, heads, mask, scale)
	case 2:
		qkTileT2BF16AVX512(qT, ldq, dim, k0, k1, k2, k3, out, ldo, heads, mask, scale)
	case 3:
		qkTileT3BF16AVX512(qT, ldq, dim, k0, k1, k2, k3, out, ldo, heads, mask, scale)
	default:
		qkTileT4BF16AVX512(qT, ldq, dim, k0, k1, k2, k3, out, ldo, heads, mask, scale)
	}
}

// prefetchRowsBF16 starts loading n bytes of four bf16 rows into L1.
func prefetchRowsBF16(r0, r1, r2, r3 *uint16, n int) { prefetchRows4BF16(r0, r1, r2, r3, n) }

// vecWidth is the number of float32 lanes the level's tiles consume per
// step; the reduction length passed to a tile is a multiple of it.
func vecWidth(l level) int {
	if l == levelAVX512 {
		return 16
	}
	return 8
}

// maxTileRows is the tallest dot tile of the level (its register budget).
func maxTileRows(l level) int {
	if l == levelAVX512 {
		return 6
	}
	return 3
}

// vecMax is the largest value of x (len(x) > 0): the leading multiple of
// the level's width through its kernel, the rest in Go.
func vecMax(l level, x []float32) float32 {
	w := vecWidth(l)
	nv := len(x) &^ (w - 1)
	m := x[0]
	switch {
	case nv == 0:
	case l == levelAVX512:
		m = maxAVX512(&x[0], nv)
	default:
		m = maxAVX2(&x[0], nv)
	}
	for _, v := range x[nv:] {
		m = max(m, v)
	}
	return m
}

// expSum replaces x[i] by exp(x[i]−m) and returns their sum: the leading
// multiple of the level's width through its vector polynomial, the rest
// through float64 math.Exp, added after in order.
func expSum(l level, x []float32, m float32) (sum float32) {
	w := vecWidth(l)
	nv := len(x) &^ (w - 1)
	switch {
	case nv == 0:
	case l == levelAVX512:
		sum = expSumAVX512(&x[0], nv, m)
	default:
		sum = expSumAVX2(&x[0], nv, m)
	}
	for i := nv; i < len(x); i++ {
		e := float32(math.Exp(float64(x[i] - m)))
		x[i] = e
		sum += e
	}
	return sum
}

// fmaPeak runs the FMA-peak loop of the widest level the CPU supports for
// rounds rounds and returns the FLOPs it executed (0 without AVX2).
func fmaPeak(rounds int) float64 {
	switch bestLevel() {
	case levelAVX512:
		fmaPeakAVX512(rounds)
		return float64(rounds) * 24 * 16 * 2
	case levelAVX2:
		fmaPeakAVX2(rounds)
		return float64(rounds) * 12 * 8 * 2
	}
	return 0
}

// fp8ProbeCodes are the codes the fp8 probes decode: 17·i, with each
// subnormal code (exponent bits zero, mantissa bits not) given the smallest
// normal exponent instead. A subnormal code decodes through a denormal
// float32, and on some cores (the Intel Xeon of docs/performance-log.md, "An
// Intel host") a multiply with a denormal operand takes a microcode assist
// of about 130 cycles: with three of their four vectors of codes holding
// one, the probes measured the assists and ran 40 times slower. Quantized
// weights hold few subnormal codes (a block's scale maps its largest
// magnitude to 448, and only magnitudes below 2^-6 of the scale are
// subnormal: about one code in 10^4 of Gaussian weights), so the probes
// measure the normal codes.
func fp8ProbeCodes() (codes [64]uint8) {
	for i := range codes {
		codes[i] = uint8(17 * i)
		if codes[i]&0x78 == 0 && codes[i]&0x07 != 0 {
			codes[i] |= 0x08
		}
	}
	return codes
}

// fp8DecodePeak runs the fp8 decode-peak loop of the widest level the CPU
// supports for rounds rounds and returns the codes it decoded (0 without
// AVX2).
func fp8DecodePeak(rounds int) float64 {
	codes := fp8ProbeCodes()
	switch bestLevel() {
	case levelAVX512:
		fp8DecodePeakAVX512(&codes[0], rounds)
		return float64(rounds) * 8 * 16
	case levelAVX2:
		fp8DecodePeakAVX2(&codes[0], rounds)
		return float64(rounds) * 8 * 8
	}
	return 0
}

// fp8ProductProbes are the fp8 product-peak loops of each level, in the
// order of FP8ProductRows, with the codes a round of each decodes.
var fp8ProductProbes = map[level][]struct {
	loop  func(*uint8, *float32, int)
	codes int
}{
	levelAVX512: {{fp8ProductPeakR1AVX512, 8 * 16}, {fp8ProductPeakR2AVX512, 8 * 16}, {fp8ProductPeakR4AVX512, 5 * 16}, {fp8ProductPeakR8AVX512, 3 * 16}},
	levelAVX2:   {{fp8ProductPeakR1AVX2, 6 * 8}, {fp8ProductPeakR2AVX2, 4 * 8}, {fp8ProductPeakR4AVX2, 2 * 8}, {fp8ProductPeakR8AVX2, 1 * 8}},
}

// fp8ProductPeak runs the fp8 product-peak loop for rows activation rows
// (one of FP8ProductRows) of the widest level the CPU supports for rounds
// rounds and returns the codes it decoded (0 without AVX2 or for another
// row count; FP8ProductLoop refuses those first).
func fp8ProductPeak(rows, rounds int) float64 {
	probes, i := fp8ProductProbes[bestLevel()], slices.Index(FP8ProductRows, rows)
	if i < 0 || i >= len(probes) {
		return 0
	}
	codes := fp8ProbeCodes()
	var x [8 * 16]float32
	for k := range x {
		x[k] = float32(k%7) / 8
	}
	probes[i].loop(&codes[0], &x[0], rounds)
	return float64(rounds) * float64(probes[i].codes)
}

// streamFMA is StreamFMA's assembly on one chunk; ok is false without
// AVX-512.
func streamFMA(x []float32, f int) (s float32, ok bool) {
	if bestLevel() != levelAVX512 {
		return 0, false
	}
	nv := len(x) &^ 127
	if nv > 0 {
		switch f {
		case 2:
			s = streamFMA2AVX512(&x[0], nv)
		case 4:
			s = streamFMA4AVX512(&x[0], nv)
		case 8:
			s = streamFMA8AVX512(&x[0], nv)
		case 16:
			s = streamFMA16AVX512(&x[0], nv)
		case 32:
			s = streamFMA32AVX512(&x[0], nv)
		default:
			return 0, false
		}
	}
	for _, v := range x[nv:] {
		s += float32(f) * 0.5 * v
	}
	return s, true
}

// readPairSum sums a and b (of one length, a multiple of 128) read side by
// side; ok is false without AVX-512.
func readPairSum(a, b []float32) (s float32, ok bool) {
	if bestLevel() != levelAVX512 {
		return 0, false
	}
	if len(a) > 0 {
		s = readPairSumAVX512(&a[0], &b[0], len(a))
	}
	return s, true
}

// readSum sums x with the widest loads the CPU supports; ok is false
// without AVX2.
func readSum(x []float32) (s float32, ok bool) {
	switch bestLevel() {
	case levelAVX512:
		nv := len(x) &^ 127
		if nv > 0 {
			s = readSumAVX512(&x[0], nv)
		}
		for _, v := range x[nv:] {
			s += v
		}
		return s, true
	case levelAVX2:
		nv := len(x) &^ 63
		if nv > 0 {
			s = readSumAVX2(&x[0], nv)
		}
		for _, v := range x[nv:] {
			s += v
		}
		return s, true
	}
	return 0, false
}

// qkTileT is the AVX-512 logit tile of up to 64 heads (heads ≤ 64) against
// four key rows with the query transposed (qT[d·ldq + i] is head i's value
// d): out[i·ldo + r] = scale · Σ_d qT[d·ldq+i]·k_r[d], one fused chain in d
// order, for i < heads and the rows r whose bit is set in mask. qT must be
// readable for 16·⌈heads/16⌉ heads.
func qkTileT(qT *float32, ldq, dim int, k0, k1, k2, k3 *float32, out *float32, ldo, heads, mask int, scale float32) {
	switch (heads + 15) / 16 {
	case 1:
		qkTileT1F32AVX512(qT, ldq, dim, k0, k1, k2, k3, out, ldo, heads, mask, scale)
	case 2:
		qkTileT2F32AVX512(qT, ldq, dim, k0, k1, k2, k3, out, ldo, heads, mask, scale)
	case 3:
		qkTileT3F32AVX512(qT, ldq, dim, k0, k1, k2, k3, out, ldo, heads, mask, scale)
	default:
		qkTileT4F32AVX512(qT, ldq, dim, k0, k1, k2, k3, out, ldo, heads, mask, scale)
	}
}

// transpose16 writes the transpose of the 16×16 block at src (rows lds
// elements apart) to dst (rows ldd apart): dst[k·ldd+i] = src[i·lds+k].
func transpose16(src *float32, lds int, dst *float32, ldd int) {
	transpose16x16AVX512(src, lds, dst, ldd)
}

// scaleVec multiplies every value of x by a (one rounded product each, the
// bits of the scalar loop), with AVX-512 under that level.
func scaleVec(l level, x []float32, a float32) {
	nv := 0
	if l == levelAVX512 {
		nv = len(x) &^ 15
		if nv > 0 {
			scaleAVX512(&x[0], nv, a)
		}
	}
	for i := nv; i < len(x); i++ {
		x[i] *= a
	}
}

// qkTileT8 is qkTileT for at most 16 heads against eight key rows (mask
// bits 0–7).
func qkTileT8(qT *float32, ldq, dim int, k *[8]*float32, out *float32, ldo, heads, mask int, scale float32) {
	qkTileT1x8F32AVX512(qT, ldq, dim, k, out, ldo, heads, mask, scale)
}

// qkTileT8BF16 is qkTileT8 with bf16 key rows (dim even).
func qkTileT8BF16(qT *float32, ldq, dim int, k *[8]*uint16, out *float32, ldo, heads, mask int, scale float32) {
	qkTileT1x8BF16AVX512(qT, ldq, dim, k, out, ldo, heads, mask, scale)
}

// prefetchRows starts loading n bytes of four rows into L1.
func prefetchRows(r0, r1, r2, r3 *float32, n int) { prefetchRows4(r0, r1, r2, r3, n) }

// decodeE4M3Fast decodes the longest multiple of 16 (AVX-512) or 8 (AVX2)
// of src and reports how many values it wrote (0 under the reference).
func decodeE4M3Fast(dst []float32, src []byte, scale float32) int {
	switch activeLevel() {
	case levelAVX512:
		nv := len(src) &^ 15
		if nv > 0 {
			decodeE4M3AVX512(&dst[0], &src[0], nv, scale)
		}
		return nv
	case levelAVX2:
		nv := len(src) &^ 7
		if nv > 0 {
			decodeE4M3AVX2(&dst[0], &src[0], nv, scale)
		}
		return nv
	}
	return 0
}

// decodeRecordsFast decodes the records of slots[:n] with AVX-512 or AVX2
// (prefetching those of slots[n:] as it goes) and reports whether it did;
// the caller has checked the slots and sizes.
func decodeRecordsFast(dst []float32, base []byte, lt RecordLayout, slots []int32, n, ahead int) bool {
	switch l := activeLevel(); {
	case l == levelAVX512 && lt.TileCodes%16 == 0 && lt.Rope%16 == 0:
		decodeRecordsAVX512(&dst[0], &base[0], &slots[0], n, len(slots), ahead, lt.Bytes, lt.Tiles, lt.TileCodes, lt.Rope)
	case l == levelAVX2 && lt.TileCodes%8 == 0 && lt.Rope%8 == 0:
		decodeRecordsAVX2(&dst[0], &base[0], &slots[0], n, len(slots), ahead, lt.Bytes, lt.Tiles, lt.TileCodes, lt.Rope)
	default:
		return false
	}
	return true
}

// scoreTile8T is the AVX-512 transposed-query score tile of eight keys (see
// scoreKeysT), prefetching the keys at next as it goes.
func scoreTile8T(qT *float32, stride, dim int, w *float32, k0, k1, k2, k3, k4, k5, k6, k7 *float32, next *[8]*float32, run, out *float32) {
	scoreTile8TAVX512(qT, stride, dim, w, k0, k1, k2, k3, k4, k5, k6, k7, next, run, out)
}

// scoreTile6T is the AVX2 transposed-query score tile of six keys and one
// 16-head half of a group (see scoreKeysT6), prefetching the keys at next
// as it goes.
func scoreTile6T(qT *float32, stride, dim int, w *float32, k0, k1, k2, k3, k4, k5 *float32, next *[6]*float32, run, out *float32) {
	scoreTile6TAVX2(qT, stride, dim, w, k0, k1, k2, k3, k4, k5, next, run, out)
}

// widenBF16Fast widens the longest multiple of 16 (AVX2: 8) of the bf16
// values in src with vectors and reports how many it wrote (0 under the
// reference).
func widenBF16Fast(dst []float32, src []byte) int {
	switch activeLevel() {
	case levelAVX512:
		nv := (len(src) / 2) &^ 15
		if nv > 0 {
			widenBF16AVX512(&dst[0], &src[0], nv)
		}
		return nv
	case levelAVX2:
		nv := (len(src) / 2) &^ 7
		if nv > 0 {
			widenBF16AVX2(&dst[0], &src[0], nv)
		}
		return nv
	}
	return 0
}

// scoreTiles8T32 is scoreTile8T for a query of one 32-head group over the
// whole tiles of eight keys from the header at keys to the one at end, the
// scores to out (see scoreKeysT).
func scoreTiles8T32(qT *float32, dimBytes int, w *float32, keys, end *[]float32, out *float32) {
	scoreTiles8T32AVX512(qT, dimBytes, w, keys, end, out)
}

// siluMul computes dst[i] = SiLU(gate[i])·up[i] over the whole groups of
// eight of gate with every |gate| ≤ 30, stopping before the first other
// group, and returns how many values it did (len(gate) a multiple of 8).
func siluMul(dst, gate, up []float32) int {
	if len(gate) == 0 {
		return 0
	}
	return siluMulAVX512(&dst[0], &gate[0], &up[0], len(gate))
}

// topkKeepFast is topkKeep over the whole blocks of 64 scores on AVX-512
// (topkKeepAVX512): it returns how many it kept, −1 when more than
// topkCandMax−64 were kept before a block, and how many scores it covered
// (none on other levels, which topkKeepRef does whole).
func topkKeepFast(idx *[topkCandMax]uint32, scores []float32, thr float32) (kept, done int) {
	nb := len(scores) &^ 63
	if nb == 0 || activeLevel() != levelAVX512 {
		return 0, 0
	}
	return topkKeepAVX512(&scores[0], nb, thr, &idx[0], topkCandMax-64), nb
}

// expShifted computes dst[i] = math.Exp((float64(x[i]) − shift)·scale) over
// the whole groups of eight of x whose arguments lie within ±708 or below
// −746, stopping before the first other group, and returns how many values
// it did (len(x) a multiple of 8).
func expShifted(dst []float64, x []float32, shift, scale float64) int {
	if len(x) == 0 {
		return 0
	}
	return expShiftedAVX512(&dst[0], &x[0], len(x), shift, scale)
}

// cpuVendor is the CPU's vendor string ("GenuineIntel", "AuthenticAMD", …),
// for the choices between walks of equal bits whose speed differs by core
// design.
var cpuVendor = func() string {
	b, d, c := cpuVendorID()
	var s [12]byte
	for i, r := range []uint32{b, d, c} {
		for j := range 4 {
			s[4*i+j] = byte(r >> (8 * j))
		}
	}
	return string(s[:])
}()
