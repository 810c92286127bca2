package kernels

import "fmt"

// QueryRowsBF16 gives AttendQueriesBF16 the bf16 rows of each query.
type QueryRowsBF16 interface {
	// RowCount is the number of rows query i attends to.
	RowCount(i int) int
	// RowsBF16 points rows[:RowCount(i)] at query i's rows, in the order
	// it attends to them, and returns that slice.
	RowsBF16(i int, rows [][]uint16) [][]uint16
}

// QueryRows gives AttendQueries the float32 rows of each query.
type QueryRows interface {
	// RowCount is the number of rows query i attends to.
	RowCount(i int) int
	// Rows points rows[:RowCount(i)] at query i's rows, in the order it
	// attends to them, and returns that slice. A row the source does not
	// hold as float32 it writes to scratch (row j at scratch[j·rowLen:],
	// which has room for RowCount(i) rows) and points at that.
	Rows(i int, rows [][]float32, scratch []float32) [][]float32
}

// QueryRowDecoder gives AttendQueriesDecoded the rows of each query as
// records it decodes on demand (a quantized KV cache).
type QueryRowDecoder interface {
	// RowCount is the number of rows query i attends to.
	RowCount(i int) int
	// Select writes the records of query i's rows to sel[:RowCount(i)],
	// in the order it attends to them, and returns that slice.
	Select(i int, sel []int32) []int32
	// DecodeRows writes the rows of records sel[j0:j1] to dst, row j0+k
	// at dst[k·rowLen:]. Calls for disjoint ranges may run concurrently.
	DecodeRows(dst []float32, sel []int32, j0, j1 int)
}

// AttendQueriesBF16 is AttendRowsBF16 for each of nq queries: query i's
// query q[i·heads·dim:(i+1)·heads·dim] over the rows src gives it, into
// out[i·heads·vdim:], lse[i·heads:] and maxLogits[i·heads:] (nil for none),
// with the bits nq calls of AttendRowsBF16 give. On more than one thread the
// queries, not their heads or row splits, go to the threads: contiguous
// ranges of about equal rows, each query computed by one thread. A prompt's
// queries are many and each attends to its own rows; splitting a query's
// heads instead would give each thread fewer than the sixteen heads a logit
// tile computes at once (a small model, or a tensor-parallel rank's share of
// the heads) and have both threads read every row. rows and logits are the
// caller's scratch, used by its own thread: at least the most rows of any
// query and AttendScratchLen(heads, those rows, vdim) values; the other
// threads' scratch is kept by the call's task across calls. It panics on
// inconsistent sizes.
func AttendQueriesBF16(out, lse, maxLogits, q []float32, nq, heads, vdim int, src QueryRowsBF16, scale float32, rows [][]uint16, logits []float32) {
	t := takeQueriesTask("AttendQueriesBF16", out, lse, maxLogits, q, nq, heads, vdim, src)
	if t == nil {
		return
	}
	t.bf16 = src
	t.first.rowsBF16, t.first.logits = rows, logits
	maxRows := t.countRows(src)
	if len(rows) < maxRows || len(logits) < AttendScratchLen(heads, maxRows, vdim) {
		panic(fmt.Sprintf("kernels: AttendQueriesBF16: a query of %d rows needs %d row headers and %d logits values; got %d and %d",
			maxRows, maxRows, AttendScratchLen(heads, maxRows, vdim), len(rows), len(logits)))
	}
	t.run(scale, maxRows)
}

// AttendQueries is AttendQueriesBF16 over float32 rows of rowLen values:
// each query's results have the bits of its own AttendRows call over the
// rows src gives it, and the queries go to the threads as
// AttendQueriesBF16's do. logits, scratch and rows are the caller's
// thread's: for the most rows n of any query, AttendScratchLen(heads, n,
// vdim), n·rowLen and n entries; the other threads' are kept by the call's
// task across calls. It panics on inconsistent sizes.
func AttendQueries(out, lse, maxLogits, q []float32, nq, heads, vdim, rowLen int, src QueryRows, scale float32, logits, scratch []float32, rows [][]float32) {
	t := takeQueriesTask("AttendQueries", out, lse, maxLogits, q, nq, heads, vdim, src)
	if t == nil {
		return
	}
	if rowLen < 0 {
		panic(fmt.Sprintf("kernels: AttendQueries: row length %d", rowLen))
	}
	t.f32, t.rowLen = src, rowLen
	t.first.logits, t.first.decoded, t.first.rows = logits, scratch, rows
	maxRows := t.countRows(src)
	if len(logits) < AttendScratchLen(heads, maxRows, vdim) || len(scratch) < maxRows*rowLen || len(rows) < maxRows {
		panic(fmt.Sprintf("kernels: AttendQueries: a query of %d rows of %d values needs %d logits values, %d row values and %d row headers; got %d, %d and %d",
			maxRows, rowLen, AttendScratchLen(heads, maxRows, vdim), maxRows*rowLen, maxRows, len(logits), len(scratch), len(rows)))
	}
	t.run(scale, maxRows)
}

// AttendQueriesDecoded is AttendQueriesBF16 over rows of rowLen values that
// src decodes: each query's results have the bits of its own
// AttendDecodedRows call over the rows src decodes for it, and the queries
// go to the threads as AttendQueriesBF16's do. Each query's rows are decoded
// a block at a time by the thread that computes it, into that thread's
// scratch. logits, scratch, rows and sel are the caller's thread's: for the
// most rows n of any query, AttendScratchLen(heads, n, vdim), n·rowLen, n
// and n entries; the other threads' are kept by the call's task across
// calls. It panics on inconsistent sizes.
func AttendQueriesDecoded(out, lse, maxLogits, q []float32, nq, heads, vdim, rowLen int, src QueryRowDecoder, scale float32, logits, scratch []float32, rows [][]float32, sel []int32) {
	t := takeQueriesTask("AttendQueriesDecoded", out, lse, maxLogits, q, nq, heads, vdim, src)
	if t == nil {
		return
	}
	if rowLen < 0 {
		panic(fmt.Sprintf("kernels: AttendQueriesDecoded: row length %d", rowLen))
	}
	t.dec, t.rowLen = src, rowLen
	t.first.logits, t.first.decoded, t.first.rows, t.first.sel = logits, scratch, rows, sel
	maxRows := t.countRows(src)
	if len(logits) < AttendScratchLen(heads, maxRows, vdim) || len(scratch) < maxRows*rowLen || len(rows) < maxRows || len(sel) < maxRows {
		panic(fmt.Sprintf("kernels: AttendQueriesDecoded: a query of %d rows of %d values needs %d logits values, %d decoded values, %d row headers and %d records; got %d, %d, %d and %d",
			maxRows, rowLen, AttendScratchLen(heads, maxRows, vdim), maxRows*rowLen, maxRows, maxRows, len(logits), len(scratch), len(rows), len(sel)))
	}
	t.run(scale, maxRows)
}

// queriesTask is one AttendQueries, AttendQueriesBF16 or
// AttendQueriesDecoded call; part p computes the queries [bounds[p],
// bounds[p+1]).
type queriesTask struct {
	out, lse, maxLogits, q []float32
	f32                    QueryRows       // the rows: float32 …
	bf16                   QueryRowsBF16   // … bf16 …
	dec                    QueryRowDecoder // … or decoded
	nq, heads, dim, vdim   int
	rowLen                 int // float32 and decoded rows' length
	scale                  float32
	counts                 []int // each query's rows
	bounds                 []int
	first                  queryScratch // part 0's: the caller's
	// The scratch of parts 1 and up, kept across calls.
	space []*queryScratch
	join  joiner
}

// queryScratch is what one part computes its queries with.
type queryScratch struct {
	logits   []float32
	rowsBF16 [][]uint16 // bf16 rows: the rows' headers
	// Float32 rows: the rows written to scratch and all rows' headers.
	// Decoded rows: the block regions, their headers, a query's records
	// and the decoder over them.
	decoded []float32
	rows    [][]float32
	sel     []int32
	reader  selectedRows
}

// selectedRows is the RowDecoder of one query's records.
type selectedRows struct {
	src QueryRowDecoder
	sel []int32
}

func (s *selectedRows) DecodeRows(dst []float32, j0, j1 int) { s.src.DecodeRows(dst, s.sel, j0, j1) }

var queriesTasks = make(chan *queriesTask, 16)

// takeQueriesTask checks the sizes common to both calls and returns a
// pooled task holding them, or nil when there are no queries.
func takeQueriesTask(fn string, out, lse, maxLogits, q []float32, nq, heads, vdim int, src any) *queriesTask {
	if nq < 0 || heads <= 0 || vdim < 0 || (nq > 0 && len(q)%(nq*heads) != 0) || len(out) != nq*heads*vdim || len(lse) != nq*heads ||
		(maxLogits != nil && len(maxLogits) != nq*heads) || src == nil {
		panic(fmt.Sprintf("kernels: %s: %d queries of %d heads, vdim %d: len(q)=%d must be a multiple of %d, len(out)=%d of %d, len(lse)=%d and len(maxLogits)=%d of %d (or 0), and a source of rows (nil: %v)",
			fn, nq, heads, vdim, len(q), nq*heads, len(out), nq*heads*vdim, len(lse), len(maxLogits), nq*heads, src == nil))
	}
	if nq == 0 {
		return nil
	}
	var t *queriesTask
	select {
	case t = <-queriesTasks:
	default:
		t = new(queriesTask)
	}
	t.out, t.lse, t.maxLogits, t.q = out, lse, maxLogits, q
	t.nq, t.heads, t.dim, t.vdim = nq, heads, len(q)/(nq*heads), vdim
	return t
}

// countRows takes each query's row count once and returns the largest.
func (t *queriesTask) countRows(src interface{ RowCount(int) int }) int {
	maxRows := 0
	t.counts = t.counts[:0]
	for i := range t.nq {
		c := src.RowCount(i)
		t.counts = append(t.counts, c)
		maxRows = max(maxRows, c)
	}
	return maxRows
}

// run computes every query, spread over the threads by queries when there
// are several queries and threads, and pools the task.
func (t *queriesTask) run(scale float32, maxRows int) {
	t.scale = scale
	parts := 1
	if t.nq > 1 && attendBF16Fast(activeLevel(), t.dim, t.vdim) {
		total := 0
		for _, c := range t.counts {
			total += c
		}
		parts = planParts(t.nq, 2*float64(t.heads)*float64(total)*float64(t.dim+t.vdim))
		if parts > 1 {
			t.plan(parts, maxRows, total)
		}
	}
	if parts == 1 {
		// One thread, or one query: each call spreads its own row splits
		// and heads across the threads, as AttendRowsBF16 does.
		for i := range t.nq {
			t.query(i, &t.first, false)
		}
	} else {
		runParts(t, parts, &t.join)
	}
	t.out, t.lse, t.maxLogits, t.q, t.f32, t.bf16, t.dec = nil, nil, nil, nil, nil, nil, nil
	t.first = queryScratch{}
	select {
	case queriesTasks <- t:
	default:
	}
}

// queryOverhead is the rows' worth of work a query costs besides its rows
// (the transposed query, the final division), for the split of the queries.
const queryOverhead = 16

// plan sets the bounds of parts ranges of queries, each about an equal share
// of the rows (plus queryOverhead a query), and sizes the other parts'
// scratch for at least maxRows rows.
func (t *queriesTask) plan(parts, maxRows, total int) {
	t.bounds = append(t.bounds[:0], 0)
	all := total + queryOverhead*t.nq
	acc := 0
	for i := range t.nq {
		if len(t.bounds) < parts && acc*parts >= all*len(t.bounds) {
			t.bounds = append(t.bounds, i)
		}
		acc += t.counts[i] + queryOverhead
	}
	for len(t.bounds) <= parts {
		t.bounds = append(t.bounds, t.nq)
	}
	for len(t.space) < parts-1 {
		t.space = append(t.space, new(queryScratch))
	}
	for _, s := range t.space[:parts-1] {
		s.size(t, maxRows)
	}
}

// size makes s hold at least maxRows rows of t's kind. It grows to a power
// of two of rows: a context that grows a row a step reallocates a few
// times, not every step.
func (s *queryScratch) size(t *queriesTask, maxRows int) {
	room := 128
	for room < maxRows {
		room *= 2
	}
	if need := AttendScratchLen(t.heads, room, t.vdim); len(s.logits) < AttendScratchLen(t.heads, maxRows, t.vdim) {
		s.logits = make([]float32, need)
	}
	if t.bf16 != nil {
		if len(s.rowsBF16) < maxRows {
			s.rowsBF16 = make([][]uint16, room)
		}
		return
	}
	if len(s.rows) < maxRows {
		s.rows = make([][]float32, room)
	}
	if t.dec != nil && len(s.sel) < maxRows {
		s.sel = make([]int32, room)
	}
	if len(s.decoded) < maxRows*t.rowLen {
		s.decoded = make([]float32, room*t.rowLen)
	}
}

func (t *queriesTask) runPart(p, parts int) {
	s := &t.first
	if p > 0 {
		s = t.space[p-1]
	}
	for i := t.bounds[p]; i < t.bounds[p+1]; i++ {
		t.query(i, s, true)
	}
}

// query computes query i with the scratch s, on the caller alone when
// serial, and drops the scratch's references to the rows.
func (t *queriesTask) query(i int, s *queryScratch, serial bool) {
	hq, ho := t.heads*t.dim, t.heads*t.vdim
	var maxR []float32
	if t.maxLogits != nil {
		maxR = t.maxLogits[i*t.heads : (i+1)*t.heads]
	}
	out, lse, q := t.out[i*ho:(i+1)*ho], t.lse[i*t.heads:(i+1)*t.heads], t.q[i*hq:(i+1)*hq]
	if t.f32 != nil {
		r := t.f32.Rows(i, s.rows, s.decoded)
		if len(r) != t.counts[i] {
			panic(fmt.Sprintf("kernels: AttendQueries: query %d gave %d rows after a row count of %d", i, len(r), t.counts[i]))
		}
		attendRowsF32("AttendQueries", out, lse, maxR, q, t.heads, t.vdim, r, t.scale,
			s.logits[:AttendScratchLen(t.heads, len(r), t.vdim)], serial)
		clear(r)
		return
	}
	if t.bf16 != nil {
		r := t.bf16.RowsBF16(i, s.rowsBF16)
		attendRowsBF16("AttendQueriesBF16", out, lse, maxR, q, t.heads, t.vdim, r, t.scale,
			s.logits[:AttendScratchLen(t.heads, len(r), t.vdim)], serial)
		clear(r)
		return
	}
	n := t.counts[i]
	sel := t.dec.Select(i, s.sel)
	if len(sel) != n {
		panic(fmt.Sprintf("kernels: AttendQueriesDecoded: query %d selected %d records after a row count of %d", i, len(sel), n))
	}
	s.reader = selectedRows{src: t.dec, sel: sel}
	attendDecodedRows("AttendQueriesDecoded", out, lse, maxR, q, t.heads, t.vdim, n, t.rowLen, &s.reader, t.scale,
		s.logits[:AttendScratchLen(t.heads, n, t.vdim)], s.decoded, s.rows, serial)
	s.reader = selectedRows{}
	clear(s.rows[:n])
}
