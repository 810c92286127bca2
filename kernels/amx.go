package kernels

import (
	"math"

	"github.com/cpmla/cpmla/internal/freelist"
)

// AMX products of bf16 weights (the avx512-amx implementation).
//
// A float32 activation x is split exactly into three bf16 pieces: hi is x
// with its low sixteen bits cleared, mid the same of x − hi, and lo the
// bf16 of x − hi − mid, which has at most eight significant bits left and so
// is exact. A weight times a piece is exact in float32; TDPBF16PS adds a
// tile row's 32 products to each float32 sum, chunk after chunk in column
// order, and an output is (S_hi + S_mid) + S_lo of the three pieces' sums
// over the whole row. How the tile adds a chunk's products is the
// hardware's own and not modelled here, but it depends only on the chunk's
// values in their positions, never on the other rows and columns of the
// tiles: so an output has the same bits for a row alone, in any batch, on
// any number of threads and in either layout (TestAMXProducts), and agrees
// with the float64 oracle as closely as a float32 dot product does. The tiles treat
// bf16 inputs below the normal range (about 1.2e-38) as zero and flush
// sums that small to zero; an infinite or NaN activation is its hi piece
// alone, so that it stays infinite or NaN.

// amxSlabRows is the most activation rows one slab call takes: eight rows'
// three pieces fill two piece tiles (sixteen and eight columns).
const amxSlabRows = 8

// amxOneTileRows is the most rows whose pieces fit one piece tile
// (3·rows ≤ 16 columns).
const amxOneTileRows = 5

// amxPieceWords is the length of a slab's pieces for in columns (rounded
// up to whole chunks of 32) and n rows: three bf16 values per row and
// column.
func amxPieceWords(n, in int) int { return 3 * n * amxChunks(in) * 32 }

// amxChunks is the number of 32-column chunks that hold in columns.
func amxChunks(in int) int { return (in + 31) / 32 }

// bf16Pieces splits x into its three bf16 pieces (see above).
func bf16Pieces(x float32) (hi, mid, lo uint16) {
	b := math.Float32bits(x)
	if b&0x7f800000 == 0x7f800000 {
		if b&0x7fffff != 0 {
			return uint16(b>>16) | 0x40, 0, 0 // NaN stays NaN whatever its payload
		}
		return uint16(b >> 16), 0, 0
	}
	hi = uint16(b >> 16)
	r := x - math.Float32frombits(uint32(hi)<<16)
	mid = uint16(math.Float32bits(r) >> 16)
	r -= math.Float32frombits(uint32(mid) << 16)
	return hi, mid, uint16(math.Float32bits(r) >> 16)
}

// amxPieces writes the pieces of activation rows x[r·ldx+k] (r < n ≤
// amxSlabRows, k < in) in the layout the slab tiles read, columns past in
// up to a whole chunk as zeros. Per chunk of 32 columns (3·n·32 words):
// sixteen rows, row i holding the pairs (column i, column i+16) of every
// piece, hi of rows 0…n−1 first, then mid, then lo. With more than
// amxOneTileRows rows the lo pairs form a tile of their own after the
// sixteen rows of hi and mid pairs.
func amxPieces(dst []uint16, x []float32, ldx, n, in int) {
	dst = dst[:amxPieceWords(n, in)]
	row, loBase, loRow, loCol := 6*n, 0, 6*n, 4*n
	if n > amxOneTileRows {
		row, loBase, loRow, loCol = 4*n, 64*n, 2*n, 0
	}
	var pad [32]float32
	first := 0
	if activeLevel() == levelAVX512 && in >= 32 {
		// Whole chunks in assembly, the padded last one below.
		first = in / 32
		for r := range n {
			amxPiecesRow(x[r*ldx:r*ldx+32*first], dst[2*r:], dst[2*(n+r):], dst[loBase+loCol+2*r:], 2*row, 2*loRow, 192*n)
		}
	}
	for c := first; c < amxChunks(in); c++ {
		chunk := dst[c*96*n : (c+1)*96*n]
		for r := range n {
			xr := x[r*ldx+32*c : r*ldx+min(in, 32*c+32)]
			if len(xr) < 32 {
				clear(pad[copy(pad[:], xr):])
				xr = pad[:]
			}
			for i := range 16 {
				for e, v := range [2]float32{xr[i], xr[i+16]} {
					hi, mid, lo := bf16Pieces(v)
					chunk[i*row+2*r+e] = hi
					chunk[i*row+2*(n+r)+e] = mid
					chunk[loBase+i*loRow+loCol+2*r+e] = lo
				}
			}
		}
	}
}

// amxSums is where a slab call leaves one pair's sums: for each of its two
// groups, eight weight rows of 3·n sums (hi, mid and lo of each activation
// row).
type amxSums [2 * ilvRows * 3 * amxSlabRows]float32

// output is the output (activation row r, weight row j) of the pair's
// group g: (S_hi + S_mid) + S_lo.
func (s *amxSums) output(n, g, j, r int) float32 {
	o := s[(g*ilvRows+j)*3*n:]
	return (o[r] + o[n+r]) + o[2*n+r]
}

// amxScratch is one walk's pieces, sums and packed weight chunks. A
// prompt's slabs keep their sums in block across the reduction blocks of a
// block of groups.
type amxScratch struct {
	pieces []uint16
	sums   [amxCallPairs]amxSums
	block  [amxChunkRows / amxSlabRows][amxCallPairs]amxSums
	pack   [2 * ilvRows * amxPackCols]uint16
}

var amxScratches = freelist.New[amxScratch](8, nil)

// amxCallPairs is the most pairs of groups one slab call takes: the tiles
// are configured once per call, and the pairs' sums (1.5 KiB each) stay in
// L1 until they are written out.
const amxCallPairs = 16

// amxPackCols is how many columns of a row-major matrix's two groups are
// packed into the interleaved layout per slab call.
const amxPackCols = 256

// amxChunkRows is how many activation rows a prompt's walk splits into
// pieces at a time; every block of weight groups is read by all of them,
// so the weights stream from memory once per chunk.
const amxChunkRows = 128

// amxBlockCols is how many columns of a prompt's block of groups its slabs
// take before the next slab's turn: 128 rows' pieces of them (768 KiB), 32
// groups of them (512 KiB) and the sixteen slabs' sums (384 KiB) stay in L2
// while every slab reads them.
const amxBlockCols = 1024

// gemmRangeAMX computes output columns [j0, j1) (j0 a multiple of 8) of
// dst = x·wᵀ for a bf16 matrix, interleaved or row-major, on the AMX slab
// tiles. Decode-sized products (up to amxSlabRows rows) stream the weights
// once, pairs of groups at a time over the whole reduction. Larger ones go
// amxChunkRows rows at a time over blocks of up to 2·amxCallPairs groups,
// and each block amxBlockCols columns at a time: every slab of the chunk
// takes those columns of the whole block before the next columns, its sums
// carried from block to block of columns. A slab's sums are its tiles' own,
// continued where they stopped, so the outputs have the bits of one pass
// over the whole reduction.
func gemmRangeAMX(dst, x []float32, n int, w *Matrix, j0, j1 int) {
	in, out := w.Cols, w.Rows
	if in == 0 {
		for i := range n {
			clear(dst[i*out+j0 : i*out+j1])
		}
		return
	}
	s := amxScratches.Get()
	defer amxScratches.Put(s)
	g0, g1 := j0/ilvRows, (j1+ilvRows-1)/ilvRows
	if n <= amxSlabRows {
		pieces := amxSlabPieces(s, x, n, in)
		for g := g0; g < g1; {
			// Up to amxCallPairs pairs of groups per call; an odd last
			// group goes alone (as both of its pair).
			pairs := amxPairs(w, g, g1)
			amxGroups(s, s.sums[:], w, pieces, n, g, pairs, g+1 < g1, 0, in)
			amxOutputs(dst, s.sums[:], n, out, g, pairs, g1, j1)
			g += 2 * pairs
		}
		return
	}
	blockGroups := 2 * amxCallPairs
	for c0 := 0; c0 < n; c0 += amxChunkRows {
		c1 := min(n, c0+amxChunkRows)
		s.growPieces(c1-c0, in)
		for r0 := c0; r0 < c1; r0 += amxSlabRows {
			m := min(amxSlabRows, c1-r0)
			amxPieces(s.pieces[amxPieceWords(r0-c0, in):], x[r0*in:], in, m, in)
		}
		for b0 := g0; b0 < g1; b0 += blockGroups {
			b1 := min(g1, b0+blockGroups)
			for k0 := 0; k0 < in; k0 += amxBlockCols {
				k1 := min(in, k0+amxBlockCols)
				for r0 := c0; r0 < c1; r0 += amxSlabRows {
					m := min(amxSlabRows, c1-r0)
					pieces := s.pieces[amxPieceWords(r0-c0, in):]
					sums := s.block[(r0-c0)/amxSlabRows][:]
					for g := b0; g < b1; {
						pairs := amxPairs(w, g, b1)
						amxGroups(s, sums[(g-b0)/2:], w, pieces, m, g, pairs, g+1 < b1, k0, k1)
						g += 2 * pairs
					}
				}
			}
			for r0 := c0; r0 < c1; r0 += amxSlabRows {
				m := min(amxSlabRows, c1-r0)
				amxOutputs(dst[r0*out:], s.block[(r0-c0)/amxSlabRows][:], m, out, b0, (b1-b0+1)/2, b1, j1)
			}
		}
	}
}

// growPieces makes s.pieces hold the pieces of n rows of in values.
func (s *amxScratch) growPieces(n, in int) {
	if need := amxPieceWords(n, in); cap(s.pieces) < need {
		s.pieces = make([]uint16, need)
	}
}

// amxSlabPieces writes a decode slab's pieces (n ≤ amxSlabRows rows of in
// values) into s and returns them.
func amxSlabPieces(s *amxScratch, x []float32, n, in int) []uint16 {
	s.growPieces(n, in)
	amxPieces(s.pieces, x, in, n, in)
	return s.pieces
}

// amxPairs is how many pairs of groups from g on (up to g1) one slab call
// takes: up to amxCallPairs of an interleaved matrix, one of a packed one,
// and an odd last group alone.
func amxPairs(w *Matrix, g, g1 int) int {
	pairs := min(amxCallPairs, (g1-g)/2)
	if pairs == 0 || !w.interleaved {
		pairs = 1
	}
	return pairs
}

// amxOutputs writes the outputs of m slab rows (rows of dst, out values
// apart) from the sums of pairs pairs of groups from group g on, groups
// below g1 and columns below j1.
func amxOutputs(dst []float32, sums []amxSums, m, out, g, pairs, g1, j1 int) {
	for q := range pairs {
		for k := range 2 {
			grp := g + 2*q + k
			if grp >= g1 {
				break
			}
			rows := min(ilvRows, j1-grp*ilvRows)
			for r := range m {
				d := dst[r*out+grp*ilvRows:][:rows]
				for j := range d {
					d[j] = sums[q].output(m, k, j, r)
				}
			}
		}
	}
}

// amxGroups leaves in sums the sums of slab rows (m of them, pieces) by
// pairs pairs of groups from group g on (g alone, as both of its pair, when
// !two) over columns [k0, k1) (k0 a multiple of amxPackCols), carried on
// from the sums already there when k0 > 0: from the matrix itself when it
// is interleaved, else (one pair) packed into that layout amxPackCols
// columns at a time, rows past the matrix's last and columns past its last
// as zeros.
func amxGroups(s *amxScratch, sums []amxSums, w *Matrix, pieces []uint16, m, g, pairs int, two bool, k0, k1 int) {
	in := w.Cols
	if w.interleaved {
		gstride := 0
		if two {
			gstride = 2 * ilvRows * in
		}
		amxSlab(m, &w.BF16[g*ilvRows*in+k0*ilvRows], gstride, pairs, 4*ilvRows*in, &pieces[k0/32*96*m], amxChunks(k1-k0), sums, k0 > 0)
		return
	}
	gb := g
	if two {
		gb = g + 1
	}
	var chunk [ilvCols]uint16
	for c0 := k0; c0 < k1; c0 += amxPackCols {
		kc := min(amxPackCols, k1-c0)
		for h, grp := range [2]int{g, gb} {
			for j := range ilvRows {
				jr := grp*ilvRows + j
				for c := 0; c < kc; c += ilvCols {
					clear(chunk[:])
					if jr < w.Rows {
						copy(chunk[:], w.BF16[jr*in+c0+c:jr*in+c0+min(kc, c+ilvCols)])
					}
					ilvPack(s.pack[h*ilvRows*amxPackCols+c*ilvRows+j*ilvCols:], chunk[:])
				}
			}
		}
		amxSlab(m, &s.pack[0], 2*ilvRows*amxPackCols, 1, 0, &pieces[c0/32*96*m], amxChunks(kc), sums, c0 > 0)
	}
}
