package kernels

import (
	"fmt"
	"math"
)

// AttendRows is softmax attention of one query position with heads heads
// over n = len(rows) rows that every head shares (multi-query attention, the
// absorbed MLA form):
//
//	dim          = len(q) / heads; q is [heads, dim]
//	logit[h, j]  = scale · q[h]·rows[j][:dim]
//	out[h, :vdim] = Σ_j softmax_j(logit[h, ·]) · rows[j][:vdim]
//	lse[h]       = ln Σ_j exp(logit[h, j])
//	maxLogits[h] = max_j logit[h, j]         (when maxLogits is not nil)
//
// Every row must hold at least max(dim, vdim) values. logits is scratch of at
// least AttendScratchLen(heads, n, vdim) values (room for the [heads, n]
// logits and the split partials); its contents afterwards are unspecified.
// With no rows, out is 0 and lse and maxLogits are −Inf. After the first
// call of a shape it does not allocate.
//
// The reference implementation uses Dot, LogSumExp, Softmax and Axpy. The
// assembly implementations walk the rows in blocks that stay in L2, keeping
// only one block's logits: on AVX-512 the logits of up to 64 heads × 4 rows
// at a time from a transposed copy of the query (each logit one fused chain
// over the dimensions in order), on AVX2 3-head × 4-row dot tiles; an online
// softmax per block with a vector exp; the weighted rows in 6-head ×
// 64-column (AVX2: 4-head × 16-column) tiles in row order; and a division
// by the softmax sum at the end. More than splitRows rows are computed in
// splits whose partials are merged by log-sum-exp in split order. Each head's result depends only on its own
// query, the rows, their order and their number, so splits and heads may be
// spread across threads (SetThreads) without changing a bit.
func AttendRows(out, lse, maxLogits, q []float32, heads, vdim int, rows [][]float32, scale float32, logits []float32) {
	attendRowsF32("AttendRows", out, lse, maxLogits, q, heads, vdim, rows, scale, logits, false)
}

// attendRowsF32 is AttendRows (fn names it in a panic), on the caller alone
// when serial.
func attendRowsF32(fn string, out, lse, maxLogits, q []float32, heads, vdim int, rows [][]float32, scale float32, logits []float32, serial bool) {
	lens := func(j int) int { return len(rows[j]) }
	if !attendPrologue(fn, out, lse, maxLogits, q, heads, vdim, len(rows), lens, logits) {
		return
	}
	dim := len(q) / heads
	l := activeLevel()
	if l == levelRef {
		attendRowsRef(out, lse, maxLogits, q, heads, dim, vdim, rows, scale, logits)
		return
	}
	attendFast(l, out, lse, maxLogits, q, heads, dim, vdim, rows, nil, scale, logits, serial)
}

// AttendRowsBF16 is AttendRows over rows stored as raw bfloat16 bits (a bf16
// KV cache), widened exactly to float32 as they are read, so rows are read at
// half the bytes and never copied. The reference result equals AttendRows on
// the widened rows bit for bit; the assembly path (dim a multiple of the
// vector width and vdim of the column tile — 16 and 64 on AVX-512, 8 and 16
// on AVX2; other shapes use the reference) performs AttendRows's operations
// in the same order and gives the same bits as AttendRows on the widened
// rows.
func AttendRowsBF16(out, lse, maxLogits, q []float32, heads, vdim int, rows [][]uint16, scale float32, logits []float32) {
	attendRowsBF16("AttendRowsBF16", out, lse, maxLogits, q, heads, vdim, rows, scale, logits, false)
}

// attendRowsBF16 is AttendRowsBF16 (fn names it in a panic), on the caller
// alone when serial.
func attendRowsBF16(fn string, out, lse, maxLogits, q []float32, heads, vdim int, rows [][]uint16, scale float32, logits []float32, serial bool) {
	lens := func(j int) int { return len(rows[j]) }
	if !attendPrologue(fn, out, lse, maxLogits, q, heads, vdim, len(rows), lens, logits) {
		return
	}
	dim := len(q) / heads
	l := activeLevel()
	if !attendBF16Fast(l, dim, vdim) {
		attendRowsRefBF16(out, lse, maxLogits, q, heads, dim, vdim, rows, scale, logits)
		return
	}
	attendFast(l, out, lse, maxLogits, q, heads, dim, vdim, nil, rows, scale, logits, serial)
}

// attendBF16Fast reports whether level l's tiles take bf16 rows of these
// sizes (dim a multiple of the vector width, vdim of the column tile).
func attendBF16Fast(l level, dim, vdim int) bool {
	return l != levelRef && dim%vecWidth(l) == 0 && vdim%attendCols(l) == 0
}

// RowDecoder produces the rows of AttendDecodedRows on demand:
// DecodeRows(dst, j0, j1) writes rows j0 … j1−1 of the call into dst, row
// j0+i at dst[i·rowLen : (i+1)·rowLen]. Calls for disjoint ranges may run
// concurrently.
type RowDecoder interface {
	DecodeRows(dst []float32, j0, j1 int)
}

// AttendDecodedRows is AttendRows over n rows of rowLen values that dec
// decodes (a quantized KV cache), with the same results bit for bit as
// AttendRows on the rows dec writes. scratch must hold n·rowLen values and
// rows n slice headers; both are overwritten. The assembly path decodes each
// block of rows just before it is used, into a block region of scratch that
// belongs to the unit of work (a split, or a split's heads) reading it, so
// the decoded rows are read back from L2 rather than from a buffer of every
// row and each row is decoded by the one thread that reads it, unless units
// share rows (more threads than splits), where a row is decoded once per
// unit. When there are too few rows for a region per unit the rows are
// decoded first instead, split by row ranges across the threads.
func AttendDecodedRows(out, lse, maxLogits, q []float32, heads, vdim, n, rowLen int, dec RowDecoder, scale float32, logits, scratch []float32, rows [][]float32) {
	attendDecodedRows("AttendDecodedRows", out, lse, maxLogits, q, heads, vdim, n, rowLen, dec, scale, logits, scratch, rows, false)
}

// attendDecodedRows is AttendDecodedRows (fn names it in a panic), on the
// caller alone when serial.
func attendDecodedRows(fn string, out, lse, maxLogits, q []float32, heads, vdim, n, rowLen int, dec RowDecoder, scale float32, logits, scratch []float32, rows [][]float32, serial bool) {
	if n < 0 || rowLen < 0 || len(scratch) < n*rowLen || len(rows) < n {
		panic(fmt.Sprintf("kernels: %s: %d rows of %d values need len(scratch)≥%d and len(rows)≥%d; got %d and %d",
			fn, n, rowLen, n*rowLen, n, len(scratch), len(rows)))
	}
	rowLens := func(int) int { return rowLen }
	if !attendPrologue(fn, out, lse, maxLogits, q, heads, vdim, n, rowLens, logits) {
		return
	}
	rows = rows[:n]
	dim := len(q) / heads
	l := activeLevel()
	if l == levelRef {
		decodeAllRows(dec, n, rowLen, scratch, rows, serial)
		attendRowsRef(out, lse, maxLogits, q, heads, dim, vdim, rows, scale, logits)
		return
	}
	t := takeAttendTask(heads)
	t.serial = serial
	t.out, t.lse, t.maxLogits, t.q, t.logits = out, lse, maxLogits, q, logits
	t.heads, t.dim, t.vdim, t.scale, t.l, t.n = heads, dim, vdim, scale, l, n
	if l == levelAVX512 {
		t.transposeQuery()
	}
	parts := t.plan()
	if bl := min(n, attendBlock); t.splits*t.groups*bl > n {
		// Too few rows for a block region per unit: decode them all first.
		decodeAllRows(dec, n, rowLen, scratch, rows, serial)
		t.rows = rows
	} else {
		t.rows, t.dec, t.scratch, t.rowLen = rows, dec, scratch, rowLen
	}
	t.run(parts)
	putAttendTask(t)
}

// decodeAllRows fills scratch with the n rows of rowLen values dec produces
// and points rows[:n] at them, splitting the rows across the threads in
// ranges of at least attendBlock rows (on the caller alone when serial).
func decodeAllRows(dec RowDecoder, n, rowLen int, scratch []float32, rows [][]float32, serial bool) {
	for j := range n {
		rows[j] = scratch[j*rowLen : (j+1)*rowLen : (j+1)*rowLen]
	}
	if serial {
		if n > 0 {
			dec.DecodeRows(scratch[:n*rowLen], 0, n)
		}
		return
	}
	var d *decodeTask
	select {
	case d = <-decodeTasks:
	default:
		d = new(decodeTask)
	}
	d.dec, d.n, d.rowLen, d.scratch = dec, n, rowLen, scratch
	runParts(d, max(1, min(Threads(), n/attendBlock)), &d.join)
	d.dec, d.scratch = nil, nil
	select {
	case decodeTasks <- d:
	default:
	}
}

var decodeTasks = make(chan *decodeTask, 64)

type decodeTask struct {
	dec       RowDecoder
	n, rowLen int
	scratch   []float32
	join      joiner
}

func (d *decodeTask) runPart(p, parts int) {
	j0, j1 := partRange(d.n, 1, p, parts)
	if j0 < j1 {
		d.dec.DecodeRows(d.scratch[j0*d.rowLen:j1*d.rowLen], j0, j1)
	}
}

// attendPrologue checks the arguments of AttendRows (panicking with the
// sizes on a mismatch) and handles n = 0; it reports whether there is work.
func attendPrologue(fn string, out, lse, maxLogits, q []float32, heads, vdim, n int, rowLen func(int) int, logits []float32) bool {
	if heads <= 0 || len(q)%heads != 0 {
		panic(fmt.Sprintf("kernels: %s: len(q)=%d is not a positive multiple of heads=%d", fn, len(q), heads))
	}
	dim := len(q) / heads
	if vdim < 0 || len(out) != heads*vdim || len(lse) != heads || (maxLogits != nil && len(maxLogits) != heads) || len(logits) < AttendScratchLen(heads, n, vdim) {
		panic(fmt.Sprintf("kernels: %s: heads=%d, vdim=%d, %d rows need len(out)=%d, len(lse)=%d, len(maxLogits)=0 or %d, len(logits)≥%d (AttendScratchLen); got %d, %d, %d, %d",
			fn, heads, vdim, n, heads*vdim, heads, heads, AttendScratchLen(heads, n, vdim), len(out), len(lse), len(maxLogits), len(logits)))
	}
	need := max(dim, vdim)
	for j := range n {
		if l := rowLen(j); l < need {
			panic(fmt.Sprintf("kernels: %s: row %d has %d values, needs %d (dim %d, vdim %d)", fn, j, l, need, dim, vdim))
		}
	}
	if n > 0 {
		return true
	}
	clear(out)
	negInf := float32(math.Inf(-1))
	for h := range heads {
		lse[h] = negInf
		if maxLogits != nil {
			maxLogits[h] = negInf
		}
	}
	return false
}

// attendFast runs the assembly AttendRows of level l over f32 or bf16 rows
// (exactly one of rows and rowsBF16 set), on the caller alone when serial.
func attendFast(l level, out, lse, maxLogits, q []float32, heads, dim, vdim int, rows [][]float32, rowsBF16 [][]uint16, scale float32, logits []float32, serial bool) {
	t := takeAttendTask(heads)
	t.serial = serial
	t.out, t.lse, t.maxLogits, t.q, t.rows, t.rowsBF16, t.logits = out, lse, maxLogits, q, rows, rowsBF16, logits
	t.heads, t.dim, t.vdim, t.scale, t.l, t.n = heads, dim, vdim, scale, l, max(len(rows), len(rowsBF16))
	if l == levelAVX512 {
		t.transposeQuery()
	}
	t.run(t.plan())
	putAttendTask(t)
}

// splitRows is the most rows of one split of a long call: a call over more
// rows computes each split's softmax partial separately (every head, with
// its own running max and sum) and merges the partials by their log-sum-exp
// at the end, in split order. Splits depend only on the number of rows, so
// results are the same for every thread count; threads share the splits
// (each reads only its splits' rows) before they share heads.
const splitRows = 4 * attendBlock

// attendSplits is the number of splits of a call over n rows: enough for
// splitRows rows each, rounded up to a multiple of four, so that two or four
// threads sharing them get as many each.
func attendSplits(n int) int {
	if n <= splitRows {
		return 1
	}
	return ((n+splitRows-1)/splitRows + 3) &^ 3
}

// splitRange is the rows [r0, r1) of split s of a call over n rows: the
// splits are as even as whole blocks of attendBlock rows allow (the kernel
// walks a split a block at a time, and a short block in every split would
// cost), so that threads sharing them get equal work (513 rows are four
// splits of 128, 128, 128 and 129 rows, not 512 and 1).
func splitRange(n, s int) (r0, r1 int) {
	return partRange(n, attendBlock, s, attendSplits(n))
}

// AttendScratchLen is the length of the logits scratch AttendRows,
// AttendRowsBF16 and AttendDecodedRows need for heads heads, n rows and vdim
// output columns: the [heads, n] logits and, for calls of more than one
// split, every split's partial output, running max and sum.
func AttendScratchLen(heads, n, vdim int) int {
	if s := attendSplits(n); s > 1 {
		return heads*n + s*heads*(vdim+2)
	}
	return heads * n
}

// plan sets the task's splits and head groups and returns the number of
// parts (threads) to run them on.
func (t *attendTask) plan() int {
	flops := 2 * float64(t.heads) * float64(t.n) * float64(t.dim+t.vdim)
	t.splits = attendSplits(t.n)
	if t.serial {
		t.groups = 1
		return 1
	}
	hg := (t.heads + 3) / 4
	if t.splits == 1 {
		t.groups = planParts(hg, flops)
	} else {
		t.groups = max(1, min(hg, (Threads()+t.splits-1)/t.splits))
	}
	return planParts(t.splits*t.groups, flops)
}

// run computes the task's units on parts threads and, for several splits,
// merges their partials.
func (t *attendTask) run(parts int) {
	runParts(t, parts, &t.join)
	if t.splits > 1 {
		t.merge()
	}
}

// merge combines the splits' partials of every head in split order:
// M = max_s M_s, a_s = exp(M_s − M), S = Σ a_s·S_s, out = (Σ a_s·O_s) / S,
// lse = M + ln S. Heads are merged independently, spread across the
// threads when there is enough work.
func (t *attendTask) merge() {
	parts := 1
	if !t.serial && t.splits*t.heads*t.vdim >= smallPhase {
		parts = min(Threads(), t.heads)
	}
	runParts((*splitMerger)(t), parts, &t.join)
}

// smallPhase is the number of values below which the transposed query and
// the split merge are computed on the caller alone.
const smallPhase = 16384

// splitMerger is attendTask's merge phase: part p merges a range of heads.
type splitMerger attendTask

func (m *splitMerger) runPart(p, parts int) {
	t := (*attendTask)(m)
	heads, vdim := t.heads, t.vdim
	stride := heads * (vdim + 2)
	part := t.logits[heads*t.n:]
	h0, h1 := partRange(heads, 1, p, parts)
	for h := h0; h < h1; h++ {
		m := float32(math.Inf(-1))
		for s := range t.splits {
			m = max(m, part[s*stride+heads*vdim+h])
		}
		o := t.out[h*vdim : (h+1)*vdim]
		clear(o)
		var sum float32
		for s := range t.splits {
			base := part[s*stride:]
			a := float32(math.Exp(float64(base[heads*vdim+h] - m)))
			sum += a * base[heads*vdim+heads+h]
			Axpy(a, base[h*vdim:(h+1)*vdim], o)
		}
		scaleVec(t.l, o, 1/sum)
		if t.maxLogits != nil {
			t.maxLogits[h] = m
		}
		t.lse[h] = m + float32(math.Log(float64(sum)))
	}
}

// takeAttendTask returns a pooled task whose softmax sums hold heads values.
func takeAttendTask(heads int) *attendTask {
	var t *attendTask
	select {
	case t = <-attendTasks:
	default:
		t = new(attendTask)
	}
	if cap(t.sums) < heads {
		t.sums = make([]float32, heads)
	}
	t.sums = t.sums[:heads]
	t.serial = false
	return t
}

// putAttendTask drops t's references to the caller's data and pools it.
func putAttendTask(t *attendTask) {
	t.out, t.lse, t.maxLogits, t.q, t.rows, t.rowsBF16, t.logits = nil, nil, nil, nil, nil, nil, nil
	t.dec, t.scratch, t.qT = nil, nil, nil
	select {
	case attendTasks <- t:
	default:
	}
}

// attendRowsRef is AttendRows in plain Go, the same operations in the same
// order as the reference sparse attention of package mla.
func attendRowsRef(out, lse, maxLogits, q []float32, heads, dim, vdim int, rows [][]float32, scale float32, logits []float32) {
	n := len(rows)
	for j, row := range rows {
		for h := range heads {
			logits[h*n+j] = scale * Dot(q[h*dim:(h+1)*dim], row[:dim])
		}
	}
	softmaxHeadsRef(lse, maxLogits, logits, heads, n)
	clear(out)
	for j, row := range rows {
		v := row[:vdim]
		for h := range heads {
			Axpy(logits[h*n+j], v, out[h*vdim:(h+1)*vdim])
		}
	}
}

// softmaxHeadsRef turns each head's n logits (logits[h·n : (h+1)·n]) into
// its probabilities in place, storing the head's log-sum-exp in lse[h] and,
// when maxLogits is not nil, its largest logit in maxLogits[h]: the
// reference sparse attention's order.
func softmaxHeadsRef(lse, maxLogits, logits []float32, heads, n int) {
	negInf := float32(math.Inf(-1))
	for h := range heads {
		lg := logits[h*n : (h+1)*n]
		if maxLogits != nil {
			m := negInf
			for _, v := range lg {
				m = max(m, v)
			}
			maxLogits[h] = m
		}
		lse[h] = LogSumExp(lg)
		Softmax(lg)
	}
}

// attendCols is the number of output columns of one weighted-row tile.
func attendCols(l level) int {
	if l == levelAVX512 {
		return 64
	}
	return 16
}

// attendRowsRefBF16 is attendRowsRef over bf16 rows: dotBF16 and a widening
// Axpy keep the reference's order, so the bits equal attendRowsRef on the
// widened rows.
func attendRowsRefBF16(out, lse, maxLogits, q []float32, heads, dim, vdim int, rows [][]uint16, scale float32, logits []float32) {
	n := len(rows)
	for j, row := range rows {
		for h := range heads {
			logits[h*n+j] = scale * dotBF16(q[h*dim:(h+1)*dim], row[:dim])
		}
	}
	softmaxHeadsRef(lse, maxLogits, logits, heads, n)
	clear(out)
	for j, row := range rows {
		v := row[:vdim]
		for h := range heads {
			p := logits[h*n+j]
			o := out[h*vdim : (h+1)*vdim]
			for c, b := range v {
				o[c] += float32(p * bf16ToF32(b))
			}
		}
	}
}

// attendBlock is the number of rows whose logits (and then weighted sums)
// are computed before the next rows are read: 128 rows of 576 f32 are
// 288 KiB, which stay in L2 next to 64 heads of queries (144 KiB).
const attendBlock = 128

type attendTask struct {
	out, lse, maxLogits, q []float32
	heads, dim, vdim       int
	rows                   [][]float32 // f32 rows, or nil
	rowsBF16               [][]uint16  // bf16 rows, or nil
	scale                  float32
	logits                 []float32
	sums                   []float32 // [heads] softmax sums; kept across calls
	l                      level
	join                   joiner
	n                      int // rows
	splits, groups         int // row splits × head groups = units of work
	// serial runs every phase on the calling goroutine: a call inside a
	// part of a parallel call (AttendQueriesBF16, AttendQueriesDecoded),
	// whose pool it would wait on.
	serial bool
	// AttendDecodedRows: every unit has dec write each block of its rows
	// into its own min(n, attendBlock)·rowLen region of scratch just before
	// the block is used, and points as many headers of rows at them.
	dec     RowDecoder
	scratch []float32
	rowLen  int
	// AVX-512: the query transposed to [dim][ldqT] (heads padded with
	// zeros to ldqT ≥ heads+16), so that a logit tile reads 16 heads of
	// one dimension as a vector; kept across calls. Nil otherwise.
	qT    []float32
	ldqT  int
	qTBuf []float32
}

// transposeQuery fills t.qT from t.q for the AVX-512 logit tiles, spread
// across the threads by blocks of 16 heads when there is enough work.
func (t *attendTask) transposeQuery() {
	ld := (t.heads + 31) &^ 15
	need := t.dim * ld
	if cap(t.qTBuf) < need {
		t.qTBuf = make([]float32, need)
	}
	t.qT, t.ldqT = t.qTBuf[:need], ld
	parts := 1
	if !t.serial && t.heads*t.dim >= smallPhase {
		parts = min(Threads(), (t.heads+15)/16)
	}
	runParts((*queryTransposer)(t), parts, &t.join)
}

// queryTransposer is attendTask's transpose phase: part p writes a range of
// 16-head blocks of t.qT and clears the padding of a range of its rows.
type queryTransposer attendTask

func (qt *queryTransposer) runPart(p, parts int) {
	t := (*attendTask)(qt)
	heads, dim, ld, q, qT := t.heads, t.dim, t.ldqT, t.q, t.qT
	h0, h1 := partRange(heads, 16, p, parts)
	hb, db := h0+(h1-h0)&^15, dim&^15 // whole 16×16 blocks
	for hs := h0; hs < hb; hs += 16 {
		for d0 := 0; d0 < db; d0 += 16 {
			transpose16(&q[hs*dim+d0], dim, &qT[d0*ld+hs], ld)
		}
	}
	for h := h0; h < h1; h++ {
		d0 := db
		if h >= hb {
			d0 = 0
		}
		for d, v := range q[h*dim+d0 : (h+1)*dim] {
			qT[(d0+d)*ld+h] = v
		}
	}
	d0, d1 := partRange(dim, 1, p, parts)
	for d := d0; d < d1; d++ {
		clear(qT[d*ld+heads : (d+1)*ld])
	}
}

var attendTasks = make(chan *attendTask, 64)

func (t *attendTask) runPart(p, parts int) {
	u0, u1 := partRange(t.splits*t.groups, 1, p, parts)
	for u := u0; u < u1; u++ {
		s, g := u/t.groups, u%t.groups
		h0, h1 := partRange(t.heads, 4, g, t.groups)
		if h0 >= h1 {
			continue
		}
		var scratch []float32
		var views [][]float32
		if t.dec != nil {
			bl := min(t.n, attendBlock)
			scratch = t.scratch[u*bl*t.rowLen : (u+1)*bl*t.rowLen]
			views = t.rows[u*bl : (u+1)*bl]
		}
		if t.splits == 1 {
			attendHeads(t, h0, h1, 0, 0, t.n, t.out, t.lse, t.sums, true, scratch, views)
			continue
		}
		stride := t.heads * (t.vdim + 2)
		part := t.logits[t.heads*t.n+s*stride : t.heads*t.n+(s+1)*stride]
		hv := t.heads * t.vdim
		r0, r1 := splitRange(t.n, s)
		attendHeads(t, h0, h1, s, r0, r1, part[:hv], part[hv:hv+t.heads], part[hv+t.heads:], false, scratch, views)
	}
}

// prefetchFour starts loading n bytes of rows[j … j+3] (those that exist)
// into L1: rows and keys gathered from scattered cache slots, a tile ahead.
func prefetchFour(rows [][]float32, j, n int) {
	nn := min(4, len(rows)-j)
	p := func(c int) *float32 { return &rows[j+min(c, nn-1)][0] }
	prefetchRows(p(0), p(1), p(2), p(3), n)
}

// rowPrefetchAhead is how many rows ahead of the four in use the logit loop
// prefetches: two tiles, so that rows from scattered cache slots arrive in
// time even when both cores load rows at once (measured against one tile).
const rowPrefetchAhead = 8

// attendHeads is the assembly AttendRows for heads [h0, h1). It walks the
// rows in blocks of attendBlock, so that each row is read from memory once
// and used from L2 for both products: logits of the block (qkTileT on
// AVX-512, dot tiles on AVX2) into the split's [heads, attendBlock] logits
// region, then an online softmax step per head (running max M and sum S; when
// M grows, the head's partial output and S are scaled by exp(M_old − M)),
// then the block's weighted rows (6-head × 64-column tiles on AVX-512,
// 4-head × 16-column on AVX2, rows in order).
// The block size is a constant, so the order of every operation on a head
// depends only on the number of rows. With a decoder (AttendDecodedRows) each
// block is first decoded into scratch, with views pointing at its rows.
//
// Only rows [r0, r1) (split sp's, or all of them) are read. The output out
// ([heads, vdim]), running max runMax and sum runSum ([heads]) are indexed
// by head; when final they are normalized (out divided by the sum, t.lse and
// t.maxLogits written — runMax is then t.lse), otherwise left as the
// split's partial.
func attendHeads(t *attendTask, h0, h1, sp, r0, r1 int, out, runMax, runSum []float32, final bool, scratch []float32, views [][]float32) {
	q, dim, vdim := t.q, t.dim, t.vdim
	bf := t.rowsBF16 != nil // bf16 rows: no dim or vdim tails (see AttendRowsBF16)
	l := t.l
	// The logits of one block of rows, [heads, bl], in a region of t.logits
	// that belongs to the split (units of a split own different heads).
	bl := min(t.n, attendBlock)
	logits := t.logits[sp*t.heads*bl : (sp+1)*t.heads*bl]
	kv := dim &^ (vecWidth(l) - 1)
	cw := attendCols(l)
	cv := vdim &^ (cw - 1)
	hs := min(4, maxTileRows(l)) // heads per logit tile (AVX2)
	ah := 4                      // heads per weighted-row tile
	if l == levelAVX512 {
		ah = 6 // 24 accumulators: fewer loads per FMA than four heads
	}
	rowBytes := 4 * max(dim, vdim) // the part of each row that is read
	if bf {
		rowBytes /= 2
	}
	negInf := float32(math.Inf(-1))
	for h := h0; h < h1; h++ {
		runMax[h], runSum[h] = negInf, 0
	}
	clear(out[h0*vdim : h1*vdim])
	var tile [24]float32
	var f [8]*float32
	var b [8]*uint16
	// Rows per logit tile: eight when the transposed-query tile holds one
	// 16-head vector, so that it still has eight independent FMA chains.
	tr := 4
	if t.qT != nil && h1-h0 <= 16 {
		tr = 8
	}
	for b0 := r0; b0 < r1; b0 += attendBlock {
		b1 := min(b0+attendBlock, r1)
		// The block's rows, indexed from 0, and the rows that may be
		// prefetched (the block's and, in place, every later row).
		var rows, ahead [][]float32
		var rowsB, aheadB [][]uint16
		switch {
		case t.dec != nil:
			blk := scratch[:(b1-b0)*t.rowLen]
			t.dec.DecodeRows(blk, b0, b1)
			for i := range b1 - b0 {
				views[i] = blk[i*t.rowLen : (i+1)*t.rowLen : (i+1)*t.rowLen]
			}
			rows = views[:b1-b0]
			ahead = rows
		case bf:
			rowsB, aheadB = t.rowsBF16[b0:b1], t.rowsBF16[b0:r1]
		default:
			rows, ahead = t.rows[b0:b1], t.rows[b0:r1]
		}
		nb := b1 - b0
		for jt := 0; jt < nb; jt += tr {
			nj := min(tr, nb-jt)
			for g := 0; g < tr; g += 4 {
				next, na := jt+g+rowPrefetchAhead, max(len(ahead), len(aheadB))
				if next >= na {
					break
				}
				// Rows come from scattered cache slots: start fetching
				// later ones while these are used by every head.
				nn := min(4, na-next)
				if bf {
					for c := range 4 {
						b[c] = &aheadB[next+min(c, nn-1)][0]
					}
					prefetchRowsBF16(b[0], b[1], b[2], b[3], rowBytes)
				} else {
					prefetchFour(ahead, next, rowBytes)
				}
			}
			for c := range tr {
				if bf {
					b[c] = &rowsB[jt+min(c, nj-1)][0]
				} else {
					f[c] = &rows[jt+min(c, nj-1)][0]
				}
			}
			ht := h0
			if t.qT != nil {
				// Up to 64 heads at a time against the tile's rows, from
				// the transposed query; rows past nj are not stored.
				mask := 1<<nj - 1
				switch {
				case tr == 8 && bf:
					qkTileT8BF16(&t.qT[h0], t.ldqT, dim, &b, &logits[h0*bl+jt], bl, h1-h0, mask, t.scale)
				case tr == 8:
					qkTileT8(&t.qT[h0], t.ldqT, dim, &f, &logits[h0*bl+jt], bl, h1-h0, mask, t.scale)
				default:
					for hc := h0; hc < h1; hc += 64 {
						hn := min(64, h1-hc)
						if bf {
							qkTileTBF16(&t.qT[hc], t.ldqT, dim, b[0], b[1], b[2], b[3], &logits[hc*bl+jt], bl, hn, mask, t.scale)
						} else {
							qkTileT(&t.qT[hc], t.ldqT, dim, f[0], f[1], f[2], f[3], &logits[hc*bl+jt], bl, hn, mask, t.scale)
						}
					}
				}
				ht = h1
			}
			for ; ht < h1; ht += hs {
				m := min(hs, h1-ht)
				switch {
				case kv == 0:
					clear(tile[:])
				case bf:
					dotTileBF16(l, m, &q[ht*dim], dim, b[0], b[1], b[2], b[3], kv, &tile)
				default:
					dotTileF32(l, m, &q[ht*dim], dim, f[0], f[1], f[2], f[3], kv, &tile)
				}
				for i := range m {
					qi := q[(ht+i)*dim+kv : (ht+i+1)*dim]
					lg := logits[(ht+i)*bl+jt : (ht+i)*bl+jt+nj]
					for c := range lg {
						s := tile[i*4+c]
						if len(qi) > 0 { // f32 rows only
							row := rows[jt+c][kv:dim]
							for k, v := range qi {
								s += float32(v * row[k])
							}
						}
						lg[c] = t.scale * s
					}
				}
			}
		}
		for h := h0; h < h1; h++ {
			lg := logits[h*bl : h*bl+nb]
			m := max(runMax[h], vecMax(l, lg))
			if m > runMax[h] && runMax[h] != negInf {
				alpha := float32(math.Exp(float64(runMax[h] - m)))
				runSum[h] *= alpha
				scaleVec(l, out[h*vdim:(h+1)*vdim], alpha)
			}
			runMax[h] = m
			runSum[h] += expSum(l, lg, m)
		}
		for ht := h0; ht < h1; ht += ah {
			m := min(ah, h1-ht)
			for c0 := 0; c0 < cv; c0 += cw {
				if bf {
					axpyTileBF16(l, m, &out[ht*vdim+c0], vdim, &logits[ht*bl], bl, &rowsB[0], nb, c0)
				} else {
					axpyTile(l, m, &out[ht*vdim+c0], vdim, &logits[ht*bl], bl, &rows[0], nb, c0)
				}
			}
			if cv < vdim { // f32 rows only
				for i := range m {
					o := out[(ht+i)*vdim+cv : (ht+i+1)*vdim]
					for j := range nb {
						p := logits[(ht+i)*bl+j]
						v := rows[j][cv:vdim]
						for c := range o {
							o[c] += float32(p * v[c])
						}
					}
				}
			}
		}
	}
	if !final {
		return
	}
	for h := h0; h < h1; h++ {
		if t.maxLogits != nil {
			t.maxLogits[h] = runMax[h]
		}
		scaleVec(l, out[h*vdim:(h+1)*vdim], 1/runSum[h])
		t.lse[h] = runMax[h] + float32(math.Log(float64(runSum[h])))
	}
}
