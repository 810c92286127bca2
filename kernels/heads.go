package kernels

import (
	"fmt"
)

// headsTask is one parallel MatMulTHeads call; parts split the heads.
type headsTask struct {
	dst, x     []float32
	n          int // rows
	ldd, ldx   int
	hd, hx     int
	ws         []Matrix
	l          level
	join       joiner
	scratch    []float32   // the caller's gather scratch, part 0's
	partsSpace [][]float32 // the other parts' gather scratch, kept across calls
}

var headsTasks = make(chan *headsTask, 64)

// MatMulTHeadsScratch is the scratch MatMulTHeads needs for n rows of
// heads ws: none for one row, n·(Cols + Rows) of the largest head
// otherwise.
func MatMulTHeadsScratch(n int, ws []Matrix) int {
	if n <= 1 {
		return 0
	}
	m := 0
	for h := range ws {
		m = max(m, ws[h].Cols+ws[h].Rows)
	}
	return n * m
}

// MatMulTHeads is one Linear layer per head: for every head h < len(ws) and
// row t < n it computes
//
//	dst[t·ldd + h·hd : … + ws[h].Rows] = x[t·ldx + h·hx : … + ws[h].Cols] · ws[h]ᵀ
//
// with exactly the bits of MatMulT on head h's rows gathered into a
// contiguous [n, ws[h].Cols] matrix, so a head's result never depends on n,
// on the other heads or on SetThreads. It is for the per-head products of
// MLA (the absorbed W_UK and W_UV). The heads, each too small to pay for
// splitting its weight rows across threads, are split across the threads
// instead. One row (a decode step of one sequence) is read and written in
// place; more rows are gathered head by head into scratch (at least
// MatMulTHeadsScratch(n, ws) values, for the caller's thread; the other
// threads' space is kept by the call's task) and each head's product is
// MatMulT's on one thread. The heads' regions of dst must not overlap each
// other or x. It panics on a malformed matrix, strides that do not hold the
// regions, or a short scratch.
func MatMulTHeads(dst []float32, ldd, hd int, x []float32, ldx, hx int, n int, ws []Matrix, scratch []float32) {
	if n < 0 {
		panic(fmt.Sprintf("kernels: MatMulTHeads: n=%d", n))
	}
	var flops float64
	for h := range ws {
		w := &ws[h]
		if err := w.Validate(); err != nil {
			panic(fmt.Sprintf("kernels: MatMulTHeads: head %d: %v", h, err))
		}
		if n == 0 {
			continue
		}
		if hd < 0 || hx < 0 || ldd < h*hd+w.Rows || ldx < h*hx+w.Cols ||
			len(dst) < (n-1)*ldd+h*hd+w.Rows || len(x) < (n-1)*ldx+h*hx+w.Cols {
			panic(fmt.Sprintf("kernels: MatMulTHeads: head %d [%d, %d] at n=%d, dst stride %d + %d·h of %d values, x stride %d + %d·h of %d values: out of range",
				h, w.Rows, w.Cols, n, ldd, hd, len(dst), ldx, hx, len(x)))
		}
		flops += 2 * float64(w.Rows) * float64(w.Cols)
	}
	if need := MatMulTHeadsScratch(n, ws); len(scratch) < need {
		panic(fmt.Sprintf("kernels: MatMulTHeads: %d rows of %d heads need %d scratch values, got %d", n, len(ws), need, len(scratch)))
	}
	if n == 0 || len(ws) == 0 {
		return
	}
	l := activeLevel()
	if l == levelRef {
		for h := range ws {
			if n > 1 {
				gatherHead(dst, ldd, hd, x, ldx, hx, n, ws, h, scratch, l)
				continue
			}
			w := &ws[h]
			matMulTRef(dst[h*hd:h*hd+w.Rows], x[h*hx:h*hx+w.Cols], 1, w)
		}
		return
	}
	var t *headsTask
	select {
	case t = <-headsTasks:
	default:
		t = new(headsTask)
	}
	t.dst, t.x, t.n, t.ldd, t.ldx, t.hd, t.hx, t.ws, t.l, t.scratch = dst, x, n, ldd, ldx, hd, hx, ws, l, scratch
	parts := planParts(len(ws), float64(n)*flops)
	if n > 1 {
		// Every part but the first gathers into space of its own, made
		// once for the largest call and kept with the task.
		need := MatMulTHeadsScratch(n, ws)
		for len(t.partsSpace) < parts-1 {
			t.partsSpace = append(t.partsSpace, nil)
		}
		for p := range parts - 1 {
			if len(t.partsSpace[p]) < need {
				t.partsSpace[p] = make([]float32, need)
			}
		}
	}
	runParts(t, parts, &t.join)
	t.dst, t.x, t.ws, t.scratch = nil, nil, nil, nil
	select {
	case headsTasks <- t:
	default:
	}
}

// gatherHead computes head h of MatMulTHeads for n > 1 rows: its rows of x
// gathered into scratch, the product on the calling thread alone with level
// l's kernels (whose bits do not depend on how many threads share a
// product), and its outputs copied out to dst.
func gatherHead(dst []float32, ldd, hd int, x []float32, ldx, hx, n int, ws []Matrix, h int, scratch []float32, l level) {
	w := &ws[h]
	g, out := scratch[:n*w.Cols], scratch[n*w.Cols:n*(w.Cols+w.Rows)]
	for i := range n {
		copy(g[i*w.Cols:(i+1)*w.Cols], x[i*ldx+h*hx:])
	}
	if l == levelRef {
		matMulTRef(out, g, n, w)
	} else {
		gemmRange(out, g, n, w, l, 0, w.Rows)
	}
	for i := range n {
		copy(dst[i*ldd+h*hd:i*ldd+h*hd+w.Rows], out[i*w.Rows:(i+1)*w.Rows])
	}
}

func (t *headsTask) runPart(p, parts int) {
	h0, h1 := partRange(len(t.ws), 1, p, parts)
	if t.n > 1 {
		scratch := t.scratch
		if p > 0 {
			scratch = t.partsSpace[p-1]
		}
		for h := h0; h < h1; h++ {
			if t.ws[h].Rows > 0 {
				gatherHead(t.dst, t.ldd, t.hd, t.x, t.ldx, t.hx, t.n, t.ws, h, scratch, t.l)
			}
		}
		return
	}
	if headsPairsFP8(t.dst, t.hd, t.x, t.hx, t.ws, t.l, h0, h1) {
		return
	}
	for h := h0; h < h1; h++ {
		w := &t.ws[h]
		if w.Rows > 0 {
			gemmRange(t.dst[h*t.hd:h*t.hd+w.Rows], t.x[h*t.hx:h*t.hx+w.Cols], 1, w, t.l, 0, w.Rows)
		}
	}
}

// headsPairsFP8 computes the one-row products of heads [h0, h1) as one
// walk over all their groups of eight weight rows, as gemvPairsFP8 walks
// one matrix: global group g (head h0 + g/per, per groups a head) with
// group g+half, each with its own head's activations, through the pair
// tile, and the middle group of an odd count through the one-group tiles.
// Each group's sums are those of the tiles gemvPairsFP8 runs on the head
// alone (a group's bits depend only on its rows and its activations, never
// on the group it is paired with), so only the order of the reads changes:
// two long streams over the heads instead of two short ones per head,
// which ran the absorbed W_UKᵀ and W_UV products of 64 heads, streamed,
// 14 and 47 % faster by the medians on a Zen 5 core, the heads one after
// another in memory (docs/performance-log.md, "The absorbed per-head
// products as one walk"). It reports false, having done nothing, unless the
// heads are two or more fp8 matrices of one shape whose codes were checked,
// whose every group takes one scale per block of columns, and which the
// one-row tiles decode in registers on level l.
func headsPairsFP8(dst []float32, hd int, x []float32, hx int, ws []Matrix, l level, h0, h1 int) bool {
	if h1-h0 < 2 {
		return false
	}
	rows, cols := ws[h0].Rows, ws[h0].Cols
	if rows == 0 || rows%8 != 0 || cols == 0 {
		return false
	}
	for h := h0; h < h1; h++ {
		w := &ws[h]
		if w.FP8 == nil || w.Rows != rows || w.Cols != cols || w.fp8Ilv != ws[h0].fp8Ilv || !oneScaleTiles(w, l) || !fp8InRegister(w, l, 0, rows) {
			return false
		}
		for j := 0; j < rows; j += 8 {
			if !w.oneScaleRow(j, 8) {
				return false
			}
		}
	}
	per := rows / 8
	pairs, half, mid := pairedGroups((h1 - h0) * per)
	group := func(g int) pairGroup {
		h := h0 + g/per
		return pairGroup{d: dst[h*hd : h*hd+rows : h*hd+rows], x: x[h*hx : h*hx+cols : h*hx+cols], w: &ws[h], j: (g % per) * 8}
	}
	buf := panelBufs.Get()
	defer panelBufs.Put(buf)
	for g := range pairs {
		a, b := group(g), group(g+half)
		if a.w.Scales.ColOff%FP8Block != b.w.Scales.ColOff%FP8Block {
			// The pair tile crosses both groups' blocks of columns at
			// the same value; these two do not share their boundaries.
			gemvRowsFP8(a.d, a.x, a.w, l, buf, a.j, 8)
			gemvRowsFP8(b.d, b.x, b.w, l, buf, b.j, 8)
			continue
		}
		for k0 := 0; k0 < cols; k0 += gemmKC {
			pairBlockFP8(a, b, k0, k0, min(gemmKC, cols-k0))
		}
	}
	if mid >= 0 {
		m := group(mid)
		gemvRowsFP8(m.d, m.x, m.w, l, buf, m.j, 8)
	}
	return true
}
