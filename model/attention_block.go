package model

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
)

// attentionBlock runs MLA with the DSA indexer for a step's local rows over
// one layer's paged cache: the projections, the cache write (after a PCP
// gather of the step's rows), the indexer's exact global top-k (gathered
// over the DCP group), sparse attention on the local KV shard, the LSE
// combine, and the value and output projections. It owns every attention
// buffer, sized once for the worst step.
type attentionBlock struct {
	m     *Model
	steps *stepTables
	par   *Parallel
	trace *SelectionTrace
	reads *weightReads
	// split computes q_a, kv_a and the indexer's query projection, each TP
	// member its share of their output rows.
	split *splitProducts

	topk                int // indices per row: index_topk, or MaxModelLen for dense MLA
	rowBytes, keyBytes  int // cache bytes of a row and of an indexer key (StepCost)
	idxWidth, scoreCols int
	compact             bool
	layer               int // layer being run (for the trace)

	cq, q, kva, qabs, attnOut, lse, o []float32
	headScratch                       []float32 // the per-head products' rows (kernels.MatMulTHeads)
	qI, kI, wI, scores                []float32
	idxPos, indices, valid            []int32
	ends, rowReq, rowLens             []int32
	ws                                *mla.Workspace
	idxScratch                        *mla.IndexerScratch
	idxSeqs                           []mla.IndexerSeq // sequences scored together (scoreSeq)
	// dcp is the exchange over the DCP group; nil without DCP.
	dcp *dcpExchange
	// PCP exchange of the step's new cache rows and keys
	kvPack, kvG []float32
}

// newAttentionBlock sizes every attention buffer for opt.
func newAttentionBlock(m *Model, steps *stepTables, opt RunnerOptions, trace *SelectionTrace, reads *weightReads, bufs *bufferList) (*attentionBlock, error) {
	cfg := m.Cfg
	a := &attentionBlock{m: m, steps: steps, par: opt.Parallel, trace: trace, reads: reads}
	T, H := opt.MaxTokens, m.Heads
	dn, dr, dv, dc := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	N := steps.layout.N
	a.topk = opt.MaxModelLen
	if cfg.Sparse() {
		a.topk = cfg.IndexTopK
	}
	if p := opt.Parallel; p != nil && p.Backend != nil {
		a.compact = p.Backend.Route(cp.RowDecode).CompactIndices
	}
	a.rowBytes = kvcache.RowBytes(opt.KVDType)
	if cfg.Sparse() {
		a.keyBytes = kvcache.KeyBytes(opt.IndexerDType, cfg.IndexHeadDim)
	}
	var tp comm.Group
	if p := opt.Parallel; p != nil {
		tp = p.Groups.TP
	}
	a.split = newSplitProducts(tp, T, replicatedProjections(m), "tp-split projections", bufs)
	f, i32 := bufs.f32, bufs.i32
	a.cq, a.q = f("q latent", T*max(cfg.QLoraRank, 1)), f("q", T*H*(dn+dr))
	a.kva = f("kv latent", T*(dc+dr))
	a.qabs = f("absorbed q", T*H*mla.RowDim)
	a.attnOut, a.lse = f("attention out", T*H*mla.LatentDim), f("attention lse", T*H)
	a.o = f("value heads", T*H*dv)
	// The per-head products gather a head's rows and take their product:
	// W_UKᵀ [dc, dn] from q_nope, W_UV [dv, dc] from the attention output.
	a.headScratch = f("head gather", T*max(dn+dc, dc+dv))
	localKeys := steps.layout.LocalLen(opt.MaxModelLen, 0) // rank 0 owns the most
	if cfg.Sparse() {
		a.idxWidth = cfg.IndexNHeads*cfg.IndexHeadDim + cfg.IndexNHeads
		a.qI = f("indexer q", T*cfg.IndexNHeads*cfg.IndexHeadDim)
		a.kI = f("indexer k", T*cfg.IndexHeadDim)
		a.wI = f("indexer weights", T*cfg.IndexNHeads)
		a.ends = i32("indexer query ends", T)
		a.idxScratch = mla.NewIndexerScratch(cfg.IndexNHeads, cfg.IndexHeadDim)
		bufs.add("indexer key scratch", mla.IndexerScratchBytes(cfg.IndexNHeads, cfg.IndexHeadDim))
		a.idxSeqs = make([]mla.IndexerSeq, 0, indexerSeqBatch)
		bufs.add("indexer sequences", indexerSeqBatch*int64(unsafe.Sizeof(mla.IndexerSeq{})))
	}
	// Rows whose top-k this rank computes: its own rows without DCP; every
	// distinct PCP row block of its DCP group with DCP.
	blocks := 1
	if N > 1 {
		a.dcp = &dcpExchange{}
		blocks = a.dcp.rowBlocks(a.par)
	}
	sel := blocks * T
	if cfg.Sparse() {
		a.scoreCols = localKeys
		a.scores = f("indexer scores", sel*localKeys)
		a.idxPos = i32("top-k positions", sel*a.topk)
		a.rowLens = i32("indexer row lengths", T)
	}
	a.indices = i32("top-k slots", sel*a.topk)
	a.valid = i32("top-k counts", sel)
	a.rowReq = i32("top-k row requests", sel)
	a.ws = mla.NewWorkspace(a.topk, N*H)
	bufs.add("attention workspace", mla.WorkspaceBytes(a.topk, N*H))
	if N > 1 {
		if err := a.dcp.size(a, opt, bufs); err != nil {
			return nil, err
		}
	}
	if P := steps.pcp(); P > 1 {
		kvw := dc + dr
		if cfg.Sparse() {
			kvw += cfg.IndexHeadDim
		}
		a.kvPack, a.kvG = f("pcp kv pack", T*kvw), f("pcp kv gather", P*T*kvw)
	}
	return a, nil
}

// forward runs attention of layer li for the step's local rows: x [M, D] is
// the normed input, u [M, D] receives this rank's o_proj partial (the caller
// all-reduces it over TP).
func (a *attentionBlock) forward(li int, at *Attention, lc *kvcache.LayerCache, x, u []float32) error {
	m, cfg, s := a.m, a.m.Cfg, a.steps
	a.layer = li
	H := m.Heads
	dn, dr, dv, dc := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	eps := float32(cfg.RMSNormEps)
	ctx := a.par.ctx()
	qw := dn + dr
	M := s.nLocal
	// Query path.
	q := a.q[:M*H*qw]
	var cq []float32
	if at.QA != nil {
		dq := cfg.QLoraRank
		cq = a.cq[:M*dq]
		if err := a.split.mul(ctx, cq, x, M, at.QA, a.reads); err != nil {
			return fmt.Errorf("q_a: %w", err)
		}
		for t := 0; t < M; t++ {
			kernels.RMSNorm(cq[t*dq:(t+1)*dq], cq[t*dq:(t+1)*dq], at.QANorm, eps)
		}
		a.reads.mul(q, cq, M, at.QB)
	} else {
		cq = x
		a.reads.mul(q, x, M, at.QB)
	}
	for t := 0; t < M; t++ {
		cs := s.ropeAngles(t)
		for h := 0; h < H; h++ {
			base := (t*H+h)*qw + dn
			m.Rope.Rotate(q[base:base+dr], cs, cfg.RopeInterleave)
		}
	}
	// Latent KV: normalize and rotate.
	kva := a.kva[:M*(dc+dr)]
	if err := a.split.mul(ctx, kva, x, M, at.KVA, a.reads); err != nil {
		return fmt.Errorf("kv_a: %w", err)
	}
	for t := 0; t < M; t++ {
		rowv := kva[t*(dc+dr) : (t+1)*(dc+dr)]
		kernels.RMSNorm(rowv[:dc], rowv[:dc], at.KVANorm, eps)
		m.Rope.Rotate(rowv[dc:], s.ropeAngles(t), cfg.RopeInterleave)
	}
	if at.Indexer != nil {
		if err := a.indexerProject(ctx, at.Indexer, cq, x); err != nil {
			return err
		}
	}
	// The step's KV goes into the cache before any row attends.
	if err := a.writeKV(lc); err != nil {
		return err
	}
	// Absorb q_nope through W_UK per head: Q = [W_UKᵀ q_nope | q_pe], the
	// heads' products split across threads.
	qabs := a.qabs[:M*H*mla.RowDim]
	a.reads.mulHeads(qabs, H*mla.RowDim, mla.RowDim, q, H*qw, qw, M, at.WUKT, a.headScratch)
	for t := 0; t < M; t++ {
		for h := 0; h < H; h++ {
			copy(qabs[(t*H+h)*mla.RowDim+dc:(t*H+h+1)*mla.RowDim], q[(t*H+h)*qw+dn:(t*H+h+1)*qw])
		}
	}
	out := a.attnOut[:M*H*mla.LatentDim]
	if s.layout.N == 1 {
		t0 := a.reads.start()
		selected := a.selectLocal(lc)
		a.reads.took(opIndexer, t0) // scores and top-k, when sparse
		a.countAttention(selected, H)
		t0 = a.reads.start()
		mla.SparseAttention(out, a.lse[:M*H], nil, a.qabs[:M*H*mla.RowDim], M, H, lc, a.indices[:M*a.topk], a.topk, nil, m.Scale, a.ws)
		a.reads.took(opAttention, t0)
	} else if err := a.attendDCP(lc, out); err != nil {
		return err
	}
	// Up-project values per head and the output projection.
	o := a.o[:M*H*dv]
	a.reads.mulHeads(o, H*dv, dv, out, H*mla.LatentDim, mla.LatentDim, M, at.WUV, a.headScratch)
	a.reads.mul(u, o, M, at.O)
	return nil
}

// indexerProject computes the indexer queries, head weights and keys of the
// local rows.
func (a *attentionBlock) indexerProject(ctx context.Context, ix *Indexer, cq, x []float32) error {
	m, cfg, s := a.m, a.m.Cfg, a.steps
	HI, dI, dr := cfg.IndexNHeads, cfg.IndexHeadDim, cfg.QKRopeHeadDim
	M := s.nLocal
	qI := a.qI[:M*HI*dI]
	if err := a.split.mul(ctx, qI, cq, M, ix.WQB, a.reads); err != nil {
		return fmt.Errorf("indexer wq_b: %w", err)
	}
	kI := a.kI[:M*dI]
	a.reads.mul(kI, x, M, ix.WK)
	wI := a.wI[:M*HI]
	a.reads.mul(wI, x, M, ix.WProj)
	for i := range wI {
		wI[i] *= m.IdxScal
	}
	for t := 0; t < M; t++ {
		cs := s.ropeAngles(t)
		for h := 0; h < HI; h++ {
			m.Rope.Rotate(qI[(t*HI+h)*dI:(t*HI+h)*dI+dr], cs, cfg.IndexerRopeInterleave)
		}
		k := kI[t*dI : (t+1)*dI]
		kernels.LayerNorm(k, k, ix.NormW, ix.NormB, 1e-6)
		m.Rope.Rotate(k[:dr], cs, cfg.IndexerRopeInterleave)
	}
	return nil
}

// replicatedProjections lists the products every TP member would otherwise
// compute whole (q_a, kv_a and the indexer's query projection) of every
// decoder and MTP layer; splitProducts shares their output rows out.
func replicatedProjections(m *Model) []*kernels.Matrix {
	var ws []*kernels.Matrix
	add := func(at *Attention) {
		if at.QA != nil {
			ws = append(ws, at.QA)
		}
		ws = append(ws, at.KVA)
		if at.Indexer != nil {
			ws = append(ws, at.Indexer.WQB)
		}
	}
	for i := range m.Layers {
		add(&m.Layers[i].Attn)
	}
	for k := range m.MTP {
		add(&m.MTP[k].Block.Attn)
	}
	return ws
}

// writeKV stores the step's cache rows and indexer keys at the positions this
// rank owns. Under PCP the rows of every PCP rank are all-gathered first, so
// each owner sees every new position.
func (a *attentionBlock) writeKV(lc *kvcache.LayerCache) error {
	cfg, s := a.m.Cfg, a.steps
	rw := cfg.KVLoraRank + cfg.QKRopeHeadDim
	kw := 0
	if cfg.Sparse() {
		kw = cfg.IndexHeadDim
	}
	M := s.nLocal
	write := func(br int32, row, key []float32) {
		if br < 0 {
			return
		}
		slot := s.layout.Slot(s.tables[s.rowSeq[br]], s.blockSize, int(s.rowPos[br]), s.dcpRank)
		if slot < 0 {
			return
		}
		lc.WriteRow(slot, row)
		if kw > 0 {
			lc.WriteKey(slot, key)
		}
	}
	if s.part == nil {
		for t := 0; t < M; t++ {
			write(s.lrow[t], a.kva[t*rw:(t+1)*rw], a.kI[t*kw:(t+1)*kw])
		}
		return nil
	}
	w := rw + kw
	pack := a.kvPack[:M*w]
	for t := 0; t < M; t++ {
		copy(pack[t*w:t*w+rw], a.kva[t*rw:(t+1)*rw])
		copy(pack[t*w+rw:(t+1)*w], a.kI[t*kw:(t+1)*kw])
	}
	P := s.pcp()
	all := a.kvG[:P*M*w]
	if err := comm.AllGather(a.par.ctx(), a.par.Groups.PCP, all, pack); err != nil {
		return fmt.Errorf("pcp kv gather: %w", err)
	}
	for p := 0; p < P; p++ {
		for t, br := range s.part.Tokens(p)[:M] {
			row := all[(p*M+t)*w : (p*M+t+1)*w]
			write(br, row[:rw], row[rw:])
		}
	}
	return nil
}

// countAttention adds to the step's cost attention over rows selected
// cache rows by a call of heads heads.
func (a *attentionBlock) countAttention(rows, heads int) {
	a.reads.add(opAttention, int64(rows)*int64(a.rowBytes), 2*int64(rows)*int64(heads)*(mla.RowDim+mla.LatentDim))
}

// countIndexer adds to the step's cost the scoring of keys indexer keys
// against one query row.
func (a *attentionBlock) countIndexer(keys int) {
	cfg := a.m.Cfg
	a.reads.add(opIndexer, int64(keys)*int64(a.keyBytes), 2*int64(keys)*int64(cfg.IndexNHeads)*int64(cfg.IndexHeadDim))
}

// validSlots is the number of entries of indices that name a cache slot.
func validSlots(indices []int32) int {
	n := 0
	for _, s := range indices {
		if s >= 0 {
			n++
		}
	}
	return n
}

// selectLocal fills indices [M, K] with the cache slots every local row
// attends to when this rank holds every key (no DCP): the indexer's top-k,
// or every causal key for dense MLA. It returns the number of slots
// selected over all rows. Each row's scores go to its own row of a.scores,
// so that the rows' top-k run at once, spread over the threads (a prompt's
// rows would otherwise select one after another on one thread).
func (a *attentionBlock) selectLocal(lc *kvcache.LayerCache) (selected int) {
	cfg, s := a.m.Cfg, a.steps
	K, M := a.topk, s.nLocal
	var pos, counts []int32
	if cfg.Sparse() {
		W := a.scoreCols
		lens := a.rowLens[:M]
		// The rows of one sequence (a prompt's, a verification's) share
		// its keys: they are scored together, each key gathered once for
		// every row that sees it, row t's scores at row t of a.scores; the
		// sequences of the step are scored in one call (scoreSeq).
		for t := 0; t < M; {
			if s.lrow[t] < 0 {
				lens[t] = 0
				t++
				continue
			}
			u, keys := s.sequenceRun(s.lrow[:M], t), 0
			for v := t; v < u; v++ {
				end := int(s.rowPos[s.lrow[v]]) + 1
				a.ends[v], lens[v] = int32(end), int32(end)
				keys = max(keys, end)
				a.countIndexer(end)
			}
			slots := s.keys(int(s.rowSeq[s.lrow[t]]))
			a.scoreSeq(a.scores, W, a.qI, a.wI, lc, mla.IndexerSeq{Row: t, Rows: u - t, Slots: slots[:keys], Ends: a.ends[t:u]})
			t = u
		}
		a.flushSeqs(a.scores, W, a.qI, a.wI, lc)
		pos, counts = a.idxPos[:M*K], a.valid[:M]
		mla.IndexerTopKRows(pos, counts, a.scores[:M*W], W, lens)
	}
	for t := range M {
		dst := a.indices[t*K : (t+1)*K]
		br := s.lrow[t]
		if br < 0 {
			fillInvalid(dst)
			continue
		}
		slots := s.keys(int(s.rowSeq[br]))
		if pos == nil {
			// Dense MLA: every causal key.
			end := int(s.rowPos[br]) + 1
			for k := range dst {
				dst[k] = -1
				if k < end {
					dst[k] = slots[k]
				}
			}
			selected += min(end, K)
			continue
		}
		p := pos[t*K : (t+1)*K]
		selected += int(counts[t])
		if *a.trace != nil {
			(*a.trace)(a.layer, s.rowPos[br], s.rowSeq[br], p[:counts[t]])
		}
		for k, i := range p {
			dst[k] = -1
			if i >= 0 {
				dst[k] = slots[i]
			}
		}
	}
	return selected
}

// indexerSeqBatch is how many sequences' indexer rows scoreSeq gathers
// before it scores them in one mla.IndexerScoresSeqs call.
const indexerSeqBatch = 64

// scoreSeq adds seq to the sequences whose indexer rows flushSeqs scores
// together (rows of scores of width W, queries and head weights of the
// rows in q and w), scoring those gathered so far first when the batch is
// full. The rows of a decode batch are each their own sequence, too short
// to be worth splitting over the threads alone; scored together they take
// the threads with one hand-off for all, with the bits of scoring each
// alone.
func (a *attentionBlock) scoreSeq(scores []float32, W int, q, w []float32, lc *kvcache.LayerCache, seq mla.IndexerSeq) {
	if len(a.idxSeqs) == cap(a.idxSeqs) {
		a.flushSeqs(scores, W, q, w, lc)
	}
	a.idxSeqs = append(a.idxSeqs, seq)
}

// flushSeqs scores the sequences scoreSeq gathered.
func (a *attentionBlock) flushSeqs(scores []float32, W int, q, w []float32, lc *kvcache.LayerCache) {
	if len(a.idxSeqs) > 0 {
		cfg := a.m.Cfg
		mla.IndexerScoresSeqs(a.idxScratch, scores, W, q, w, cfg.IndexNHeads, cfg.IndexHeadDim, lc, a.idxSeqs)
	}
	clear(a.idxSeqs)
	a.idxSeqs = a.idxSeqs[:0]
}

func fillInvalid(s []int32) {
	for i := range s {
		s[i] = -1
	}
}

// SelectionTrace receives, when set on a Runner, the positions each row
// selected in each layer (sorted as the indexer returned them). It exists for
// verification; production steps leave it nil.
type SelectionTrace func(layer int, pos int32, seq int32, positions []int32)
