package kernels

import (
	"math"

	"github.com/cpmla/cpmla/internal/freelist"
	"github.com/cpmla/cpmla/numfmt"
)

// The fast Linear layer. Output element (i, j) is the dot product of
// activation row i and weight row j computed by one assembly tile lane:
// the reduction runs over blocks of gemmKC elements in ascending order; in a
// block, products are fused into vecWidth lanes, the lanes are summed by the
// tile's fixed tree, the block's scalar tail (len mod vecWidth, last block
// only) is added in order, and the block sums are added to the output in
// block order. None of this depends on n, on i, or on which rows share a
// tile or a thread, so a row's result has the same bits alone or in any
// batch, under any SetThreads value.

const (
	// gemmKC is the reduction block: a tile's six activation rows of it
	// (f32, 24 KiB) stay in the L1 data cache while the weight rows of the
	// block stream from L2 (measured best of 256…6144 at GLM-5 shapes).
	gemmKC = 1024
	// gemmBlockBytes bounds the block of weight rows all activation rows
	// pass over before the next block is read (about a quarter of L2).
	gemmBlockBytes = 256 << 10
)

// gemmTask is one parallel MatMulT call; parts split the weight rows.
type gemmTask struct {
	dst, x []float32
	n      int
	w      *Matrix
	l      level
	join   joiner
}

var gemmTasks = make(chan *gemmTask, 64)

// matMulTFast runs MatMulT on the active assembly level and reports whether
// it did (false: the caller runs the reference).
func matMulTFast(dst, x []float32, n int, w *Matrix) bool {
	l := activeLevel()
	if l == levelRef {
		return false
	}
	if n == 0 || w.Rows == 0 {
		return true
	}
	flops := 2 * float64(n) * float64(w.Rows) * float64(w.Cols)
	parts := planParts((w.Rows+w.rowAlign()-1)/w.rowAlign(), flops)
	if parts == 1 {
		gemmRange(dst, x, n, w, l, 0, w.Rows)
		return true
	}
	var t *gemmTask
	select {
	case t = <-gemmTasks:
	default:
		t = new(gemmTask)
	}
	t.dst, t.x, t.n, t.w, t.l = dst, x, n, w, l
	runParts(t, parts, &t.join)
	t.dst, t.x, t.w = nil, nil, nil
	select {
	case gemmTasks <- t:
	default:
	}
	return true
}

func (t *gemmTask) runPart(p, parts int) {
	j0, j1 := partRange(t.w.Rows, t.w.rowAlign(), p, parts)
	gemmRange(t.dst, t.x, t.n, t.w, t.l, j0, j1)
}

// f32Rows is where a tile finds f32 weight rows: element (j, k) of the
// weight is v[(j-j0)*ld + k-k0]. For an F32 matrix it is the matrix itself;
// for an FP8 matrix it is a panel that rows [j0, …) and columns [k0, …) were
// dequantized into, with the values Matrix.Row gives.
type f32Rows struct {
	v          []float32
	j0, k0, ld int
}

// at is the address of element (j, k).
func (p *f32Rows) at(j, k int) *float32 { return &p.v[(j-p.j0)*p.ld+k-p.k0] }

// gemmRange computes output columns [j0, j1) of dst = x·wᵀ for all n rows.
func gemmRange(dst, x []float32, n int, w *Matrix, l level, j0, j1 int) {
	switch {
	case w.FP8 != nil:
		gemmRangeFP8(dst, x, n, w, l, j0, j1)
		return
	case w.BF16 != nil && l == levelAVX512 && amxActive():
		gemmRangeAMX(dst, x, n, w, j0, j1)
		return
	case w.interleaved:
		gemmRangeIlv(dst, x, n, w, l, j0, j1)
		return
	}
	in := w.Cols
	mr := maxTileRows(l)
	var p *f32Rows
	if w.F32 != nil {
		p = &f32Rows{v: w.F32, ld: in}
	}
	if n > 1 && n <= skinnyMaxRows && l == levelAVX512 && in > 0 {
		// Decode-sized: whole groups of four weight rows through
		// gemmSkinny, the fewer than four rows left by tiles.
		jt := gemmSkinny(dst, x, n, w, p, l, j0, j1)
		if jt < j1 {
			for k0 := 0; k0 < in; k0 += gemmKC {
				for i0 := 0; i0 < n; i0 += mr {
					gemmTile(dst, x, n, w, p, l, i0, jt, j1-jt, k0)
				}
			}
		}
		return
	}
	if n <= mr {
		// One activation tile: walk each group of four weight rows through
		// all reduction blocks before the next, so the rows stream from
		// memory front to back (the per-element order is unchanged).
		jt := j0
		if n == 1 && in > 0 {
			// GEMV: eight weight rows per call keep eight streams (and eight
			// FMA chains) in flight.
			for ; jt+8 <= j1; jt += 8 {
				for k0 := 0; k0 < in; k0 += gemmKC {
					gemvTile8(dst, x, w, p, l, jt, k0)
				}
			}
		}
		for ; jt < j1; jt += 4 {
			for k0 := 0; k0 < in || k0 == 0; k0 += gemmKC {
				gemmTile(dst, x, n, w, p, l, 0, jt, min(4, j1-jt), k0)
				if in == 0 {
					break
				}
			}
		}
		return
	}
	jb := max(4, (gemmBlockBytes/(max(1, min(in, gemmKC))*w.bytesPerWeight()))&^3)
	for b0 := j0; b0 < j1; b0 += jb {
		b1 := min(b0+jb, j1)
		for k0 := 0; k0 < in || k0 == 0; k0 += gemmKC {
			blockStrips(dst, x, n, w, p, l, b0, b1, k0)
			if in == 0 {
				break
			}
		}
	}
}

// passRows is how many of the r activation rows left the next pass of
// level l over a group of weight rows takes: at most maxTileRows(l), as even
// a share as the passes allow (eight rows on AVX-512 as four and four keep
// sixteen FMA chains in flight in both passes where six and two leave the
// second pass eight). Which rows share a tile never changes an output's bits.
func passRows(l level, r int) int { return evenPass(maxTileRows(l), r) }

// tileAdd is a tile's add argument for the reduction block at k0 > 0 or
// k0 = 0: 1 to add its sums to the output, 0 to store them.
func tileAdd(add bool) int {
	if add {
		return 1
	}
	return 0
}

// evenPass is how many of r activation rows the next pass of a tile that
// takes at most mr rows takes: as even a share as the passes allow.
func evenPass(mr, r int) int {
	passes := (r + mr - 1) / mr
	return (r + passes - 1) / passes
}

// groupIlvMaxRows is the most activation rows groupBF16Ilv takes: three
// rows by a group of eight weight rows fill 24 accumulators, and the three
// rows' two activation vectors per chunk six more.
const groupIlvMaxRows = 3

// groupAcc holds one pass's unreduced accumulators of the group tiles
// between the calls that share a reduction block: groupIlvMaxRows rows by
// ilvRows weight rows, sixteen lanes each.
type groupAcc [groupIlvMaxRows * ilvRows * 16]float32

// The group tiles' carry argument: carryIn starts from the accumulators a
// call before left, carryOut leaves them for a call after.
const (
	carryIn  = 1
	carryOut = 2
)

// groupL1Bytes is how much a call of the group tiles may read that its
// later passes read again: every pass's activation rows (four bytes a value)
// and the group's weights (two bytes a value of each of eight rows). A
// reduction block of up to eight rows (48 KiB over 1,024 values) is one call
// a pass; a taller one is split into calls of fewer values, each pass
// carrying its accumulators from one call to the next. On a Zen 5 core
// (48 KiB of L1) splitting sixteen rows' blocks in two made their products
// 10–16 % faster (medians of five rounds), and splitting eight rows' 4–18 %
// slower (docs/performance-log.md, "Sixteen rows' blocks in halves").
var groupL1Bytes = 48 << 10

// groupSubCols is how many values of a reduction block one call of the group
// tiles takes for n activation rows: the largest power of two up to gemmKC
// that keeps the call within groupL1Bytes, at least a chunk of ilvCols.
func groupSubCols(n int) int {
	fit := min(gemmKC, groupL1Bytes/(4*n+2*ilvRows))
	sub := ilvCols
	for sub*2 <= fit {
		sub *= 2
	}
	return sub
}

// skinnyMaxRows bounds the activation rows gemmSkinny takes: decode
// batches and speculative rounds. Each group of four weight rows passes over
// every activation row's reduction block (at most 64 KiB of f32 values,
// from L2) while its own block stays in L1; taller products go a block of
// weight rows at a time, the activation tiles read from L1 instead.
const skinnyMaxRows = 16

// skinnyGroups is how many groups of four weight rows a strip call of
// gemmSkinny takes: sixteen rows keep sixteen weight streams in flight and
// their block (32 KiB of bf16) in L1 between passes (measured best of 1, 2
// and 4 on GLM-5's q_a shape at 2 to 16 rows).
const skinnyGroups = 4

// gemmSkinny computes, on AVX-512, the whole groups of four weight rows in
// [j0, j1) for all n (2 ≤ n ≤ skinnyMaxRows) activation rows and returns the
// first row it left (j1 minus fewer than four). Each group walks the
// reduction blocks in order and, in each block, the activation rows in
// passes of passRows rows (one strip call each), so its weights are read
// from memory once, front to back, and from L1 by the later passes; every
// weight line read prefetches the line the group reads next (its next block
// or, after its last, the first block of the next group). Every output is
// the tiles' per-element arithmetic: the same bits as any other grouping.
// A block with a scalar tail goes through gemmTile.
func gemmSkinny(dst, x []float32, n int, w *Matrix, p *f32Rows, l level, j0, j1 int) int {
	in, out := w.Cols, w.Rows
	bpw := w.bytesPerWeight()
	ld := in
	if p != nil {
		ld = p.ld
	}
	jt := j0
	for jt+4 <= j1 {
		g := min(skinnyGroups, (j1-jt)/4)
		for k0 := 0; k0 < in; k0 += gemmKC {
			kc := min(k0+gemmKC, in) - k0
			if kc%vecWidth(l) != 0 {
				for c := range g {
					for i0 := 0; i0 < n; {
						m := passRows(l, n-i0)
						gemmTile(dst, x, i0+m, w, p, l, i0, jt+4*c, 4, k0)
						i0 += m
					}
				}
				continue
			}
			pfd := gemmKC * bpw
			if k0+gemmKC >= in {
				pfd = (4*g*ld - in + gemmKC) * bpw
			}
			add := tileAdd(k0 > 0)
			for i0 := 0; i0 < n; {
				m := passRows(l, n-i0)
				xp, d := &x[i0*in+k0], &dst[i0*out+jt]
				if p != nil {
					stripF32(l, m, xp, in, p.at(jt, k0), p.ld, g, kc, d, out, add, pfd)
				} else {
					stripBF16(l, m, xp, in, &w.BF16[jt*in+k0], in, g, kc, d, out, add, pfd)
				}
				i0 += m
			}
		}
		jt += 4 * g
	}
	return jt
}

// rowAlign is the multiple of rows the parts of a product take: whole groups
// of four weight rows, of eight for an interleaved matrix.
func (w *Matrix) rowAlign() int {
	if w.interleaved || w.fp8Ilv || w.BF16 != nil && amxActive() {
		return ilvRows
	}
	return 4
}

// gemmRangeIlv is gemmRange for a bf16 matrix in the interleaved layout of
// InterleaveBF16 (j0 and j1 multiples of 8, Cols a positive multiple of
// 16, so no block has a scalar tail). On AVX-512 the tiles read that
// layout as they find it: one activation row through dotTile1x16BF16Ilv,
// two groups of eight at a time (an odd one through dotTile1x8BF16Ilv);
// eight rows (a decode batch of eight) through pairsIlv, a pair of weight
// rows by all eight activation rows; other rows up
// to skinnyMaxRows through groupBF16Ilv, a group of eight by up to
// three activation rows, each group's block
// staying in L1 while the passes of activation rows go over it; more, up
// to promptGroupsMinRows, through the four-row strips, a block of weight rows
// at a time, as gemmRange does; a prompt's rows through gemmIlvGroups.
// Every output has the per-element arithmetic of the row-major tiles, so
// the bits are the same. Other levels widen the rows a block at a time into
// the f32 panel, whose tiles have that arithmetic too.
func gemmRangeIlv(dst, x []float32, n int, w *Matrix, l level, j0, j1 int) {
	if l != levelAVX512 {
		buf := panelBufs.Get()
		defer panelBufs.Put(buf)
		gemmRangePanel(dst, x, n, w, l, buf, j0, j1)
		return
	}
	in, out := w.Cols, w.Rows
	if n == 1 {
		// Two streams: group g of the range with group g+half, each
		// reduction block of both in one call. A single stream front to
		// back left the one-row product 5–23 % slower on a Zen 5 core
		// (docs/performance-log.md, "Two streams for a one-row product").
		pairs, half, mid := pairedGroups((j1 - j0) / ilvRows)
		var pair [16]float32
		for g := range pairs {
			ja, jb := j0+g*ilvRows, j0+(g+half)*ilvRows
			da, db := dst[ja:ja+ilvRows:ja+ilvRows], dst[jb:jb+ilvRows:jb+ilvRows]
			for k0 := 0; k0 < in; k0 += gemmKC {
				dotTile1x16BF16Ilv(&x[k0], &w.BF16[ilvAt(in, ja, k0)], &w.BF16[ilvAt(in, jb, k0)], min(gemmKC, in-k0), &pair)
				addBlock(da, pair[:ilvRows], k0 == 0)
				addBlock(db, pair[ilvRows:], k0 == 0)
			}
		}
		if mid >= 0 {
			jt := j0 + mid*ilvRows
			d := dst[jt : jt+ilvRows : jt+ilvRows]
			var tile [8]float32
			for k0 := 0; k0 < in; k0 += gemmKC {
				dotTile1x8BF16Ilv(&x[k0], &w.BF16[ilvAt(in, jt, k0)], min(gemmKC, in-k0), &tile)
				addBlock(d, tile[:], k0 == 0)
			}
		}
		return
	}
	if n <= skinnyMaxRows {
		// Each group of eight rows walks its reduction blocks in order and,
		// in each block, the activation rows in passes of at most
		// groupIlvMaxRows (two or three: n ≥ 2 here, and evenPass never
		// leaves one row), each pass one call over the whole group that
		// reads the block front to back (the first from L2, the later ones
		// from L1). Every pass prefetches its share of the block the next
		// call reads (panelNext: the next block of the group or, in a walk
		// of panels, the panel's next group) into L2, whole lines per 512
		// bytes it reads, so that memory streams while the passes compute.
		// A block too big for L1 with all the rows (groupSubCols: above
		// eight rows) goes in calls of fewer values, each pass's
		// accumulators carried across them, so its bits stay the same.
		// Reading each half of a group as every other 256 bytes, as the
		// four-row strips do, streamed 20–40 % slower on a Zen 5 core
		// (docs/performance-log.md, "Back on a Zen 5 host: whole groups of
		// interleaved rows").
		passes := (n + groupIlvMaxRows - 1) / groupIlvMaxRows
		pfl := (ilvRows + passes - 1) / passes
		// Where the walk goes group by group (no panels), a group of the
		// first half and one of the second take turns block by block, so
		// that two streams are in flight (pairedWalk).
		var accs [(skinnyMaxRows + groupIlvMaxRows - 1) / groupIlvMaxRows]groupAcc
		sub := groupSubCols(n)
		tile := func(jt, k0, nj, nk int) {
			kc := min(gemmKC, in-k0)
			if n == pairIlvRows {
				pairsIlv(dst, x, w, jt, k0, kc, nj, nk)
				return
			}
			for s0 := 0; s0 < kc; s0 += sub {
				sn, at := min(sub, kc-s0), ilvAt(in, jt, k0+s0)
				block, carry := 0, 0
				if s0 > 0 {
					carry |= carryIn
				}
				if s0+sn < kc {
					carry |= carryOut
					block = 2 * ilvRows * sn
				} else if nj < w.Rows {
					block = 2 * (ilvAt(in, nj, nk) - at)
				}
				for p, i0 := 0, 0; i0 < n; p++ {
					m := evenPass(groupIlvMaxRows, n-i0)
					groupBF16Ilv(m, &x[i0*in+k0+s0], in, &w.BF16[at], sn, &dst[i0*out+jt], out, tileAdd(k0 > 0), block+p*pfl*sn*2, pfl, &accs[p], carry)
					i0 += m
				}
			}
		}
		if productPanel(groupPanelXBytes(n), n, in, ilvRows) == ilvRows {
			pairedWalk(in, j0, j1, ilvRows, tile)
		} else {
			panelWalkAbove(groupPanelXBytes(n), n, in, j0, j1, ilvRows, tile)
		}
		return
	}
	if n >= promptGroupsMinRows {
		// A prompt's rows: groups of eight weight rows widened into L1,
		// read by the activation rows a chunk at a time from L2.
		buf := panelBufs.Get()
		defer panelBufs.Put(buf)
		gemmIlvGroups(dst, x, n, w, buf, j0, j1)
		return
	}
	jb := max(ilvRows, (gemmBlockBytes/(min(in, gemmKC)*2))/ilvRows*ilvRows)
	for b0 := j0; b0 < j1; b0 += jb {
		b1 := min(b0+jb, j1)
		for k0 := 0; k0 < in; k0 += gemmKC {
			for i0, m := 0, 0; i0 < n; i0 += m {
				m = passRows(l, n-i0)
				for jt := b0; jt < b1; jt += ilvRows {
					stripBF16Ilv(m, &x[i0*in+k0], in, &w.BF16[ilvAt(in, jt, k0)], 2, min(gemmKC, in-k0), &dst[i0*out+jt], out, tileAdd(k0 > 0), 0, 0)
				}
			}
		}
	}
}

// pairIlvRows is the decode batch (activation rows) whose interleaved bf16
// products go through pairsIlv rather than the group tiles' passes: eight,
// the rows the pair tile holds, on Intel cores, and none elsewhere. The
// two walks give the same bits. On an Intel core the widening of the
// weights takes the ports its FMAs need, so widening each line once for
// all eight rows pays; a Zen 5 core widens on other pipes, and there the
// pairs streamed 11–14 % slower than the passes (level in L2:
// docs/performance-log.md, "Eight decode rows: the walk by the core, on a
// Zen 5 host"). A variable so that a benchmark can time either walk.
var pairIlvRows = pairWalkRows(cpuVendor)

// pairWalkRows is pairIlvRows on a CPU of the vendor string vendor.
func pairWalkRows(vendor string) int {
	if vendor == "GenuineIntel" {
		return 8
	}
	return 0
}

// pairsIlv computes group jt's reduction block at k0 (kc values) of an
// interleaved bf16 product for pairIlvRows activation rows, a pair of
// weight rows at a time (pairBF16Ilv), each pair call prefetching its
// quarter of the block the walk reads next, group nj's at nk (none past
// the last row), into L2. Each weight line is widened once for all eight
// rows where the group tiles' passes (three, three and two rows) widen it
// three times, on the ports an Intel core's FMAs need: on an Intel Xeon
// core eight rows' products computed 14–16 % faster so in L2 and streamed
// 2–4 % faster from memory, and batch-8 bf16 decode steps ran 6–15 %
// faster in six of eight cases (docs/performance-log.md, "Eight decode rows a
// pair of weight rows at a time, on the Intel host"). The eight rows' block
// (32 KiB of f32) stays in L1 while the four pairs go by; the bits are the
// group tiles'.
func pairsIlv(dst, x []float32, w *Matrix, jt, k0, kc, nj, nk int) {
	in, out := w.Cols, w.Rows
	at := ilvAt(in, jt, k0)
	next, lines := 0, 0
	if nj < out {
		next, lines = 2*(ilvAt(in, nj, nk)-at), 2
	}
	for p := range ilvRows / 2 {
		// Pair p's lines start 128·p bytes into the group's chunks, its
		// quarter of the next block 4·kc·p bytes into that block.
		pairBF16Ilv(&x[k0], in, &w.BF16[at+2*p*ilvCols], kc, &dst[jt+2*p], out, tileAdd(k0 > 0), next+p*(4*kc-128), lines)
	}
}

// promptGroupsMinRows is the fewest activation rows (a prompt's) that
// gemmRangeIlv sends through gemmIlvGroups and gemmRangeFP8 through
// gemmFP8Groups: widening or decoding a group once pays for itself over a
// chunk of many rows. A variable so that tests and benchmarks can send any
// rows either way.
var promptGroupsMinRows = fp8DecodedMaxRows + 1

// pairedWalk runs tile over the groups of step rows in [j0, j1) and every
// reduction block, group g of the first half and group g+half of the second
// taking turns block by block (an odd middle group last, alone), each
// group's blocks in order, so that every output adds its blocks as in any
// other walk; (nj, nk) is the tile the walk computes next, (j1, 0) after
// the last. The one-group-at-a-time walk is one stream; two regions read
// in turns made two- and three-row products of interleaved bf16 weights
// 5–7 % faster on q_a's shape on a Zen 5 core (docs/performance-log.md, "Two
// streams for a one-row product").
func pairedWalk(in, j0, j1, step int, tile func(jt, k0, nj, nk int)) {
	pairs, half, mid := pairedGroups((j1 - j0) / step)
	pj, pk, have := 0, 0, false
	visit := func(jt, k0 int) {
		if have {
			tile(pj, pk, jt, k0)
		}
		pj, pk, have = jt, k0, true
	}
	for g := range pairs {
		for k0 := 0; k0 < in; k0 += gemmKC {
			visit(j0+g*step, k0)
			visit(j0+(g+half)*step, k0)
		}
	}
	if mid >= 0 {
		for k0 := 0; k0 < in; k0 += gemmKC {
			visit(j0+mid*step, k0)
		}
	}
	if have {
		tile(pj, pk, j1, 0)
	}
}

// pairedGroups is the order of the walks that keep two streams in flight
// over groups groups: group g pairs with group g+half for g < pairs and,
// when groups is odd, the middle group mid goes alone (mid is -1 when
// groups is even).
func pairedGroups(groups int) (pairs, half, mid int) {
	pairs, half, mid = groups/2, (groups+1)/2, -1
	if groups%2 == 1 {
		mid = half - 1
	}
	return pairs, half, mid
}

// addBlock stores (first) or adds a reduction block's sums to d, as every
// tile's outputs join their row: the first block's sums are the output, each
// later one is added in block order.
func addBlock(d, sums []float32, first bool) {
	if first {
		copy(d, sums)
		return
	}
	for c := range d {
		d[c] += sums[c]
	}
}

// blockStrips adds reduction block k0 of weight rows [b0, b1) to all n
// activation rows, in passes of passRows rows (the rows split evenly, so
// that no short pass reads the block for a row or two): gemmStrip over the
// whole groups of four weight rows, gemmTile for the rest.
func blockStrips(dst, x []float32, n int, w *Matrix, p *f32Rows, l level, b0, b1, k0 int) {
	for i0 := 0; i0 < n; {
		m := passRows(l, n-i0)
		jt := b0 + gemmStrip(dst, x, i0+m, w, p, l, i0, b0, b1, k0)
		for ; jt < b1; jt += 4 {
			gemmTile(dst, x, i0+m, w, p, l, i0, jt, min(4, b1-jt), k0)
		}
		i0 += m
	}
}

// gemmStrip computes, where block [k0, k0+gemmKC) has no scalar tail, the
// tiles of activation rows [i0, i0+maxTileRows) and the whole groups of four
// weight rows in [jt, j1) in one call, with gemmTile's per-element
// arithmetic (the weights are f32 rows at p or, when p is nil, w's bf16
// rows). It returns how many weight rows it did: gemmTile does the rest.
func gemmStrip(dst, x []float32, n int, w *Matrix, p *f32Rows, l level, i0, jt, j1, k0 int) int {
	in, out := w.Cols, w.Rows
	k1 := min(k0+gemmKC, in)
	groups := (j1 - jt) / 4
	if groups == 0 || (k1-k0)%vecWidth(l) != 0 || k1 <= k0 {
		return 0
	}
	m := min(maxTileRows(l), n-i0)
	add := tileAdd(k0 > 0)
	xp, d := &x[i0*in+k0], &dst[i0*out+jt]
	if p != nil {
		stripF32(l, m, xp, in, p.at(jt, k0), p.ld, groups, k1-k0, d, out, add, 0)
	} else {
		stripBF16(l, m, xp, in, &w.BF16[jt*in+k0], in, groups, k1-k0, d, out, add, 0)
	}
	return 4 * groups
}

// gemmRangeFP8 is gemmRange for an FP8 matrix, with every output element
// the bits of the f32 product with the dequantized matrix. Where the codes
// can be decoded in registers (fp8InRegister), one activation row goes
// through the fp8 GEMV tiles (gemvPairsFP8 first, on AVX-512, for codes
// without NaN codes and columns a multiple of 16), 2 to eightRowMaxRows
// rows on AVX-512 through eightTileFP8 (on the same condition), 2 to
// fp8RegisterMaxRows through fewTileFP8, up to fp8DecodedMaxRows rows
// through gemmFP8Decoded, and more rows on AVX-512 with columns a multiple
// of 16 through gemmFP8Groups; the rest (and every other case) dequantize the
// tiles' weight rows, a reduction block at a time, into an f32 panel that
// the f32 tiles then read, a block of rows once for all activation rows
// when there is more than one activation tile.
func gemmRangeFP8(dst, x []float32, n int, w *Matrix, l level, j0, j1 int) {
	in := w.Cols
	buf := panelBufs.Get()
	defer panelBufs.Put(buf)
	if w.fp8Ilv {
		if l == levelAVX512 {
			j0 = gemmRangeIlvFP8(dst, x, n, w, buf, j0, j1)
		}
		gemmRangePanel(dst, x, n, w, l, buf, j0, j1)
		return
	}
	if n == 1 && in > 0 && fp8InRegister(w, l, j0, j1) {
		// GEMV: the codes are decoded in the tiles' registers, eight rows
		// (four on AVX2) at a time; the rows left over go through the panel.
		rows := 4
		if l == levelAVX512 {
			rows = 8
		}
		if oneScaleTiles(w, l) {
			j0 = gemvPairsFP8(dst, x, w, buf, j0, j1)
		}
		for ; j0+rows <= j1; j0 += rows {
			gemvRowsFP8(dst, x, w, l, buf, j0, rows)
		}
	}
	if n > 1 && n <= eightRowMaxRows && in > 0 && oneScaleTiles(w, l) && fp8InRegister(w, l, j0, j1) {
		// Two or three rows (an expert's, a speculative round's): eight
		// weight rows at a time, eight streams of codes as the one-row
		// tile reads them; the rows left over (fewer than eight) go on
		// below.
		j0 = panelWalkFP8(n, w, j0, j1, 8, func(jt, k0, pfd int) { eightTileFP8(dst, x, n, w, buf, jt, k0, pfd) })
	}
	if n > 1 && n <= fp8RegisterMaxRows && l == levelAVX512 && in > 0 && fp8InRegister(w, l, j0, j1) {
		// A few rows (a speculative round's, an expert's): the codes of each
		// group of four weight rows are decoded in registers once for all
		// the rows.
		j0 = panelWalkFP8(n, w, j0, j1, 4, func(jt, k0, pfd int) { fewTileFP8(dst, x, n, w, buf, jt, k0, pfd) })
	}
	if n > fp8RegisterMaxRows && n <= fp8ThreeRowMaxRows && l == levelAVX512 && in > 0 && w.finite && fp8InRegister(w, l, j0, j1) {
		// A batch of five to eight rows: the codes of each group of three
		// weight rows are decoded in registers once for all the rows; the
		// rows left over (fewer than three) go on below.
		j0 = panelWalkFP8(n, w, j0, j1, 3, func(jt, k0, pfd int) { threeTileFP8(dst, x, n, w, jt, k0, pfd) })
	}
	if n > 1 && n <= fp8DecodedMaxRows && in > 0 && fp8InRegister(w, l, j0, j1) {
		// Groups of four weight rows decoded once per reduction block into
		// an L1 scratch that every activation row reads; the rows left
		// over (fewer than four) go through the panel.
		j0 = gemmFP8Decoded(dst, x, n, w, l, buf, j0, j1)
	}
	if n >= promptGroupsMinRows && l == levelAVX512 && in > 0 && in%vecWidth(l) == 0 && fp8InRegister(w, l, j0, j1) {
		// A prompt's rows: groups of eight weight rows decoded into L1,
		// read by the activation rows a chunk at a time from L2; the rows
		// left over (fewer than eight) go through the panel.
		j0 = gemmFP8Groups(dst, x, n, w, l, buf, j0, j1)
	}
	gemmRangePanel(dst, x, n, w, l, buf, j0, j1)
}

// gemmRangePanel computes output columns [j0, j1) of dst = x·wᵀ for all n
// rows with the f32 tiles on panels dequantPanel fills: a reduction block of
// a few weight rows at a time for one activation tile, a block of rows once
// for all activation tiles for more.
func gemmRangePanel(dst, x []float32, n int, w *Matrix, l level, buf *[panelFloats]float32, j0, j1 int) {
	in := w.Cols
	mr := maxTileRows(l)
	if n <= mr {
		jt := j0
		if n == 1 && in > 0 {
			for ; jt+8 <= j1; jt += 8 {
				for k0 := 0; k0 < in; k0 += gemmKC {
					p := dequantPanel(buf, w, jt, jt+8, k0)
					gemvTile8(dst, x, w, &p, l, jt, k0)
				}
			}
		}
		for ; jt < j1; jt += 4 {
			nj := min(4, j1-jt)
			for k0 := 0; k0 < in || k0 == 0; k0 += gemmKC {
				p := dequantPanel(buf, w, jt, jt+nj, k0)
				gemmTile(dst, x, n, w, &p, l, 0, jt, nj, k0)
				if in == 0 {
					break
				}
			}
		}
		return
	}
	// A block of rows fills the panel.
	jb := max(4, (panelFloats/max(1, min(in, gemmKC)))&^3)
	fast := w.FP8 != nil && (l == levelAVX512 || l != levelRef && !w.fp8Ilv) && in > 0 && fp8InRegister(w, l, j0, j1)
	for b0 := j0; b0 < j1; b0 += jb {
		b1 := min(b0+jb, j1)
		for k0 := 0; k0 < in || k0 == 0; k0 += gemmKC {
			var p f32Rows
			if fast {
				// The next block of the walk: this block's rows further
				// on, or the next rows from the start.
				nb, nk := b0, k0+gemmKC
				if nk >= in {
					nb, nk = b1, 0
				}
				p = decodePanelFP8(buf, w, l, b0, b1, k0, nb, nk)
			} else {
				p = dequantPanel(buf, w, b0, b1, k0)
			}
			blockStrips(dst, x, n, w, &p, l, b0, b1, k0)
			if in == 0 {
				break
			}
		}
	}
}

// fp8DecodedMaxRows bounds the activation rows of gemmFP8Decoded: each
// group of four weight rows reads one reduction block of every activation
// row, which must stay in L2 (n·gemmKC f32 values within gemmBlockBytes:
// 64 rows); taller products go through the panel, whose blocks of weight
// rows are read once per tile of activation rows instead.
const fp8DecodedMaxRows = gemmBlockBytes / (4 * gemmKC)

// gemmFP8Decoded computes, on an assembly level l, the whole groups of four weight rows
// in [j0, j1) of an FP8 matrix that fp8InRegister accepts, for all n
// activation rows, and returns the first row it left (j1 minus fewer than
// four). The groups and their reduction blocks go in panelWalk's order
// with the limit decodedPanelXBytes: each group's blocks in order while the
// activation rows fit in L2 beside the weights, else every block of a panel
// of groups before the panel's next, so that a block of the activation rows
// is read from L2 by every group of the panel, not again from L3 by every
// group (the gate and up products of a 6,144-wide model's experts at 43
// rows: 1.5 MiB of activation rows). For each block the four rows' codes are decoded once
// (decodeFP8Row: the in-register arithmetic of the GEMV tile, exact, so the
// values are the dequantized weights Matrix.Row gives; a scalar tail
// dequantized in Go) into an f32 scratch that stays in L1, and the
// activation rows pass over it in passes of passRows rows (stripF32, or
// gemmTile for a block with a scalar tail): exactly the f32 tiles'
// arithmetic on the dequantized rows, so every output has the bits of the
// f32 product, alone or in any batch, however the rows are grouped or
// walked (each output still sums its blocks in order). A block whose codes
// hold a NaN code is decoded again by dequantPanel, whose f32 NaN weights
// give the f32 product's results.
func gemmFP8Decoded(dst, x []float32, n int, w *Matrix, l level, buf *[panelFloats]float32, j0, j1 int) int {
	in, out := w.Cols, w.Rows
	end := j0 + (j1-j0)&^3
	panelWalkAbove(decodedPanelXBytes, n, in, j0, end, 4, func(jt, k0, nj, nk int) {
		kc := min(k0+gemmKC, in) - k0
		kv := kc &^ (vecWidth(l) - 1)
		p := decodePanelFP8(buf, w, l, jt, jt+4, k0, nj, nk)
		add := tileAdd(k0 > 0)
		for i0 := 0; i0 < n; {
			m := passRows(l, n-i0)
			if kv == kc {
				stripF32(l, m, &x[i0*in+k0], in, &buf[0], kc, 1, kc, &dst[i0*out+jt], out, add, 0)
			} else {
				gemmTile(dst, x, i0+m, w, &p, l, i0, jt, 4, k0)
			}
			i0 += m
		}
	})
	return end
}

// groupChunkRows is how many activation rows promptGroups passes over one
// widened or decoded group before the next group: 128 rows of a 1,024-value
// reduction block are 512 KiB, which stay in a 1 MiB L2 while the groups of
// weight rows go by. On a Zen 5 core the eight-row tile over 512 rows and
// f32 weights of [6144, 2048] ran at 73.7–77.0 % of the FMA peak with
// chunks of 64 rows, 82.8–84.1 % with 128 and 78.8–79.6 % with 256
// (docs/performance-log.md, "fp8 prompts through groups of eight weight rows");
// on an Intel Xeon core (2 MiB of L2) 64 and 128 rows ran alike and 256
// slower.
const groupChunkRows = 128

// chunkLd is the stride, in floats, of the activation rows promptGroups
// copies: a reduction block and 16 floats (one cache line), so that
// consecutive rows start in consecutive L1 sets.
const chunkLd = gemmKC + 16

// chunkBuf holds one chunk of a prompt's activation rows, one reduction
// block of each, copied by promptGroups (532 KiB).
type chunkBuf [groupChunkRows * chunkLd]float32

// chunkBufs keeps the chunk buffers of finished calls for the next.
var chunkBufs = freelist.New[chunkBuf](64, nil)

// promptGroups computes the groups of eight weight rows in [j0, end) (a
// multiple of eight rows) for n activation rows (a prompt's). For every
// reduction block and every chunk of groupChunkRows activation rows, it
// copies the chunk's block of each row into one contiguous buffer (rows
// chunkLd apart), fill writes group jt's block at k0 as 32 KiB of f32 that
// stays in L1, starting the block it fills next, group nb's at nk, on its
// way into L2 (nk = Cols: none), and the chunk's rows pass over it three at
// a time (tileF32x8): eight weight rows from L1 for every three activation
// vectors from L2, where the six-by-four strips read four weight vectors
// from L2 for every six activation vectors in L1. Each output has the f32
// tile's accumulator and reduction over each block, stored for the first
// block and added after, so the bits are those of the f32 product on the
// rows fill gives.
//
// The copy is what keeps the chunk in L2 whatever the row length: a
// 2 MiB, 16-way L2 maps addresses 128 KiB apart to the same sets, so the
// blocks of rows 16,384 floats (64 KiB) apart, the activations of GLM-5's
// output projection, fell into two sets' ranges and the chunk's 512 KiB
// competed for 128 KiB of the cache. On an Intel Xeon core that product
// ([6144, 16384], 512 rows, in glm5-shape's prompt) ran at 50–55 % of its
// FMA time uncopied and 70 % copied; a chunk costs one pass over its rows
// for every 768 groups that read it (docs/performance-log.md, "A prompt's
// activation rows copied a chunk at a time, on the Intel host").
func promptGroups(dst, x []float32, n, in, out, j0, end int, fill func(jt, k0, nb, nk int) f32Rows) {
	xc := chunkBufs.Get()
	defer chunkBufs.Put(xc)
	for k0 := 0; k0 < in; k0 += gemmKC {
		kc := min(k0+gemmKC, in) - k0
		add := tileAdd(k0 > 0)
		for c0 := 0; c0 < n; c0 += groupChunkRows {
			c1 := min(n, c0+groupChunkRows)
			for i := c0; i < c1; i++ {
				copy(xc[(i-c0)*chunkLd:(i-c0)*chunkLd+kc], x[i*in+k0:i*in+k0+kc])
			}
			for jt := j0; jt < end; jt += 8 {
				// The next group's block, after the last group the first
				// one's (the next chunk's, or the next block's).
				nb, nk := jt+8, k0
				if nb >= end {
					nb = j0
					if c1 >= n {
						nk = k0 + gemmKC
					}
				}
				p := fill(jt, k0, nb, min(nk, in))
				for i0 := c0; i0 < c1; {
					m := evenPass(eightRowMaxRows, c1-i0)
					tileF32x8(m, &xc[(i0-c0)*chunkLd], chunkLd, p.at(jt, k0), p.ld, kc, &dst[i0*out+jt], out, add)
					i0 += m
				}
			}
		}
	}
}

// gemmFP8Groups computes, on AVX-512, the whole groups of eight weight rows
// in [j0, j1) of an FP8 matrix that fp8InRegister accepts and whose columns
// are a multiple of 16, for n activation rows (a prompt's), and returns the
// first row it left (j1 minus fewer than eight): promptGroups over each
// group's block of codes decoded by decodePanelFP8 (the exact in-register
// decoding, or dequantPanel where a code is NaN), so the bits are those of
// the f32 product on the dequantized rows.
func gemmFP8Groups(dst, x []float32, n int, w *Matrix, l level, buf *[panelFloats]float32, j0, j1 int) int {
	in, out := w.Cols, w.Rows
	end := j0 + (j1-j0)&^7
	promptGroups(dst, x, n, in, out, j0, end, func(jt, k0, nb, nk int) f32Rows {
		if nk >= in {
			nb, nk = out, 0
		}
		return decodePanelFP8(buf, w, l, jt, jt+8, k0, nb, nk)
	})
	return end
}

// gemmIlvGroups is gemmFP8Groups for the rows [j0, j1) (multiples of eight)
// of an interleaved bf16 matrix: each group's block widened by
// widenIlvGroup (two instructions per 32 values, once for
// groupChunkRows activation rows, where the strips widen every weight
// vector again for every six rows, on the ports of the FMAs on an Intel
// core). The widened values are the bf16 values, so the bits are those of
// the strips. On an Intel Xeon core the products of 512 rows with
// glm5-dense-350m's MLP shapes ran at 0.77–0.80 of the FMA peak so, against
// 0.70–0.73 through the strips (docs/performance-log.md, "Prompt products
// through groups of eight weight rows, on the Intel host").
func gemmIlvGroups(dst, x []float32, n int, w *Matrix, buf *[panelFloats]float32, j0, j1 int) {
	in := w.Cols
	promptGroups(dst, x, n, in, w.Rows, j0, j1, func(jt, k0, nb, nk int) f32Rows {
		kc := min(k0+gemmKC, in) - k0
		src := &w.BF16[ilvAt(in, jt, k0)]
		pf := src
		if nk < in {
			pf = &w.BF16[ilvAt(in, nb, nk)]
		}
		widenIlvGroup(&buf[0], kc, src, kc/ilvCols, pf)
		return f32Rows{v: buf[:], j0: jt, k0: k0, ld: kc}
	})
}

// fp8InRegister reports whether the fp8 GEMV tiles of level l can decode
// the codes of rows [j0, j1) of w in registers: every vector of codes lies
// in one block and the first block of every tile holds a whole number of
// the AVX2 tile's pairs of vectors (the column offset is a multiple of 16), and
// every scale s of the blocks those rows touch has |s| < 2^8 or is not
// finite, so that the tiles' s·2^120 is exact.
func fp8InRegister(w *Matrix, l level, j0, j1 int) bool {
	s := w.Scales
	if s.ColOff%16 != 0 {
		return false
	}
	c0, c1 := s.ColOff/FP8Block, (s.ColOff+w.Cols-1)/FP8Block
	for r := (s.RowOff + j0) / FP8Block; r <= (s.RowOff+j1-1)/FP8Block; r++ {
		for _, v := range s.S[r*s.Stride+c0 : r*s.Stride+c1+1] {
			if a := math.Float32bits(v) & 0x7FFFFFFF; a >= 0x43800000 && a < 0x7F800000 {
				return false
			}
		}
	}
	return true
}

// gemvTileFP8 is gemvTile8 (gemmTile for one activation row and four weight
// rows on AVX2) for rows [jt, jt+rows) of an FP8 matrix, decoding the codes
// in registers with the same per-element arithmetic as the f32 tile on the
// dequantized rows. A tile whose codes hold a NaN code is recomputed through
// the panel, whose f32 NaN weights give the f32 tile's results; the codes of
// a matrix made by NewFP8Matrix were checked once, and are not checked again.
func gemvTileFP8(dst, x []float32, w *Matrix, l level, buf *[panelFloats]float32, jt, rows, k0 int) {
	in := w.Cols
	k1 := min(k0+gemmKC, in)
	lanes := vecWidth(l)
	kv := (k1 - k0) &^ (lanes - 1)
	var sc [8]*float32
	first := fp8TileScales(w, sc[:rows], jt, k0, lanes)
	var tile [8]float32
	codes := w.FP8[jt*in+k0:]
	var nan bool
	switch {
	case l == levelAVX512 && w.finite && kv == k1-k0:
		// Codes checked when the matrix was made: no check per product,
		// and without a scalar tail the tile stores or adds the block's
		// sums to dst itself.
		dotTile1x8FP8Finite(&x[k0], &codes[0], in, kv, &sc, first, fp8TilePrefetch(w, jt, 8, k0, fp8GEMVPrefetch), (*[8]float32)(dst[jt:jt+8]), k0 > 0)
		return
	case l == levelAVX512 && w.finite:
		dotTile1x8FP8Finite(&x[k0], &codes[0], in, kv, &sc, first, fp8TilePrefetch(w, jt, 8, k0, fp8GEMVPrefetch), &tile, false)
	case l == levelAVX512:
		nan = dotTile1x8FP8(&x[k0], &codes[0], in, kv, &sc, first, fp8TilePrefetch(w, jt, 8, k0, fp8GEMVPrefetch), &tile)
	default:
		// Prefetch what the next call reads: each row's next block or,
		// after its last, the first block of the row four below (the
		// next tile's rows), whose first block would otherwise start cold.
		pfd := gemmKC
		if k1 == in {
			pfd = rows*in - k0
		}
		nan = dotTile1x4FP8(&x[k0], &codes[0], in, kv, (*[4]*float32)(sc[:4]), first, pfd, (*[4]float32)(tile[:4]))
	}
	// The tile checks whole chunks of four vectors; the rest here.
	nan = nan || !w.finite && nanPastChunks(codes, in, rows, kv, 4*lanes)
	if nan {
		p := dequantPanel(buf, w, jt, jt+rows, k0)
		if rows == 8 {
			gemvTile8(dst, x, w, &p, l, jt, k0)
		} else {
			gemmTile(dst, x, 1, w, &p, l, 0, jt, rows, k0)
		}
		return
	}
	addTileFP8(dst, x, w, tile[:], 8, 1, jt, rows, k0, kv)
}

// fp8GEMVPrefetch is how many code bytes ahead of its loads the one-row fp8
// tile on AVX-512 prefetches each of its eight weight rows. On a Zen 4 core
// (AVX-512 at half width), 1,024 bytes (the bf16 tile's distance) left the
// fp8 tile at 35–65 % of its in-cache rate when streaming from memory, and
// whole fp8 decode steps ran 8–40 % faster at 2,048 (docs/performance-log.md,
// "fp8 prefetch distance").
const fp8GEMVPrefetch = 2048

// panelXBytes is the size of a decode-sized product's activation rows
// (n·Cols float32 values) above which its tiles walk the weight rows in
// panels (productPanel): an eighth of a 1 MiB L2, which also holds the
// weights streaming past and the outputs.
var panelXBytes = 128 << 10

// panelOut is how many weight rows (outputs) a panel holds: n·panelOut
// output values stay in L1 or L2 from one reduction block to the next.
const panelOut = 1024

// productPanel is how many weight rows the tiles of a decode-sized product
// of n activation rows over in columns, step weight rows per tile, compute
// over every reduction block before the next rows. When the activation
// rows (4·n·in bytes) are at most xBytes (panelXBytes, or a tile's own
// limit) and so fit in L2 next to the streaming weights it is one tile: each tile
// walks all its blocks, so its weights stream front to back. Larger
// activation rows (GLM-5's o_proj at batch 8: 8 × 16,384 floats, 512 KiB)
// were evicted by the weights between one tile's blocks and read again
// from L3 by every tile; a panel of panelOut rows reads each block of them
// once per panel from L1 or L2 instead (docs/performance-log.md, "Activations
// that stay in L2"). Each output still sums its blocks in order, so no bit
// changes.
func productPanel(xBytes, n, in, step int) int {
	if 4*n*in <= xBytes {
		return step
	}
	return max(step, panelOut/step*step)
}

// decodedPanelXBytes is panelXBytes for gemmFP8Decoded, whose passes of
// six activation rows read each block of them from L2 once per group of
// four weight rows: half a 1 MiB L2. Up to it the per-tile walk keeps
// them there; a panel walk (its outputs, n·panelOut values, in L2 too)
// measured 3 % slower on one thread and up to 20 % on two at 43–64 rows
// of 2,048 columns, where past it (the same rows of 6,144 and 16,384
// columns) it is 1.2–1.4× faster (docs/performance-log.md, "An expert's
// activation rows in L2").
var decodedPanelXBytes = 512 << 10

// groupPanelMinRows is how many activation rows make gemmRangeIlv's group
// tiles walk in panels whatever the rows' size: from seven rows on, three
// passes read each block of a group, and a panel keeps a block of the
// activation rows in L1 across its groups, where the per-tile walk reads
// each of them from L2 once per group. Over 2,048 columns (under
// panelXBytes up to sixteen rows) the panels streamed 3–8 % faster at eight
// rows and 17–35 % at sixteen, and 6–11 % slower at six (docs/performance-log.md,
// "A quiet morning"), where the per-tile walk's one stream front to back
// keeps the lead.
var groupPanelMinRows = 7

// groupPanelXBytes is the activation rows' limit of gemmRangeIlv's group
// tiles for n rows: none from groupPanelMinRows rows on, panelXBytes below.
func groupPanelXBytes(n int) int {
	if n >= groupPanelMinRows {
		return 0
	}
	return panelXBytes
}

// panelNext is the tile a panel walk computes after tile (jt, k0) of the
// panel [b0, b1), step rows per tile: the panel's next tile at k0, after
// its last the panel's first at the next block, after the panel's last
// block the next panel's first (b1, 0). A walk of one-tile panels is the
// per-tile order: (jt, k0+gemmKC), then (jt+step, 0).
func panelNext(jt, k0, step, b0, b1, in int) (nj, nk int) {
	switch {
	case jt+step < b1:
		return jt + step, k0
	case k0+gemmKC < in:
		return b0, k0 + gemmKC
	}
	return b1, 0
}

// fp8TilePrefetch is the prefetch offset in bytes for an fp8 tile's call on
// weight rows [jt, jt+rows) of w and the reduction block at k0: dist bytes
// ahead in each row while that stays in the row, and past a row's end the
// same distance into the row `rows` below, which the next tile reads. A
// distance that ran on into the next row would prefetch the tile's own rows
// and leave the next tile to start cold: on rows of 2,048 codes, all of the
// eight-row tile's next tile but one row. The matrix's last tile, which has
// no next tile, keeps the plain distance.
func fp8TilePrefetch(w *Matrix, jt, rows, k0, dist int) int {
	if k0+gemmKC/2+dist < w.Cols || jt+2*rows > w.Rows {
		return dist
	}
	return dist + (rows-1)*w.Cols
}

// fp8FewPrefetch is how many code bytes ahead of its loads the last tile of
// a few- or three-row fp8 walk (panelWalkFP8), which has no next tile,
// prefetches each of its weight rows.
const fp8FewPrefetch = 1024

// fp8RegisterMaxRows is the most activation rows fewTileFP8 takes: four
// rows by four weight rows fill sixteen of AVX-512's accumulators.
const fp8RegisterMaxRows = 4

// fewTileFP8 is gemvTileFP8 for n (2 ≤ n ≤ fp8RegisterMaxRows) activation
// rows and the four weight rows [jt, jt+4) of an FP8 matrix on AVX-512: the
// codes are decoded in registers once for all n rows, with gemmTile's
// per-element arithmetic on the dequantized rows. A tile whose codes hold a
// NaN code is recomputed through the panel. Codes checked when the matrix
// was made are not checked again, and a block of them without a scalar tail
// has its sums stored or added to dst by the tile itself. While it reads,
// the tile prefetches each row's codes pfd bytes ahead (panelWalkFP8).
func fewTileFP8(dst, x []float32, n int, w *Matrix, buf *[panelFloats]float32, jt, k0, pfd int) {
	in := w.Cols
	k1 := min(k0+gemmKC, in)
	const lanes = 16
	kv := (k1 - k0) &^ (lanes - 1)
	var sc [4]*float32
	first := fp8TileScales(w, sc[:], jt, k0, lanes)
	codes := w.FP8[jt*in+k0:]
	if w.finite && kv == k1-k0 {
		// Codes checked when the matrix was made and no scalar tail: the
		// tile stores or adds the block's sums to dst itself.
		dotTileFP8Rows(n, &x[k0], in, &codes[0], in, kv, &sc, first, pfd, dst[jt:], w.Rows, k0 > 0, true)
		return
	}
	var tile [16]float32
	nan := dotTileFP8Rows(n, &x[k0], in, &codes[0], in, kv, &sc, first, pfd, tile[:], 4, false, w.finite)
	// The tile checks whole 64-byte chunks; the rest here.
	nan = nan || !w.finite && nanPastChunks(codes, in, 4, kv, 4*lanes)
	if nan {
		p := dequantPanel(buf, w, jt, jt+4, k0)
		gemmTile(dst, x, n, w, &p, levelAVX512, 0, jt, 4, k0)
		return
	}
	addTileFP8(dst, x, w, tile[:], 4, n, jt, 4, k0, kv)
}

// gemvPairsFP8 is the one-row product over the whole groups of eight weight
// rows in [j0, j1) of an FP8 matrix whose codes hold no NaN code and whose
// columns are a multiple of 16, on AVX-512: group g of the range with group
// g+half (pairedGroups) in one call of dotTile1x16FP8, each reduction block
// of both, so that two regions of codes stream at once; the odd middle
// group, and a pair with a group whose rows straddle two blocks of 128 rows
// (the tile takes one scale per group), go through gemvTileFP8. Every
// output has the bits of gemvTileFP8's. It returns the first row after the
// whole groups. One region at a time left GLM-5's one-row products up to
// 1.3× slower on a Zen 5 core (docs/performance-log.md, "fp8 products of one
// to three rows read more streams"). Rows a multiple of fp8AliasBytes long
// go through gemvPairsFP8Lagged, which walks the b groups a block behind.
func gemvPairsFP8(dst, x []float32, w *Matrix, buf *[panelFloats]float32, j0, j1 int) int {
	in := w.Cols
	groups := (j1 - j0) / 8
	pairs, half, mid := pairedGroups(groups)
	ps := newPrescaled(w, x)
	defer ps.release()
	if lagAliasedPairs && in%fp8AliasBytes == 0 && pairsOneScale(w, j0, pairs, half) {
		gemvPairsFP8Lagged(dst, x, w, buf, &ps, j0, pairs, half)
	} else {
		for g := range pairs {
			ja, jb := j0+g*8, j0+(g+half)*8
			if !w.oneScaleRow(ja, 8) || !w.oneScaleRow(jb, 8) {
				gemvRowsFP8(dst, x, w, levelAVX512, buf, ja, 8)
				gemvRowsFP8(dst, x, w, levelAVX512, buf, jb, 8)
				continue
			}
			a := pairGroup{dst, x, w, ja, ps.rows(0, ja)}
			b := pairGroup{dst, x, w, jb, ps.rows(1, jb)}
			for k0 := 0; k0 < in; k0 += gemmKC {
				pairBlockFP8(a, b, k0, k0, min(gemmKC, in-k0))
			}
		}
	}
	if mid >= 0 {
		gemvRowsFP8(dst, x, w, levelAVX512, buf, j0+mid*8, 8)
	}
	return j0 + groups*8
}

// pairGroup is one of the two groups of a call of the pair tile: the eight
// weight rows at j of w (in one block of 128 rows), by the activation row
// x, their sums at d[j:j+8]. xs, when set, is x prescaled for those rows
// (prescaleRows).
type pairGroup struct {
	d, x []float32
	w    *Matrix
	j    int
	xs   []float32
}

// pairBlockFP8 is one call of the pair tile: the block of kn columns at ka
// of group a and the block at kb of group b, each block's sums stored into
// its group's d (the first block of its rows) or added to it. The two
// groups may be of one matrix or of two of the same number of columns
// whose blocks of columns start at the same offset (the tile crosses both
// groups' block boundaries at the same value). When both groups carry
// prescaled activations the tile that takes them runs, with the same bits.
func pairBlockFP8(a, b pairGroup, ka, kb, kn int) {
	in := a.w.Cols
	var out [16]float32
	if a.w.fp8Ilv {
		pairTileIlvFP8(a, b, ka, kb, kn, &out)
		addBlock(a.d[a.j:a.j+8:a.j+8], out[:8], ka == 0)
		addBlock(b.d[b.j:b.j+8:b.j+8], out[8:], kb == 0)
		return
	}
	pfa, pfb := fp8TilePrefetch(a.w, a.j, 8, ka, fp8GEMVPrefetch), fp8TilePrefetch(b.w, b.j, 8, kb, fp8GEMVPrefetch)
	if a.xs != nil && b.xs != nil {
		dotTile1x16FP8Prescaled(&a.xs[ka], &b.xs[kb], &a.w.FP8[a.j*in+ka], &b.w.FP8[b.j*in+kb], in, kn, pfa, pfb, &out)
	} else {
		var sc [2]*float32
		first := fp8TileScales(a.w, sc[:1], a.j, ka, 16)
		fp8TileScales(b.w, sc[1:], b.j, kb, 16)
		dotTile1x16FP8(&a.x[ka], &b.x[kb], &a.w.FP8[a.j*in+ka], &b.w.FP8[b.j*in+kb], in, kn, &sc, first, pfa, pfb, &out)
	}
	addBlock(a.d[a.j:a.j+8:a.j+8], out[:8], ka == 0)
	addBlock(b.d[b.j:b.j+8:b.j+8], out[8:], kb == 0)
}

// prescaleMaxCols is the most columns a one-row fp8 product prescales its
// activations for (GLM-5's and DeepSeek-V3's widest input, o_proj's 16,384).
const prescaleMaxCols = 16384

// prescaleBufs keeps the prescaled activations of finished one-row products
// for the next: one row for each group of a pair.
var prescaleBufs = freelist.New[[2 * prescaleMaxCols]float32](64, nil)

// prescaled holds the activations x of a one-row fp8 product with w
// prescaled for the block of 128 weight rows each group of a pair is in
// (prescaleRows), each recomputed only when its group moves to another
// block. Its zero value (and newPrescaled's for a product that cannot take
// them) prescales nothing.
type prescaled struct {
	w   *Matrix
	x   []float32
	buf *[2 * prescaleMaxCols]float32
	blk [2]int
}

// newPrescaled returns the prescaled activations' holder for the one-row
// product of x with w, empty unless every block scale of w is a power of
// two in range (Matrix.pow2Max), w has at most prescaleMaxCols columns and
// every |x[k]|·scale is below 2^8, so that x[k]·scale·2^120 is a finite
// float32 and exact: the product with a code decoded to value·2^-120 is
// then exactly the product with the dequantized weight value·scale.
func newPrescaled(w *Matrix, x []float32) prescaled {
	if w.pow2Max == 0 || w.Cols > prescaleMaxCols {
		return prescaled{}
	}
	lim := 0x1p8 / w.pow2Max
	for _, v := range x[:w.Cols] {
		if !(v < lim && v > -lim) { // NaN too
			return prescaled{}
		}
	}
	return prescaled{w: w, x: x, buf: prescaleBufs.Get(), blk: [2]int{-1, -1}}
}

// release returns the buffer, if any.
func (p *prescaled) release() {
	if p.buf != nil {
		prescaleBufs.Put(p.buf)
		p.buf = nil
	}
}

// rows returns x prescaled for weight row j of w in half h (0 or 1) of the
// buffer, recomputing it when j's block of rows is not the one it holds, or
// nil when p prescales nothing.
func (p *prescaled) rows(h, j int) []float32 {
	if p.buf == nil {
		return nil
	}
	xs := p.buf[h*prescaleMaxCols : h*prescaleMaxCols+p.w.Cols]
	if b := (j + p.w.Scales.RowOff) / FP8Block; p.blk[h] != b {
		prescaleRows(xs, p.x, p.w, j)
		p.blk[h] = b
	}
	return xs
}

// prescaleRows sets xs[k] = x[k]·scale·2^120 for every column k of w, the
// scale being that of weight row j's block at column k (a power of two, so
// that scale·2^120 and the product are exact; newPrescaled checks the
// range), a block of columns at a time with the AVX-512 scaling (the pair
// tiles that read xs run only there).
func prescaleRows(xs, x []float32, w *Matrix, j int) {
	s := w.Scales
	row := s.scaleRow(j)
	for k0 := 0; k0 < len(xs); {
		c := (k0 + s.ColOff) / FP8Block
		k1 := min(len(xs), (c+1)*FP8Block-s.ColOff)
		copy(xs[k0:k1], x[k0:k1])
		scaleVec(levelAVX512, xs[k0:k1], row[c]*0x1p120)
		k0 = k1
	}
}

// fp8AliasBytes is the stride at which an L1 data cache of 64 sets of
// 64-byte lines (48 KiB of 12 ways on Zen 5 and recent Intel cores, 32 KiB
// of 8 on older ones) maps lines to the same set. When an fp8 matrix's rows
// are a multiple of it long, the sixteen rows a pair of groups reads at one
// column all fall in one set, more than it has ways, and each line is
// evicted before its four steps are done with it.
const fp8AliasBytes = 4096

// lagAliasedPairs is whether gemvPairsFP8 walks the pairs of a matrix
// whose columns are a multiple of fp8AliasBytes through
// gemvPairsFP8Lagged; BenchmarkFP8AliasedRows clears it to time the walk
// in step.
var lagAliasedPairs = true

// pairsOneScale reports whether both groups of every pair gemvPairsFP8
// walks from j0 lie in one block of 128 rows.
func pairsOneScale(w *Matrix, j0, pairs, half int) bool {
	for g := range pairs {
		if !w.oneScaleRow(j0+g*8, 8) || !w.oneScaleRow(j0+(g+half)*8, 8) {
			return false
		}
	}
	return true
}

// gemvPairsFP8Lagged is gemvPairsFP8's walk for a matrix whose columns are
// a multiple of fp8AliasBytes (so also of gemmKC) and whose paired groups
// all take one scale: the b groups run one reduction block behind the a
// groups, so that at any column the two groups' lines fall in sets gemmKC
// bytes apart. Both streams walk their groups' blocks in order (each
// output's blocks are still added first to last), call i computing block i
// of the a stream with block i−1 of the b stream; the first and the last
// call have one group and go through gemvTileFP8, whose bits the pair tile
// has. In L2, rows of 4,096 and 16,384 codes read so are as fast as rows of
// 3,968 and 16,256 read in step (docs/performance-log.md, "fp8 rows a multiple
// of 4 KiB long").
func gemvPairsFP8Lagged(dst, x []float32, w *Matrix, buf *[panelFloats]float32, ps *prescaled, j0, pairs, half int) {
	nb := w.Cols / gemmKC
	for i := range pairs*nb + 1 {
		a, b := i < pairs*nb, i > 0
		ja, ka := j0+(i/nb)*8, (i%nb)*gemmKC
		jb, kb := 0, 0
		if b {
			jb, kb = j0+((i-1)/nb+half)*8, ((i-1)%nb)*gemmKC
		}
		switch {
		case a && b:
			pairBlockFP8(pairGroup{dst, x, w, ja, ps.rows(0, ja)}, pairGroup{dst, x, w, jb, ps.rows(1, jb)}, ka, kb, gemmKC)
		case a:
			gemvTileFP8(dst, x, w, levelAVX512, buf, ja, 8, ka)
		default:
			gemvTileFP8(dst, x, w, levelAVX512, buf, jb, 8, kb)
		}
	}
}

// gemvRowsFP8 is the one-row product of weight rows [jt, jt+rows) of an FP8
// matrix, every reduction block through gemvTileFP8; of an interleaved one
// (whose callers pass whole groups, rows 8) through groupIlvFP8.
func gemvRowsFP8(dst, x []float32, w *Matrix, l level, buf *[panelFloats]float32, jt, rows int) {
	if w.fp8Ilv {
		groupIlvFP8(pairGroup{dst, x, w, jt, nil})
		return
	}
	for k0 := 0; k0 < w.Cols; k0 += gemmKC {
		gemvTileFP8(dst, x, w, l, buf, jt, rows, k0)
	}
}

// oneScaleTiles reports whether the fp8 tiles that take one scale for eight
// weight rows (gemvPairsFP8, eightTileFP8) can run at level l: on AVX-512,
// for codes holding no NaN code and columns a multiple of 16, so that no
// block has a scalar tail.
func oneScaleTiles(w *Matrix, l level) bool {
	return l == levelAVX512 && w.finite && w.Cols%16 == 0
}

// oneScaleRow reports whether weight rows [jt, jt+rows) of an FP8 matrix
// lie in one block of 128 rows, so that in every block of columns they
// share one scale (the tiles that take one scale for eight rows need it).
func (w *Matrix) oneScaleRow(jt, rows int) bool {
	off := w.Scales.RowOff
	return (off+jt)/FP8Block == (off+jt+rows-1)/FP8Block
}

// eightRowMaxRows is the most activation rows the tiles of eight weight
// rows take (eightTileFP8, tileF32x8): three rows by eight weight rows
// fill 24 of AVX-512's accumulators.
const eightRowMaxRows = 3

// eightTileFP8 is fewTileFP8 for n (2 ≤ n ≤ eightRowMaxRows) activation
// rows and the eight weight rows [jt, jt+8) of an FP8 matrix whose codes
// hold no NaN code (Matrix.finite) and whose columns are a multiple of 16
// on AVX-512: the codes of all eight rows are decoded in registers once
// for all n rows, eight streams at once, where the four-row tile reads
// four; on a Zen 5 core two and three rows of q_a's shape streamed 1.2–1.4×
// faster so (docs/performance-log.md, "fp8 products of one to three rows read
// more streams"). The tile takes one scale per block for all eight rows,
// so a group whose rows straddle two blocks of 128 rows goes through two
// four-row tiles. Each output keeps gemmTile's per-element arithmetic on
// the dequantized rows, and the tile stores or adds the block's sums to
// dst itself. It prefetches as fewTileFP8 does.
func eightTileFP8(dst, x []float32, n int, w *Matrix, buf *[panelFloats]float32, jt, k0, pfd int) {
	if !w.oneScaleRow(jt, 8) {
		fewTileFP8(dst, x, n, w, buf, jt, k0, pfd)
		fewTileFP8(dst, x, n, w, buf, jt+4, k0, pfd)
		return
	}
	in := w.Cols
	var sc [1]*float32
	first := fp8TileScales(w, sc[:], jt, k0, 16)
	dotTileFP8Rows8(n, &x[k0], in, &w.FP8[jt*in+k0], in, min(gemmKC, in-k0), sc[0], first, pfd, dst[jt:], w.Rows, k0 > 0)
}

// fp8ThreeRowMaxRows is the most activation rows threeTileFP8 takes: eight
// rows by three weight rows fill 24 of AVX-512's 32 registers with
// accumulators, leaving three for the decoded codes, three for the scales,
// one for an activation vector and one for the decoding's mask.
const fp8ThreeRowMaxRows = 8

// threeTileFP8 is fewTileFP8 for n (fp8RegisterMaxRows < n ≤
// fp8ThreeRowMaxRows) activation rows and the three weight rows [jt, jt+3)
// of an FP8 matrix whose codes hold no NaN code (Matrix.finite) on AVX-512:
// each weight's code is decoded once for all n rows, where the decoded
// path decodes it into a scratch the f32 tiles then read and two passes of
// the four-row tile would decode it twice. Each output keeps gemmTile's
// per-element arithmetic on the dequantized rows. A block without a scalar
// tail is stored or added to dst by the tile itself; one with a tail goes
// through a scratch tile, so that the tail joins the block's sum before the
// block joins dst, as in gemmTile. It prefetches as fewTileFP8 does.
func threeTileFP8(dst, x []float32, n int, w *Matrix, jt, k0, pfd int) {
	in, out := w.Cols, w.Rows
	k1 := min(k0+gemmKC, in)
	const lanes = 16
	kv := (k1 - k0) &^ (lanes - 1)
	var sc [3]*float32
	first := fp8TileScales(w, sc[:], jt, k0, lanes)
	codes := w.FP8[jt*in+k0:]
	if kv == k1-k0 {
		dotTileFP8Rows3(n, &x[k0], in, &codes[0], in, kv, &sc, first, pfd, dst[jt:], out, k0 > 0)
		return
	}
	var tile [32]float32
	dotTileFP8Rows3(n, &x[k0], in, &codes[0], in, kv, &sc, first, pfd, tile[:], 4, false)
	addTileFP8(dst, x, w, tile[:], 4, n, jt, 3, k0, kv)
}

// panelWalk runs tile(jt, k0, nj, nk) over the tiles of step weight rows
// in [j0, end) (a whole number of tiles) and every reduction block k0, in
// the panel order of productPanel for n activation rows over in columns;
// (nj, nk) is the tile the walk computes next (panelNext), which the tile
// prefetches.
func panelWalk(n, in, j0, end, step int, tile func(jt, k0, nj, nk int)) {
	panelWalkAbove(panelXBytes, n, in, j0, end, step, tile)
}

// panelWalkAbove is panelWalk in the order of productPanel(xBytes).
func panelWalkAbove(xBytes, n, in, j0, end, step int, tile func(jt, k0, nj, nk int)) {
	pr := productPanel(xBytes, n, in, step)
	for b0 := j0; b0 < end; b0 += pr {
		b1 := min(b0+pr, end)
		for k0 := 0; k0 < in; k0 += gemmKC {
			for jt := b0; jt < b1; jt += step {
				nj, nk := panelNext(jt, k0, step, b0, b1, in)
				tile(jt, k0, nj, nk)
			}
		}
	}
}

// panelWalkFP8 is panelWalk over the whole tiles of step weight rows in
// [j0, j1) of an FP8 matrix, tile taking the prefetch offset pfd from each
// of its rows' codes to the same row of the next tile; the last tile of the
// matrix, which has no next, prefetches its own next block's distance. It
// returns the first row it left (j1 minus fewer than step).
func panelWalkFP8(n int, w *Matrix, j0, j1, step int, tile func(jt, k0, pfd int)) int {
	in := w.Cols
	end := j0 + (j1-j0)/step*step
	panelWalk(n, in, j0, end, step, func(jt, k0, nj, nk int) {
		pfd := fp8FewPrefetch
		if nj+step <= w.Rows {
			pfd = w.fp8At(nj, nk) - w.fp8At(jt, k0)
			if w.fp8Ilv && nk == k0 && nj != jt {
				// Interleaved, the walk going down the rows at these
				// columns: the same rows of the next group, which the
				// tiles after the rest of this group read.
				pfd = fp8IlvRows * in
			}
		}
		tile(jt, k0, pfd)
	})
	return end
}

// fp8TileScales points sc[c] at the scale of row jt+c's block that holds
// column k0, for c < len(sc), and returns how many vectors of lanes codes
// that block holds from k0 on: the scales and the first-block length the
// fp8 tiles take (each later block holds 128/lanes vectors).
func fp8TileScales(w *Matrix, sc []*float32, jt, k0, lanes int) (first int) {
	s := w.Scales
	for c := range sc {
		sc[c] = &s.scaleRow(jt + c)[(k0+s.ColOff)/FP8Block]
	}
	return (FP8Block - (k0+s.ColOff)%FP8Block) / lanes
}

// addTileFP8 stores (k0 = 0) or adds (k0 > 0) an fp8 tile's sums to dst:
// tile[i·stride+c] for activation rows i < n and weight rows jt+c, c < nj,
// each with its scalar tail over the block's columns from k0+kv on added
// first, as gemmTile does for the f32 tiles.
func addTileFP8(dst, x []float32, w *Matrix, tile []float32, stride, n, jt, nj, k0, kv int) {
	in, out := w.Cols, w.Rows
	k1 := min(k0+gemmKC, in)
	for i := range n {
		xi := x[i*in+k0+kv : i*in+k1]
		di := dst[i*out+jt : i*out+jt+nj]
		for c := range di {
			v := tile[i*stride+c]
			if len(xi) > 0 {
				v += tailDotFP8(xi, w, jt+c, k0+kv)
			}
			if k0 == 0 {
				di[c] = v
			} else {
				di[c] += v
			}
		}
	}
}

// nanPastChunks reports whether rows [0, rows) of a tile's codes (row c at
// codes[c·in:]) hold a NaN code (0x7F or 0xFF) between the last whole chunk
// of chunk bytes and kv: the codes the fp8 tiles decode but do not check.
func nanPastChunks(codes []uint8, in, rows, kv, chunk int) bool {
	if kv%chunk == 0 {
		return false
	}
	for c := range rows {
		for _, q := range codes[c*in+kv&^(chunk-1) : c*in+kv] {
			if q&0x7F == 0x7F {
				return true
			}
		}
	}
	return false
}

// tailDotFP8 is tailDot over the dequantized codes of row j of an FP8
// matrix from column off on.
func tailDotFP8(xi []float32, w *Matrix, j, off int) float32 {
	srow := w.Scales.scaleRow(j)
	q := w.FP8[j*w.Cols+off : j*w.Cols+off+len(xi)]
	var s float32
	for k, v := range xi {
		wv := numfmt.F32FromE4M3(q[k]) * srow[(off+k+w.Scales.ColOff)/FP8Block]
		s += float32(v * wv)
	}
	return s
}

// panelFloats is the size of an FP8 dequantization panel: a block of
// weight rows as f32 that every tile of a prompt's activation rows reads
// from L2 (128 rows of gemmKC). Twice gemmBlockBytes streamed 2–3 % faster
// than gemmBlockBytes at 512 rows of glm5-dense-350m's and GLM-5's shapes,
// since each block of activation rows is then read once per 128 weight
// rows instead of 64; three times it was no faster.
const panelFloats = 2 * gemmBlockBytes / 4

// panelBufs keeps the panels of finished calls for the next: the fp8
// products' dequantized weight rows and the interleaved bf16 products'
// widened ones.
var panelBufs = freelist.New[[panelFloats]float32](64, nil)

// decodePanelFP8 is dequantPanel for an FP8 matrix whose codes decode in
// registers (fp8InRegister) on an assembly level: each row's codes through
// decodeFP8Row in one call (exact: the values Matrix.Row gives), a scalar
// tail dequantized in Go, while it prefetches the same row of the walk's
// next block, rows [nb, …) from column nk, for the panel after this one; a
// block whose codes hold a NaN code is dequantized again by dequantPanel.
func decodePanelFP8(buf *[panelFloats]float32, w *Matrix, l level, ja, jb, k0, nb, nk int) f32Rows {
	in := w.Cols
	s := w.Scales
	kc := min(k0+gemmKC, in) - k0
	kv := kc &^ (vecWidth(l) - 1)
	c0 := (k0 + s.ColOff) / FP8Block
	first := (FP8Block - (k0+s.ColOff)%FP8Block) / vecWidth(l)
	nan := false
	for j := ja; j < jb; j++ {
		row := buf[(j-ja)*kc : (j-ja+1)*kc]
		if w.fp8Ilv {
			// Every block a multiple of 16 columns, no NaN code.
			pf := &w.FP8[fp8IlvAt(in, j, k0)]
			if r := nb + j - ja; r < w.Rows {
				pf = &w.FP8[fp8IlvAt(in, r, nk)]
			}
			decodeFP8RowIlv(&row[0], &w.FP8[fp8IlvAt(in, j, k0)], kc, &s.scaleRow(j)[c0], first, pf)
			continue
		}
		codes := w.FP8[j*in+k0 : j*in+k0+kc]
		srow := s.scaleRow(j)
		if kv > 0 {
			pf := &codes[0]
			if r := nb + j - ja; r < w.Rows {
				pf = &w.FP8[r*in+nk]
			}
			nan = decodeFP8Row(l, &row[0], &codes[0], kv, &srow[c0], first, pf) || nan
		}
		for k := kv; k < kc; k++ {
			row[k] = numfmt.F32FromE4M3(codes[k]) * srow[(k0+k+s.ColOff)/FP8Block]
		}
	}
	if nan {
		return dequantPanel(buf, w, ja, jb, k0)
	}
	return f32Rows{v: buf[:], j0: ja, k0: k0, ld: kc}
}

// dequantPanel dequantizes rows [ja, jb) and columns [k0, k0+gemmKC) ∩
// [0, Cols) of the FP8 matrix w (or widens those of an interleaved bf16
// matrix) into buf and returns where they are.
func dequantPanel(buf *[panelFloats]float32, w *Matrix, ja, jb, k0 int) f32Rows {
	in := w.Cols
	k1 := min(k0+gemmKC, in)
	kc := k1 - k0
	for j := ja; j < jb; j++ {
		switch {
		case w.interleaved:
			w.widenIlv(buf[(j-ja)*kc:(j-ja+1)*kc], j, k0)
			continue
		case w.fp8Ilv:
			w.dequantIlvFP8(buf[(j-ja)*kc:(j-ja+1)*kc], j, k0)
			continue
		}
		dequantizeRowFP8(buf[(j-ja)*kc:(j-ja+1)*kc], w.FP8[j*in+k0:j*in+k1], w.Scales.scaleRow(j), w.Scales.ColOff+k0)
	}
	return f32Rows{v: buf[:], j0: ja, k0: k0, ld: kc}
}

// gemmTile computes the contribution of reduction block [k0, k0+gemmKC) to
// the tile of activation rows [i0, i0+maxTileRows) and weight rows
// [jt, jt+nj): it writes dst for the first block and adds to it after. The
// weights are f32 rows at p or, when p is nil, w's bf16 rows.
func gemmTile(dst, x []float32, n int, w *Matrix, p *f32Rows, l level, i0, jt, nj, k0 int) {
	in, out := w.Cols, w.Rows
	m := min(maxTileRows(l), n-i0)
	k1 := min(k0+gemmKC, in)
	kv := (k1 - k0) &^ (vecWidth(l) - 1)
	var tile [24]float32
	switch {
	case in == 0:
	case p != nil:
		r := func(c int) *float32 { return p.at(jt+min(c, nj-1), k0) }
		dotTileF32(l, m, &x[i0*in+k0], in, r(0), r(1), r(2), r(3), kv, &tile)
	default:
		r := func(c int) *uint16 { return &w.BF16[(jt+min(c, nj-1))*in+k0] }
		dotTileBF16(l, m, &x[i0*in+k0], in, r(0), r(1), r(2), r(3), kv, &tile)
	}
	for i := range m {
		xi := x[(i0+i)*in+k0+kv : (i0+i)*in+k1]
		di := dst[(i0+i)*out+jt : (i0+i)*out+jt+nj]
		for c := range nj {
			s := tile[i*4+c]
			if len(xi) > 0 {
				s += tailDot(xi, w, p, jt+c, k0+kv)
			}
			if k0 == 0 {
				di[c] = s
			} else {
				di[c] += s
			}
		}
	}
}

// gemvTile8 is gemmTile for one activation row and eight weight rows
// [jt, jt+8), with the same per-element arithmetic.
func gemvTile8(dst, x []float32, w *Matrix, p *f32Rows, l level, jt, k0 int) {
	in := w.Cols
	k1 := min(k0+gemmKC, in)
	kv := (k1 - k0) &^ (vecWidth(l) - 1)
	var tile [8]float32
	if p != nil {
		dotTile1x8F32(l, &x[k0], p.at(jt, k0), p.ld, kv, &tile)
	} else {
		// bf16 rows keep the tile's plain distance: following a row's end
		// into the next tile, as the fp8 tiles do, measured no faster
		// for them (docs/performance-log.md, "Prefetching past a row's end").
		dotTile1x8BF16(l, &x[k0], &w.BF16[jt*in+k0], in, kv, &tile)
	}
	xi := x[k0+kv : k1]
	di := dst[jt : jt+8]
	for c := range di {
		s := tile[c]
		if len(xi) > 0 {
			s += tailDot(xi, w, p, jt+c, k0+kv)
		}
		if k0 == 0 {
			di[c] = s
		} else {
			di[c] += s
		}
	}
}

// tailDot is Σ xi[k]·w[j, off+k] in order, products rounded before the add,
// with the weights from p (or w's bf16 rows when p is nil).
func tailDot(xi []float32, w *Matrix, p *f32Rows, j, off int) float32 {
	var s float32
	if p != nil {
		base := (j-p.j0)*p.ld + off - p.k0
		wr := p.v[base : base+len(xi)]
		for k, v := range xi {
			s += float32(v * wr[k])
		}
		return s
	}
	in := w.Cols
	wr := w.BF16[j*in+off : j*in+off+len(xi)]
	for k, v := range xi {
		s += float32(v * bf16ToF32(wr[k]))
	}
	return s
}
