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
	if nq < 0 || heads <= 0 || vdim < 0 || (nq > 0 && len(q)%(nq*heads) != 0) || len(out) != nq*heads*vdim || len(lse) != nq*heads ||
		(maxLogits != nil && len(maxLogits) != nq*heads) {
		panic(fmt.Sprintf("kernels: AttendQueriesBF16: %d queries of %d heads, vdim %d: len(q)=%d must be a multiple of %d, len(out)=%d of %d, len(lse)=%d and len(maxLogits)=%d of %d (or 0)",
			nq, heads, vdim, len(q), nq*heads, len(out), nq*heads*vdim, len(lse), len(maxLogits), nq*heads))
	}
	if nq == 0 {
		return
	}
	dim := len(q) / (nq * heads)
	var t *queriesTask
	select {
	case t = <-queriesTasks:
	default:
		t = new(queriesTask)
	}
	t.out, t.lse, t.maxLogits, t.q, t.src, t.rows, t.logits = out, lse, maxLogits, q, src, rows, logits
	t.nq, t.heads, t.dim, t.vdim, t.scale = nq, heads, dim, vdim, scale
	maxRows, total := 0, 0
	t.counts = t.counts[:0]
	for i := range nq {
		c := src.RowCount(i)
		t.counts = append(t.counts, c)
		maxRows, total = max(maxRows, c), total+c
	}
	if len(rows) < maxRows || len(logits) < AttendScratchLen(heads, maxRows, vdim) {
		panic(fmt.Sprintf("kernels: AttendQueriesBF16: a query of %d rows needs %d row headers and %d logits values; got %d and %d",
			maxRows, maxRows, AttendScratchLen(heads, maxRows, vdim), len(rows), len(logits)))
	}
	parts := 1
	if nq > 1 && attendBF16Fast(activeLevel(), dim, vdim) {
		parts = planParts(nq, 2*float64(heads)*float64(total)*float64(dim+vdim))
	}
	if parts == 1 {
		// One thread, or one query: each call spreads its own row splits
		// and heads across the threads, as AttendRowsBF16 does.
		for i := range nq {
			t.query(i, rows, logits, false)
		}
	} else {
		t.plan(parts, maxRows, total)
		runParts(t, parts, &t.join)
	}
	t.out, t.lse, t.maxLogits, t.q, t.src, t.rows, t.logits = nil, nil, nil, nil, nil, nil, nil
	select {
	case queriesTasks <- t:
	default:
	}
}

// queriesTask is one AttendQueriesBF16 call; part p computes the queries
// [bounds[p], bounds[p+1]).
type queriesTask struct {
	out, lse, maxLogits, q []float32
	src                    QueryRowsBF16
	rows                   [][]uint16 // part 0's, the caller's
	logits                 []float32
	nq, heads, dim, vdim   int
	scale                  float32
	counts                 []int // each query's rows
	bounds                 []int
	// The scratch of parts 1 and up, kept across calls.
	spaceRows   [][][]uint16
	spaceLogits [][]float32
	join        joiner
}

var queriesTasks = make(chan *queriesTask, 16)

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
	// Room for a power of two of rows: a context that grows a row a step
	// reallocates a few times, not every step.
	room := 128
	for room < maxRows {
		room *= 2
	}
	need := AttendScratchLen(t.heads, room, t.vdim)
	for p := 1; p < parts; p++ {
		if len(t.spaceRows) < p {
			t.spaceRows, t.spaceLogits = append(t.spaceRows, nil), append(t.spaceLogits, nil)
		}
		if len(t.spaceRows[p-1]) < maxRows {
			t.spaceRows[p-1] = make([][]uint16, room)
		}
		if len(t.spaceLogits[p-1]) < need {
			t.spaceLogits[p-1] = make([]float32, need)
		}
	}
}

func (t *queriesTask) runPart(p, parts int) {
	rows, logits := t.rows, t.logits
	if p > 0 {
		rows, logits = t.spaceRows[p-1], t.spaceLogits[p-1]
	}
	for i := t.bounds[p]; i < t.bounds[p+1]; i++ {
		t.query(i, rows, logits, true)
	}
}

// query computes query i with the given scratch, on the caller alone when
// serial, and drops the scratch's references to the rows.
func (t *queriesTask) query(i int, rows [][]uint16, logits []float32, serial bool) {
	hq, ho := t.heads*t.dim, t.heads*t.vdim
	var maxR []float32
	if t.maxLogits != nil {
		maxR = t.maxLogits[i*t.heads : (i+1)*t.heads]
	}
	r := t.src.RowsBF16(i, rows)
	attendRowsBF16("AttendQueriesBF16", t.out[i*ho:(i+1)*ho], t.lse[i*t.heads:(i+1)*t.heads], maxR, t.q[i*hq:(i+1)*hq], t.heads, t.vdim, r, t.scale,
		logits[:AttendScratchLen(t.heads, len(r), t.vdim)], serial)
	clear(r)
}
