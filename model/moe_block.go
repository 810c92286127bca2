package model

import (
	"fmt"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/kernels"
)

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
	// ep: experts are whole and spread over the TP × PCP ranks; dispatch:
	// rows must travel between PCP ranks to reach them.
	ep, dispatch bool
	perRank      int // experts per rank under expert parallelism

	logits []float32 // [T, E]
	idx    []int32   // [T, K] selected experts of the local rows (−1: padding)
	w      []float32 // [T, K] their weights

	// grouping by expert
	count, start []int32 // [E+1]
	pairRow      []int32 // source row of each (row, expert) pair, expert-major
	pairW        []float32
	xg, yg       []float32 // [R, D]: one expert's rows and outputs
	gate, up     []float32 // [R, width]

	// expert-parallel exchange over the PCP group
	allIdx                 []int32   // [P, T, K]
	allW                   []float32 // [P, T, K]
	recvIdx                []int32   // [P·T, K] routing of the received rows
	recvW                  []float32
	sendRows               []int32 // local rows sent, peer by peer
	sendCounts, recvCounts []int   // floats per peer
	send, recv, acc, back  []float32
	// rows every PCP rank holds (decodes): computed where they are, summed
	// over the PCP group
	replIdx                    []int32
	replAcc, replPack, replSum []float32

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
	b.dispatch = b.ep && P > 1
	f, i32 := bufs.f32, bufs.i32
	b.logits = f("router logits", T*b.E)
	b.idx, b.w = i32("routed experts", T*b.K), f("routing weights", T*b.K)
	rows := T // rows an expert may see in one step
	if b.dispatch {
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
	if b.dispatch {
		b.allIdx, b.allW = i32("routing gather", P*T*b.K), f("routing weight gather", P*T*b.K)
		b.recvIdx, b.recvW = i32("received routing", P*T*b.K), f("received routing weights", P*T*b.K)
		b.sendRows = i32("dispatched rows", P*T)
		b.sendCounts, b.recvCounts = make([]int, P), make([]int, P)
		b.send, b.recv = f("expert dispatch send", P*T*D), f("expert dispatch recv", P*T*D)
		b.acc, b.back = f("expert partial sums", P*T*D), f("expert combine recv", P*T*D)
		b.replIdx = i32("replicated row routing", T*b.K)
		b.replAcc, b.replPack, b.replSum = f("replicated row experts", T*D), f("replicated row pack", T*D), f("replicated row sum", T*D)
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
	if b.dispatch {
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

// owner is the world rank holding global expert e under expert parallelism.
func (b *moeBlock) owner(e int32) int { return int(e) / b.perRank }

// exchange runs the routed experts of the local rows when they live on other
// PCP ranks. Rows of a split prefill are dispatched: the routing is
// all-gathered over the PCP group; each rank sends to every PCP peer (its TP
// peer index) the rows of its block that route to that peer's experts,
// computes its experts over the rows it received, and sends the partial sums
// back; a row's partials add in PCP rank order. Rows every PCP rank holds
// (decodes) are not sent: each rank computes its own experts over them and
// the partials are all-reduced over the PCP group, so every expert runs once
// per row. The TP all-reduce that follows adds the experts held by the other
// TP ranks.
func (b *moeBlock) exchange(li int, L *MoE, x, out []float32) error {
	s, ctx, g := b.steps, b.par.ctx(), b.par.Groups.PCP
	M, K, D := s.nLocal, b.K, b.D
	P, TP := s.pcp(), b.par.Layout.TP
	tp, me := b.m.Shard.TPRank, b.par.Groups.World.Rank()
	replicated := func(br int32) bool { return br >= 0 && !s.partPrefill[s.rowSeq[br]] }
	allIdx, allW := b.allIdx[:P*M*K], b.allW[:P*M*K]
	if err := comm.AllGather(ctx, g, allIdx, b.idx[:M*K]); err != nil {
		return fmt.Errorf("expert routing gather: %w", err)
	}
	if err := comm.AllGather(ctx, g, allW, b.w[:M*K]); err != nil {
		return fmt.Errorf("expert routing weight gather: %w", err)
	}
	routesTo := func(idx []int32, rank int) bool {
		for _, e := range idx {
			if e >= 0 && b.owner(e) == rank {
				return true
			}
		}
		return false
	}
	// Rows this rank sends: to peer p, the rows of its block routed to the
	// experts of world rank p·TP + tp.
	nsend := 0
	for p := 0; p < P; p++ {
		c := 0
		for t := 0; t < M; t++ {
			if !replicated(s.lrow[t]) && routesTo(b.idx[t*K:(t+1)*K], p*TP+tp) {
				copy(b.send[nsend*D:(nsend+1)*D], x[t*D:(t+1)*D])
				b.sendRows[nsend] = int32(t)
				nsend++
				c++
			}
		}
		b.sendCounts[p] = c * D
	}
	// Rows it receives: from peer p, the rows of p's block routed to its own
	// experts, in the order p sends them.
	nrecv := 0
	for p := 0; p < P; p++ {
		c := 0
		for t, br := range s.part.Tokens(p)[:M] {
			ri := allIdx[(p*M+t)*K : (p*M+t+1)*K]
			if !replicated(br) && routesTo(ri, me) {
				copy(b.recvIdx[nrecv*K:(nrecv+1)*K], ri)
				copy(b.recvW[nrecv*K:(nrecv+1)*K], allW[(p*M+t)*K:(p*M+t+1)*K])
				nrecv++
				c++
			}
		}
		b.recvCounts[p] = c * D
	}
	recv := b.recv[:nrecv*D]
	if err := comm.AllToAllV(ctx, g, recv, b.send[:nsend*D], b.sendCounts, b.recvCounts); err != nil {
		return fmt.Errorf("expert dispatch: %w", err)
	}
	acc := b.acc[:nrecv*D]
	clear(acc)
	b.runExperts(li, L, recv, nrecv, b.recvIdx, b.recvW, acc)
	back := b.back[:nsend*D]
	if err := comm.AllToAllV(ctx, g, back, acc, b.recvCounts, b.sendCounts); err != nil {
		return fmt.Errorf("expert combine: %w", err)
	}
	for i, t := range b.sendRows[:nsend] {
		kernels.Axpy(1, back[i*D:(i+1)*D], out[int(t)*D:(int(t)+1)*D])
	}
	return b.replicatedRows(li, L, x, out, replicated)
}

// replicatedRows adds to out the routed experts of the rows every PCP rank
// holds: each rank computes its own experts over them, and the partials are
// all-reduced over the PCP group (every rank holds the same such rows in the
// same order, so the count agrees).
func (b *moeBlock) replicatedRows(li int, L *MoE, x, out []float32, replicated func(int32) bool) error {
	s, K, D := b.steps, b.K, b.D
	M := s.nLocal
	n := 0
	for t := 0; t < M; t++ {
		ri := b.replIdx[t*K : (t+1)*K]
		if replicated(s.lrow[t]) {
			copy(ri, b.idx[t*K:(t+1)*K])
			n++
		} else {
			for k := range ri {
				ri[k] = -1
			}
		}
	}
	if n == 0 {
		return nil
	}
	acc := b.replAcc[:M*D]
	clear(acc)
	b.runExperts(li, L, x, M, b.replIdx, b.w, acc)
	pack, sum := b.replPack[:n*D], b.replSum[:n*D]
	i := 0
	for t := 0; t < M; t++ {
		if replicated(s.lrow[t]) {
			copy(pack[i*D:(i+1)*D], acc[t*D:(t+1)*D])
			i++
		}
	}
	if err := comm.AllReduce(b.par.ctx(), b.par.Groups.PCP, sum, pack); err != nil {
		return fmt.Errorf("replicated-row expert all-reduce: %w", err)
	}
	i = 0
	for t := 0; t < M; t++ {
		if replicated(s.lrow[t]) {
			kernels.Axpy(1, sum[i*D:(i+1)*D], out[t*D:(t+1)*D])
			i++
		}
	}
	return nil
}

// RouteTrace receives, when set on a Runner, the experts each row routes to
// in each routed layer (best first). It exists for verification; production
// steps leave it nil.
type RouteTrace func(layer int, pos int32, seq int32, experts []int32)
