package model

import "github.com/cpmla/cpmla/kernels"

// moeBlock runs a routed layer for a step's local rows: the router, the
// grouping of rows by expert so that each active expert's weights are read
// once per step (one GEMM over all its rows), the shared experts and, with
// expert parallelism across PCP ranks, the dispatch of rows to the ranks
// that own their experts and the combine of those ranks' partial sums.
//
// A row's routed sum adds its experts in ascending expert id, then the
// shared experts, so a row's result never depends on which rows share the
// step. Every collective's counts derive from the routing, which is
// all-gathered over the PCP group first, so every rank issues the same
// collectives with counts its peers agree on (the ledger checks them).
type moeBlock struct {
	m      *Model
	steps  *stepTables
	par    *Parallel
	trace  *RouteTrace
	reads  *weightReads
	router router
	rs     *routeScratch
	E, K   int
	D      int
	// ep: experts are whole and spread over the TP × PCP ranks.
	ep      bool
	perRank int // experts per rank under expert parallelism

	logits []float32 // [T, E]
	idx    []int32   // [T, K] selected experts of the local rows (−1: padding)
	w      []float32 // [T, K] their weights

	// grouping by expert
	count, start []int32 // [E+1]
	pairRow      []int32 // source row of each (row, expert) pair, expert-major
	pairW        []float32
	xg, yg       []float32 // [R, D]: one expert's rows and outputs
	gate, up     []float32 // [R, width]

	// dispatch is the exchange of rows with the PCP ranks that hold their
	// experts; nil unless experts are spread over more than one PCP rank.
	dispatch *expertDispatch

	// load[layer][j] counts the rows routed to this rank's expert j;
	// expertCalls counts expert computations (one per active expert per
	// routed layer and step).
	load        [][]int64
	expertCalls int64
}

// newMoEBlock sizes the routed layers' buffers for opt (nil when the model
// has no routed layer).
func newMoEBlock(m *Model, steps *stepTables, opt RunnerOptions, trace *RouteTrace, reads *weightReads, bufs *bufferList) *moeBlock {
	cfg := m.Cfg
	var first *MoE
	for i := range m.Layers {
		if m.Layers[i].MoE != nil {
			first = m.Layers[i].MoE
			break
		}
	}
	if first == nil {
		return nil
	}
	T, D := opt.MaxTokens, cfg.HiddenSize
	b := &moeBlock{m: m, steps: steps, par: opt.Parallel, trace: trace, reads: reads, router: newRouter(cfg), E: cfg.NRoutedExperts, K: cfg.NumExpertsPerTok, D: D}
	b.rs = newRouteScratch(b.router)
	b.ep = m.Shard.EPSize > 1
	b.perRank = b.E / max(m.Shard.EPSize, 1)
	P := steps.pcp()
	if b.ep && P > 1 {
		b.dispatch = &expertDispatch{}
	}
	f, i32 := bufs.f32, bufs.i32
	b.logits = f("router logits", T*b.E)
	b.idx, b.w = i32("routed experts", T*b.K), f("routing weights", T*b.K)
	rows := T // rows an expert may see in one step
	if b.dispatch != nil {
		rows = P * T
	}
	expertWidth := cfg.MoEIntermediateSize
	if !b.ep {
		expertWidth /= m.Shard.TPSize
	}
	width := max(expertWidth, cfg.NSharedExperts*cfg.MoEIntermediateSize/m.Shard.TPSize)
	b.count, b.start = make([]int32, b.E+1), make([]int32, b.E+1)
	b.pairRow, b.pairW = i32("expert pairs", rows*b.K), f("expert pair weights", rows*b.K)
	b.xg, b.yg = f("expert rows", rows*D), f("expert outputs", max(rows, T)*D)
	b.gate, b.up = f("expert gate", max(rows, T)*width), f("expert up", max(rows, T)*width)
	if b.dispatch != nil {
		b.dispatch.size(P, T, b.K, D, bufs)
	}
	// Indexed by cache layer: the decoder layers, then the MTP layers of a
	// runner that drafts.
	mtp := 0
	if opt.MTP {
		mtp = len(m.MTP)
	}
	b.load = make([][]int64, len(m.Layers)+mtp)
	for i := range m.Layers {
		if w := m.Layers[i].MoE; w != nil {
			b.load[i] = make([]int64, len(w.Experts))
		}
	}
	for k := range mtp {
		if w := m.MTP[k].Block.MoE; w != nil {
			b.load[len(m.Layers)+k] = make([]int64, len(w.Experts))
		}
	}
	return b
}

// forward computes out[M, D] = routed experts + shared experts of the local
// rows x[M, D] (this rank's partial under TP: the caller all-reduces it).
func (b *moeBlock) forward(li int, L *MoE, x, out []float32) error {
	s := b.steps
	M, K, E, D := s.nLocal, b.K, b.E, b.D
	logits := b.logits[:M*E]
	b.reads.mul(logits, x, M, L.Router)
	for t := 0; t < M; t++ {
		idx, w := b.idx[t*K:(t+1)*K], b.w[t*K:(t+1)*K]
		if s.lrow[t] < 0 {
			for k := range idx {
				idx[k], w[k] = -1, 0
			}
			continue
		}
		b.router.route(idx, w, logits[t*E:(t+1)*E], L.Bias, b.rs)
		if *b.trace != nil {
			br := s.lrow[t]
			(*b.trace)(li, s.rowPos[br], s.rowSeq[br], idx)
		}
	}
	out = out[:M*D]
	clear(out)
	if b.dispatch != nil {
		if err := b.exchange(li, L, x, out); err != nil {
			return err
		}
	} else {
		b.runExperts(li, L, x, M, b.idx, b.w, out)
	}
	if L.Shared != nil {
		y := b.yg[:M*D]
		L.Shared.forward(b.reads, y, x, M, b.gate, b.up)
		kernels.Axpy(1, y, out)
	}
	return nil
}

// runExperts adds, for every row r of src [R, D] and every routing pair of
// r (idx, w [R, K]) naming one of this rank's experts, w · expert(src[r]) to
// acc[r]. Each active expert runs once, over all its rows, experts in
// ascending id.
func (b *moeBlock) runExperts(li int, L *MoE, src []float32, R int, idx []int32, w []float32, acc []float32) {
	K, D, n := b.K, b.D, len(L.Experts)
	count, start := b.count[:n+1], b.start[:n+1]
	clear(count)
	for _, e := range idx[:R*K] {
		if e >= 0 && L.Owns(int(e)) {
			count[int(e)-L.First+1]++
		}
	}
	start[0] = 0
	for j := 0; j < n; j++ {
		start[j+1] = start[j] + count[j+1]
		count[j+1] = start[j] // cursor
	}
	for r := 0; r < R; r++ {
		for k := 0; k < K; k++ {
			e := idx[r*K+k]
			if e < 0 || !L.Owns(int(e)) {
				continue
			}
			j := int(e) - L.First
			c := count[j+1]
			b.pairRow[c], b.pairW[c] = int32(r), w[r*K+k]
			count[j+1]++
		}
	}
	for j, ex := range L.Experts {
		lo, hi := int(start[j]), int(start[j+1])
		c := hi - lo
		if c == 0 {
			continue
		}
		b.load[li][j] += int64(c)
		b.expertCalls++
		xg, yg := b.xg[:c*D], b.yg[:c*D]
		for i, r := range b.pairRow[lo:hi] {
			copy(xg[i*D:(i+1)*D], src[int(r)*D:(int(r)+1)*D])
		}
		ex.forward(b.reads, yg, xg, c, b.gate, b.up)
		for i, r := range b.pairRow[lo:hi] {
			kernels.Axpy(b.pairW[lo+i], yg[i*D:(i+1)*D], acc[int(r)*D:(int(r)+1)*D])
		}
	}
}

// RouteTrace receives, when set on a Runner, the experts each row routes to
// in each routed layer (best first). It exists for verification; production
// steps leave it nil.
type RouteTrace func(layer int, pos int32, seq int32, experts []int32)
