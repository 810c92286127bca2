package model

import (
	"context"
	"fmt"
	"math"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
)

// Seq is one request's share of a step: the new tokens it runs and where they
// sit in its sequence.
type Seq struct {
	Tokens     []int32 // new tokens of this step
	Start      int     // position of Tokens[0] (= tokens already in the cache)
	BlockTable []int32 // cache blocks of the request, in order (the same on every rank)
	// LogitsAll asks for logits after every new token instead of only the last.
	LogitsAll bool
}

// Batch is the work of one step. Under TP/DCP/PCP every rank runs the same
// (replicated) Batch; each derives its own rows, heads and KV shard from it.
type Batch struct {
	Seqs []Seq
	// Copies are block copies (copy-on-write of a forked sequence's last,
	// partial block) done on every rank before any of the step's KV is
	// written.
	Copies []BlockCopy
}

// BlockCopy copies the KV of cache block Src into block Dst (every layer,
// each rank its own slots of the block).
type BlockCopy struct{ Src, Dst int32 }

// Parallel places a Runner in a TP × PCP world with DCP-sharded KV.
type Parallel struct {
	Layout     comm.Layout
	Groups     comm.Groups // this rank's groups (Layout.Split of its world group)
	Interleave int         // --cp-kv-cache-interleave-size
	Backend    *cp.BackendPlan
	// Ctx bounds every collective of the runner's steps.
	Ctx context.Context
}

// RunnerOptions sizes a Runner once, at start-up.
type RunnerOptions struct {
	MaxTokens    int // tokens per step (the whole batch, before any PCP split)
	MaxModelLen  int // longest sequence
	MaxLogitRows int // rows per step that may ask for logits
	MaxSeqs      int // sequences per step
	BlockSize    int
	NumBlocks    int
	KVDType      kvcache.KVDType
	IndexerDType kvcache.IndexerDType
	// Parallel is nil for a single rank.
	Parallel *Parallel
}

// Runner executes forward steps of one rank over its paged KV cache. Every
// buffer is sized from RunnerOptions when it is created and never grows.
//
// With Parallel set, the rank holds its TP heads, its DCP shard of the KV
// cache (kvcache.Layout ownership) and, under PCP, its DualChunkSwap share of
// the prefill rows. Attention under DCP gathers the absorbed queries (and the
// indexer queries) of the DCP group, scores this rank's keys, merges the exact
// global top-k, attends over the local shard and combines the partials by
// their LSE (cp.Combiner, ag_rs or a2a). Every collective's count derives from
// the replicated Batch, so all ranks issue the same sequence.
type Runner struct {
	M      *Model
	Cache  *kvcache.Cache
	Layout kvcache.Layout // DCP ownership of KV positions
	Opt    RunnerOptions
	// Trace, when set, observes every row's selected positions.
	Trace SelectionTrace

	par                 *Parallel
	dcpRank             int
	pcpRank             int
	part                *cp.Partition // PCP > 1
	partLens            []int32
	partPrefill         []bool
	qgather             *cp.QueryGather
	comb                *cp.Combiner
	tk                  *cp.TopK
	blockDistinct       []int // DCP member → index of its PCP row block
	distinctPCP         []int // PCP rank of each distinct row block of the DCP group
	compact             bool
	curLayer            int
	topk                int // indices per row: index_topk, or MaxModelLen for dense MLA
	idxWidth, scoreCols int

	// per-step tables
	rowPos, rowSeq, rowTok []int32 // per batch row
	lrow                   []int32 // local row → batch row (−1 = padding)
	nLocal                 int
	keySlot                []int32 // slots of this rank's local keys of each seq, back to back
	keyOff                 []int
	keyLen                 []int32
	tables                 [][]int32
	rowReq                 []int32
	logitRow               []int32 // batch rows whose logits are computed
	// activations
	h, x, cq, q, kva, qabs, attnOut, lse, o, u, red []float32
	gather, gatherOut                               []float32
	gate, up                                        []float32
	qI, kI, wI, scores                              []float32
	idxPos, idxCount, indices, valid                []int32
	ends                                            []int32
	logits                                          []float32
	// DCP / PCP exchange buffers
	qG, attnG, lseG []float32
	idxPack, idxG   []float32
	kvPack, kvG     []float32
	hAll, hRest     []float32
	ws              *mla.Workspace
	idxScratch      *mla.IndexerScratch
	buffers         []Buffer
}

// Buffer names one persistent step buffer and its size.
type Buffer struct {
	Name  string
	Bytes int64
}

func (r *Runner) track(name string, bytes int64) {
	for i := range r.buffers {
		if r.buffers[i].Name == name {
			r.buffers[i].Bytes += bytes
			return
		}
	}
	r.buffers = append(r.buffers, Buffer{name, bytes})
}

// Buffers lists every persistent step buffer the runner allocated at
// construction, in allocation order. The KV cache is separate (Cache.Bytes).
func (r *Runner) Buffers() []Buffer { return r.buffers }

// BufferBytes is the total of Buffers.
func (r *Runner) BufferBytes() int64 {
	var n int64
	for _, b := range r.buffers {
		n += b.Bytes
	}
	return n
}

func (r *Runner) tp() int {
	if r.par == nil {
		return 1
	}
	return r.par.Layout.TP
}

func (r *Runner) pcp() int {
	if r.par == nil {
		return 1
	}
	return r.par.Layout.PCP
}

// NewRunner allocates the cache and every step buffer for opt.
func NewRunner(m *Model, opt RunnerOptions) (*Runner, error) {
	cfg := m.Cfg
	if opt.MaxTokens <= 0 || opt.MaxModelLen <= 0 || opt.BlockSize <= 0 || opt.NumBlocks <= 0 {
		return nil, fmt.Errorf("runner options need positive max tokens, max model len, block size and block count, got %+v", opt)
	}
	if opt.MaxSeqs <= 0 {
		opt.MaxSeqs = 1
	}
	if opt.MaxLogitRows <= 0 {
		opt.MaxLogitRows = 1
	}
	if opt.MaxLogitRows > opt.MaxTokens {
		opt.MaxLogitRows = opt.MaxTokens
	}
	if opt.KVDType == "" {
		opt.KVDType = "f32"
	}
	if opt.IndexerDType == "" {
		opt.IndexerDType = "f32"
	}
	indexDim := 0 // dense MLA keeps no indexer keys
	if cfg.Sparse() {
		indexDim = cfg.IndexHeadDim
	}
	cache, err := kvcache.NewCache(cfg.NumLayers, opt.NumBlocks, opt.BlockSize, opt.KVDType, opt.IndexerDType, indexDim)
	if err != nil {
		return nil, fmt.Errorf("allocate KV cache: %w", err)
	}
	r := &Runner{M: m, Cache: cache, Layout: kvcache.Layout{N: 1, I: 1}, Opt: opt, par: opt.Parallel}
	N, P := 1, 1
	if p := opt.Parallel; p != nil {
		l := p.Layout
		rank := p.Groups.World.Rank()
		if l.TP != m.Shard.TPSize || l.TPRank(rank) != m.Shard.TPRank {
			return nil, fmt.Errorf("model shard TP %d/%d does not match rank %d of layout TP=%d", m.Shard.TPRank, m.Shard.TPSize, rank, l.TP)
		}
		if p.Interleave < 1 {
			p.Interleave = 1
		}
		N, P = l.DCP, l.PCP
		r.Layout = kvcache.Layout{N: N, I: p.Interleave}
		if err := r.Layout.Validate(opt.BlockSize); err != nil {
			return nil, err
		}
		r.dcpRank, r.pcpRank = l.DCPRank(rank), l.PCPRank(rank)
		if p.Backend != nil {
			r.compact = p.Backend.Route(cp.RowDecode).CompactIndices
		}
	}
	r.topk = opt.MaxModelLen
	if cfg.Sparse() {
		r.topk = cfg.IndexTopK
	}
	T, H := opt.MaxTokens, m.Heads
	D, dn, dr, dv, dc := cfg.HiddenSize, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	qIn := max(cfg.QLoraRank, 1)
	f := func(name string, n int) []float32 { r.track(name, int64(n)*4); return make([]float32, n) }
	i32 := func(name string, n int) []int32 { r.track(name, int64(n)*4); return make([]int32, n) }
	r.rowPos, r.rowSeq, r.rowTok = i32("row positions", T), i32("row sequences", T), i32("row tokens", T)
	r.lrow = i32("local rows", T)
	localKeys := r.Layout.LocalLen(opt.MaxModelLen, 0) // rank 0 owns the most
	r.keySlot = i32("key slots", opt.MaxSeqs*localKeys)
	r.keyOff = make([]int, 0, opt.MaxSeqs)
	r.keyLen = make([]int32, 0, opt.MaxSeqs)
	r.tables = make([][]int32, 0, opt.MaxSeqs)
	r.logitRow = i32("logit rows", opt.MaxLogitRows)[:0]
	r.h, r.x = f("hidden", T*D), f("normed hidden", T*D)
	r.cq, r.q = f("q latent", T*qIn), f("q", T*H*(dn+dr))
	r.kva = f("kv latent", T*(dc+dr))
	r.qabs = f("absorbed q", T*H*mla.RowDim)
	r.attnOut, r.lse = f("attention out", T*H*mla.LatentDim), f("attention lse", T*H)
	r.o, r.u = f("value heads", T*H*dv), f("layer out", T*D)
	if r.tp() > 1 {
		r.red = f("tp all-reduce", T*D)
	}
	r.gather, r.gatherOut = f("head gather", T*max(dn, dc)), f("head gather out", T*max(dc, dv))
	il := m.Layers[0].IntermediateSize
	r.gate, r.up = f("mlp gate", T*il), f("mlp up", T*il)
	idxW := 0
	if cfg.Sparse() {
		idxW = cfg.IndexNHeads*cfg.IndexHeadDim + cfg.IndexNHeads
		r.qI = f("indexer q", T*cfg.IndexNHeads*cfg.IndexHeadDim)
		r.kI = f("indexer k", T*cfg.IndexHeadDim)
		r.wI = f("indexer weights", T*cfg.IndexNHeads)
		r.idxCount = make([]int32, 1)
		r.ends = make([]int32, 1)
		r.idxScratch = mla.NewIndexerScratch(cfg.IndexNHeads, cfg.IndexHeadDim)
		r.track("indexer key scratch", mla.IndexerScratchBytes(cfg.IndexNHeads, cfg.IndexHeadDim))
	}
	r.idxWidth = idxW
	// Rows whose top-k this rank computes: its own rows without DCP; every
	// distinct PCP row block of its DCP group with DCP.
	blocks := 1
	if N > 1 {
		l := r.par.Layout
		members := l.DCPMembers(r.par.Groups.World.Rank())
		seen := map[int]int{}
		r.blockDistinct = make([]int, len(members))
		for j, w := range members {
			pr := l.PCPRank(w)
			d, ok := seen[pr]
			if !ok {
				d = len(r.distinctPCP)
				seen[pr] = d
				r.distinctPCP = append(r.distinctPCP, pr)
			}
			r.blockDistinct[j] = d
		}
		blocks = len(r.distinctPCP)
	}
	sel := blocks * T
	if cfg.Sparse() {
		r.scoreCols = localKeys
		r.scores = f("indexer scores", sel*localKeys)
		r.idxPos = i32("top-k positions", sel*r.topk)
	}
	r.indices = i32("top-k slots", sel*r.topk)
	r.valid = i32("top-k counts", sel)
	r.rowReq = i32("top-k row requests", sel)
	r.logits = f("logits", opt.MaxLogitRows*cfg.VocabSize)
	r.ws = mla.NewWorkspace(r.topk, N*H)
	r.track("attention workspace", mla.WorkspaceBytes(r.topk, N*H))
	if N > 1 {
		comm := "ag_rs"
		if r.par.Backend != nil {
			comm = r.par.Backend.Comm
		}
		if r.qgather, err = cp.NewQueryGather(N, T, H, mla.RowDim); err != nil {
			return nil, err
		}
		if r.comb, err = cp.NewCombiner(comm, N, T, H, mla.LatentDim); err != nil {
			return nil, err
		}
		r.track("dcp combine", r.comb.Bytes())
		r.qG = f("dcp query gather", T*N*H*mla.RowDim)
		r.attnG, r.lseG = f("dcp partial out", T*N*H*mla.LatentDim), f("dcp partial lse", T*N*H)
		if cfg.Sparse() {
			if r.tk, err = cp.NewTopK(r.Layout, r.dcpRank, sel, r.topk, opt.MaxModelLen); err != nil {
				return nil, err
			}
			r.idxPack, r.idxG = f("indexer query pack", T*idxW), f("indexer query gather", N*T*idxW)
		}
	}
	if P > 1 {
		if r.part, err = cp.NewPartition(P, T); err != nil {
			return nil, err
		}
		kvw := dc + dr
		if cfg.Sparse() {
			kvw += cfg.IndexHeadDim
		}
		r.partLens, r.partPrefill = make([]int32, opt.MaxSeqs), make([]bool, opt.MaxSeqs)
		r.kvPack, r.kvG = f("pcp kv pack", T*kvw), f("pcp kv gather", P*T*kvw)
		r.hAll, r.hRest = f("pcp hidden gather", P*T*D), f("pcp hidden restore", T*D)
	}
	return r, nil
}

// Logits returns the logits of the i-th logit row of the last step and the
// batch row it belongs to.
func (r *Runner) Logits(i int) (row int, logits []float32) {
	V := r.M.Cfg.VocabSize
	return int(r.logitRow[i]), r.logits[i*V : (i+1)*V]
}

// NumLogitRows is the number of logit rows the last step produced.
func (r *Runner) NumLogitRows() int { return len(r.logitRow) }

func (r *Runner) ctx() context.Context {
	if r.par == nil || r.par.Ctx == nil {
		return context.Background()
	}
	return r.par.Ctx
}

// Forward runs one step: it writes the step's KV into the cache (each rank
// the positions it owns), runs every layer, and computes logits for the last
// token of each sequence (or every token where LogitsAll is set).
func (r *Runner) Forward(b *Batch) error {
	cfg, m := r.M.Cfg, r.M
	T := 0
	for _, s := range b.Seqs {
		T += len(s.Tokens)
	}
	r.logitRow = r.logitRow[:0]
	for _, c := range b.Copies {
		if err := r.Cache.CopyBlock(c.Dst, c.Src); err != nil {
			return err
		}
	}
	if T == 0 {
		return nil
	}
	if T > r.Opt.MaxTokens {
		return fmt.Errorf("step has %d tokens, more than max tokens %d", T, r.Opt.MaxTokens)
	}
	if len(b.Seqs) > r.Opt.MaxSeqs {
		return fmt.Errorf("step has %d sequences, more than max sequences %d", len(b.Seqs), r.Opt.MaxSeqs)
	}
	B := r.Cache.BlockSize()
	r.keyOff, r.keyLen = r.keyOff[:0], r.keyLen[:0]
	r.tables = r.tables[:0]
	row, off := 0, 0
	for si, s := range b.Seqs {
		end := s.Start + len(s.Tokens)
		if end > r.Opt.MaxModelLen {
			return fmt.Errorf("sequence %d reaches position %d, beyond max model len %d", si, end, r.Opt.MaxModelLen)
		}
		if need := (r.Layout.LocalLen(end, 0) + B - 1) / B; len(s.BlockTable) < need {
			return fmt.Errorf("sequence %d needs %d blocks for %d positions, block table has %d", si, need, end, len(s.BlockTable))
		}
		r.tables = append(r.tables, s.BlockTable)
		nk := r.Layout.LocalLen(end, r.dcpRank)
		r.keyOff = append(r.keyOff, off)
		r.keyLen = append(r.keyLen, int32(nk))
		for l := 0; l < nk; l++ {
			r.keySlot[off+l] = r.Layout.Slot(s.BlockTable, B, r.Layout.Global(l, r.dcpRank), r.dcpRank)
		}
		off += nk
		for j, tok := range s.Tokens {
			if tok < 0 || int(tok) >= cfg.VocabSize {
				return fmt.Errorf("sequence %d token %d is %d, outside the vocabulary [0, %d)", si, j, tok, cfg.VocabSize)
			}
			r.rowPos[row] = int32(s.Start + j)
			r.rowSeq[row] = int32(si)
			r.rowTok[row] = tok
			if s.LogitsAll || j == len(s.Tokens)-1 {
				if len(r.logitRow) == cap(r.logitRow) {
					return fmt.Errorf("step asks for more than %d logit rows", cap(r.logitRow))
				}
				r.logitRow = append(r.logitRow, int32(row))
			}
			row++
		}
	}
	// This rank's rows: all of them, or its DualChunkSwap share under PCP.
	if r.part != nil {
		if err := r.buildPartition(b); err != nil {
			return err
		}
		M := r.part.MaxRows()
		copy(r.lrow[:M], r.part.Tokens(r.pcpRank))
		r.nLocal = M
	} else {
		for i := 0; i < T; i++ {
			r.lrow[i] = int32(i)
		}
		r.nLocal = T
	}
	D := cfg.HiddenSize
	for i := 0; i < r.nLocal; i++ {
		h := r.h[i*D : (i+1)*D]
		if br := r.lrow[i]; br >= 0 {
			m.Embed.Row(int(r.rowTok[br]), h)
		} else {
			clear(h)
		}
	}
	for li := range m.Layers {
		r.curLayer = li
		if err := r.layer(li); err != nil {
			return fmt.Errorf("layer %d: %w", li, err)
		}
	}
	hid := r.h
	if r.part != nil {
		M := r.nLocal
		if err := comm.AllGather(r.ctx(), r.par.Groups.PCP, r.hAll[:r.pcp()*M*D], r.h[:M*D]); err != nil {
			return fmt.Errorf("pcp hidden gather: %w", err)
		}
		if err := r.part.RestoreRows(r.hRest[:T*D], r.hAll[:r.pcp()*M*D], D); err != nil {
			return err
		}
		hid = r.hRest
	}
	V := cfg.VocabSize
	for i, lr := range r.logitRow {
		x := r.x[:D]
		kernels.RMSNorm(x, hid[int(lr)*D:(int(lr)+1)*D], m.Norm, float32(cfg.RMSNormEps))
		kernels.MatMulT(r.logits[i*V:(i+1)*V], x, 1, m.LMHead)
	}
	return nil
}

// buildPartition splits the step's rows over the PCP ranks: prefill chunks
// (more than one new token) by DualChunkSwap, decodes replicated.
func (r *Runner) buildPartition(b *Batch) error {
	lens, pre := r.partLens[:len(b.Seqs)], r.partPrefill[:len(b.Seqs)]
	for i, s := range b.Seqs {
		lens[i] = int32(len(s.Tokens))
		pre[i] = len(s.Tokens) > 1
	}
	return r.part.Build(lens, pre)
}

func (r *Runner) layer(li int) error {
	m, cfg := r.M, r.M.Cfg
	L := &m.Layers[li]
	lc := r.Cache.Layer(li)
	D, H := cfg.HiddenSize, m.Heads
	dn, dr, dv, dc := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	eps := float32(cfg.RMSNormEps)
	qw := dn + dr
	M := r.nLocal

	for t := 0; t < M; t++ {
		kernels.RMSNorm(r.x[t*D:(t+1)*D], r.h[t*D:(t+1)*D], L.InputNorm, eps)
	}
	x := r.x[:M*D]
	// Query path.
	q := r.q[:M*H*qw]
	var cq []float32
	if L.QA != nil {
		dq := cfg.QLoraRank
		cq = r.cq[:M*dq]
		kernels.MatMulT(cq, x, M, L.QA)
		for t := 0; t < M; t++ {
			kernels.RMSNorm(cq[t*dq:(t+1)*dq], cq[t*dq:(t+1)*dq], L.QANorm, eps)
		}
		kernels.MatMulT(q, cq, M, L.QB)
	} else {
		cq = x
		kernels.MatMulT(q, x, M, L.QB)
	}
	for t := 0; t < M; t++ {
		pos := r.localPos(t)
		for h := 0; h < H; h++ {
			base := (t*H+h)*qw + dn
			m.Rope.Apply(q[base:base+dr], pos, cfg.RopeInterleave)
		}
	}
	// Latent KV: normalize and rotate.
	kva := r.kva[:M*(dc+dr)]
	kernels.MatMulT(kva, x, M, L.KVA)
	for t := 0; t < M; t++ {
		rowv := kva[t*(dc+dr) : (t+1)*(dc+dr)]
		kernels.RMSNorm(rowv[:dc], rowv[:dc], L.KVANorm, eps)
		m.Rope.Apply(rowv[dc:], r.localPos(t), cfg.RopeInterleave)
	}
	if cfg.Sparse() {
		r.indexerProject(L, cq, x)
	}
	// The step's KV goes into the cache before any row attends.
	if err := r.writeKV(lc); err != nil {
		return err
	}
	// Absorb q_nope through W_UK per head: Q = [W_UKᵀ q_nope | q_pe].
	for h := 0; h < H; h++ {
		g := r.gather[:M*dn]
		for t := 0; t < M; t++ {
			copy(g[t*dn:(t+1)*dn], q[(t*H+h)*qw:(t*H+h)*qw+dn])
		}
		gout := r.gatherOut[:M*dc]
		kernels.MatMulT(gout, g, M, &L.WUKT[h])
		for t := 0; t < M; t++ {
			dst := r.qabs[(t*H+h)*mla.RowDim : (t*H+h+1)*mla.RowDim]
			copy(dst[:dc], gout[t*dc:(t+1)*dc])
			copy(dst[dc:], q[(t*H+h)*qw+dn:(t*H+h+1)*qw])
		}
	}
	out := r.attnOut[:M*H*mla.LatentDim]
	if r.Layout.N == 1 {
		r.selectLocal(lc)
		mla.SparseAttention(out, r.lse[:M*H], nil, r.qabs[:M*H*mla.RowDim], M, H, lc, r.indices[:M*r.topk], r.topk, nil, m.Scale, r.ws)
	} else if err := r.attendDCP(lc, out); err != nil {
		return err
	}
	// Up-project values per head and the output projection.
	o := r.o[:M*H*dv]
	for h := 0; h < H; h++ {
		g := r.gather[:M*dc]
		for t := 0; t < M; t++ {
			copy(g[t*dc:(t+1)*dc], out[(t*H+h)*mla.LatentDim:(t*H+h+1)*mla.LatentDim])
		}
		gout := r.gatherOut[:M*dv]
		kernels.MatMulT(gout, g, M, &L.WUV[h])
		for t := 0; t < M; t++ {
			copy(o[(t*H+h)*dv:(t*H+h+1)*dv], gout[t*dv:(t+1)*dv])
		}
	}
	u := r.u[:M*D]
	kernels.MatMulT(u, o, M, L.O)
	if err := r.addReduced(u); err != nil {
		return fmt.Errorf("o_proj all-reduce: %w", err)
	}
	// Dense SwiGLU MLP.
	for t := 0; t < M; t++ {
		kernels.RMSNorm(r.x[t*D:(t+1)*D], r.h[t*D:(t+1)*D], L.PostNorm, eps)
	}
	il := L.IntermediateSize
	gate, up := r.gate[:M*il], r.up[:M*il]
	kernels.MatMulT(gate, x, M, L.Gate)
	kernels.MatMulT(up, x, M, L.Up)
	kernels.SwiGLU(gate, gate, up)
	kernels.MatMulT(u, gate, M, L.Down)
	if err := r.addReduced(u); err != nil {
		return fmt.Errorf("mlp all-reduce: %w", err)
	}
	return nil
}

// addReduced adds the TP-sum of the row-parallel partial u to the residual.
func (r *Runner) addReduced(u []float32) error {
	if r.tp() > 1 {
		red := r.red[:len(u)]
		if err := comm.AllReduce(r.ctx(), r.par.Groups.TP, red, u); err != nil {
			return err
		}
		u = red
	}
	kernels.Axpy(1, u, r.h[:len(u)])
	return nil
}

// localPos is the position of local row t (0 for padding rows).
func (r *Runner) localPos(t int) int {
	if br := r.lrow[t]; br >= 0 {
		return int(r.rowPos[br])
	}
	return 0
}

// indexerProject computes the indexer queries, head weights and keys of the
// local rows.
func (r *Runner) indexerProject(L *Layer, cq, x []float32) {
	m, cfg := r.M, r.M.Cfg
	HI, dI, dr := cfg.IndexNHeads, cfg.IndexHeadDim, cfg.QKRopeHeadDim
	M := r.nLocal
	qI := r.qI[:M*HI*dI]
	kernels.MatMulT(qI, cq, M, L.IdxWQB)
	kI := r.kI[:M*dI]
	kernels.MatMulT(kI, x, M, L.IdxWK)
	wI := r.wI[:M*HI]
	kernels.MatMulT(wI, x, M, L.IdxWProj)
	for i := range wI {
		wI[i] *= m.IdxScal
	}
	for t := 0; t < M; t++ {
		pos := r.localPos(t)
		for h := 0; h < HI; h++ {
			m.Rope.Apply(qI[(t*HI+h)*dI:(t*HI+h)*dI+dr], pos, cfg.IndexerRopeInterleave)
		}
		k := kI[t*dI : (t+1)*dI]
		kernels.LayerNorm(k, k, L.IdxNormW, L.IdxNormB, 1e-6)
		m.Rope.Apply(k[:dr], pos, cfg.IndexerRopeInterleave)
	}
}

// writeKV stores the step's cache rows and indexer keys at the positions this
// rank owns. Under PCP the rows of every PCP rank are all-gathered first, so
// each owner sees every new position.
func (r *Runner) writeKV(lc *kvcache.LayerCache) error {
	cfg := r.M.Cfg
	rw := cfg.KVLoraRank + cfg.QKRopeHeadDim
	kw := 0
	if cfg.Sparse() {
		kw = cfg.IndexHeadDim
	}
	M := r.nLocal
	write := func(br int32, row, key []float32) {
		if br < 0 {
			return
		}
		s := r.rowSeq[br]
		slot := r.Layout.Slot(r.tables[s], r.Cache.BlockSize(), int(r.rowPos[br]), r.dcpRank)
		if slot < 0 {
			return
		}
		lc.WriteRow(slot, row)
		if kw > 0 {
			lc.WriteKey(slot, key)
		}
	}
	if r.part == nil {
		for t := 0; t < M; t++ {
			write(r.lrow[t], r.kva[t*rw:(t+1)*rw], r.kI[t*kw:(t+1)*kw])
		}
		return nil
	}
	w := rw + kw
	pack := r.kvPack[:M*w]
	for t := 0; t < M; t++ {
		copy(pack[t*w:t*w+rw], r.kva[t*rw:(t+1)*rw])
		copy(pack[t*w+rw:(t+1)*w], r.kI[t*kw:(t+1)*kw])
	}
	P := r.pcp()
	all := r.kvG[:P*M*w]
	if err := comm.AllGather(r.ctx(), r.par.Groups.PCP, all, pack); err != nil {
		return fmt.Errorf("pcp kv gather: %w", err)
	}
	for p := 0; p < P; p++ {
		for t, br := range r.part.Tokens(p)[:M] {
			row := all[(p*M+t)*w : (p*M+t+1)*w]
			write(br, row[:rw], row[rw:])
		}
	}
	return nil
}

// keys returns the cache slots of seq si's local keys.
func (r *Runner) keys(si int) []int32 {
	start := r.keyOff[si]
	return r.keySlot[start : start+int(r.keyLen[si])]
}

// selectLocal fills indices [M, K] with the cache slots every local row
// attends to when this rank holds every key (no DCP): the indexer's top-k,
// or every causal key for dense MLA.
func (r *Runner) selectLocal(lc *kvcache.LayerCache) {
	cfg := r.M.Cfg
	K := r.topk
	HI, dI := cfg.IndexNHeads, cfg.IndexHeadDim
	for t := 0; t < r.nLocal; t++ {
		dst := r.indices[t*K : (t+1)*K]
		br := r.lrow[t]
		if br < 0 {
			fillInvalid(dst)
			continue
		}
		end := int(r.rowPos[br]) + 1
		slots := r.keys(int(r.rowSeq[br]))
		if !cfg.Sparse() {
			for k := range dst {
				dst[k] = -1
				if k < end {
					dst[k] = slots[k]
				}
			}
			continue
		}
		r.ends[0] = int32(end)
		scores := r.scores[:end]
		mla.IndexerScoresScratch(r.idxScratch, scores, r.qI[t*HI*dI:(t+1)*HI*dI], r.wI[t*HI:(t+1)*HI], 1, HI, dI, lc, slots[:end], r.ends)
		pos := r.idxPos[:K]
		mla.IndexerTopK(pos, r.idxCount, scores, 1, end, K)
		if r.Trace != nil {
			r.Trace(r.curLayer, r.rowPos[br], r.rowSeq[br], pos[:r.idxCount[0]])
		}
		for k := 0; k < K; k++ {
			dst[k] = -1
			if p := pos[k]; p >= 0 {
				dst[k] = slots[p]
			}
		}
	}
}

func fillInvalid(s []int32) {
	for i := range s {
		s[i] = -1
	}
}

// attendDCP runs attention for this rank's rows with the KV sharded over the
// DCP group: gather the group's absorbed queries (one block of M rows × H
// heads per member), select every distinct row block's global top-k and
// localize it, attend every block over the local shard, and combine the
// partials so that this rank keeps its own block, out [M, H, 512].
func (r *Runner) attendDCP(lc *kvcache.LayerCache, out []float32) error {
	m, cfg := r.M, r.M.Cfg
	ctx, g := r.ctx(), r.par.Groups.DCP
	N, H, M, K := r.Layout.N, m.Heads, r.nLocal, r.topk
	NH := N * H
	qG := r.qG[:M*NH*mla.RowDim]
	if err := r.qgather.Gather(ctx, g, qG, r.qabs[:M*H*mla.RowDim], M); err != nil {
		return fmt.Errorf("dcp query gather: %w", err)
	}
	nb := len(r.distinctPCP)
	R := nb * M
	if cfg.Sparse() {
		if err := r.selectDCP(lc, R); err != nil {
			return err
		}
	} else {
		r.selectDenseDCP(R)
	}
	attn, lse := r.attnG[:M*NH*mla.LatentDim], r.lseG[:M*NH]
	if nb == 1 {
		// Every member holds the same rows: one call over all gathered heads.
		mla.SparseAttention(attn, lse, nil, qG, M, NH, lc, r.indices[:M*K], K, nil, m.Scale, r.ws)
	} else {
		for j := 0; j < N; j++ {
			d := r.blockDistinct[j]
			for t := 0; t < M; t++ {
				base := t*NH + j*H
				mla.SparseAttention(attn[base*mla.LatentDim:(base+H)*mla.LatentDim], lse[base:base+H], nil,
					qG[base*mla.RowDim:(base+H)*mla.RowDim], 1, H, lc, r.indices[(d*M+t)*K:(d*M+t+1)*K], K, nil, m.Scale, r.ws)
			}
		}
	}
	if err := r.comb.Combine(ctx, g, out, r.lse[:M*H], attn, lse, M); err != nil {
		return fmt.Errorf("dcp combine: %w", err)
	}
	return nil
}

// blockRow returns the batch row of row t of distinct row block d (−1 for padding).
func (r *Runner) blockRow(d, t int) int32 {
	if r.part == nil {
		return r.lrow[t]
	}
	return r.part.Tokens(r.distinctPCP[d])[t]
}

// selectDCP computes the exact global top-k of every row of the DCP group's
// distinct row blocks from this rank's keys and turns it into local slots.
func (r *Runner) selectDCP(lc *kvcache.LayerCache, R int) error {
	cfg := r.M.Cfg
	ctx, g := r.ctx(), r.par.Groups.DCP
	HI, dI := cfg.IndexNHeads, cfg.IndexHeadDim
	N, M, K, W := r.Layout.N, r.nLocal, r.topk, r.idxWidth
	// Gather the indexer queries and weights of the group's rows.
	pack := r.idxPack[:M*W]
	for t := 0; t < M; t++ {
		copy(pack[t*W:t*W+HI*dI], r.qI[t*HI*dI:(t+1)*HI*dI])
		copy(pack[t*W+HI*dI:(t+1)*W], r.wI[t*HI:(t+1)*HI])
	}
	all := r.idxG[:N*M*W]
	if err := comm.AllGather(ctx, g, all, pack); err != nil {
		return fmt.Errorf("dcp indexer query gather: %w", err)
	}
	width := 0
	for si := range r.keyOff {
		width = max(width, len(r.keys(si)))
	}
	width = max(width, 1)
	scores := r.scores[:R*width]
	for i := range R {
		d, t := i/M, i%M
		row := scores[i*width : (i+1)*width]
		for k := range row {
			row[k] = float32(math.Inf(-1))
		}
		r.rowReq[i] = 0
		br := r.blockRow(d, t)
		if br < 0 {
			continue
		}
		r.rowReq[i] = r.rowSeq[br]
		slots := r.keys(int(r.rowSeq[br]))
		end := r.Layout.LocalLen(int(r.rowPos[br])+1, r.dcpRank)
		if end == 0 {
			continue
		}
		// The member whose block this is: any member of distinct block d.
		j := 0
		for j = range r.blockDistinct {
			if r.blockDistinct[j] == d {
				break
			}
		}
		src := all[(j*M+t)*W : (j*M+t+1)*W]
		r.ends[0] = int32(end)
		mla.IndexerScoresScratch(r.idxScratch, row[:end], src[:HI*dI], src[HI*dI:], 1, HI, dI, lc, slots[:end], r.ends)
	}
	pos := r.idxPos[:R*K]
	if err := r.tk.Select(ctx, g, pos, r.valid[:R], scores, R, width); err != nil {
		return fmt.Errorf("dcp top-k merge: %w", err)
	}
	if r.Trace != nil {
		for i := range R {
			if br := r.blockRow(i/M, i%M); br >= 0 {
				r.Trace(r.curLayer, r.rowPos[br], r.rowSeq[br], pos[i*K:i*K+int(r.valid[i])])
			}
		}
	}
	return cp.LocalizeRows(r.Layout, r.dcpRank, r.indices[:R*K], r.valid[:R], pos, R, K, r.tables, r.rowReq[:R], r.Cache.BlockSize(), r.compact)
}

// selectDenseDCP gives every row of the group's distinct row blocks all its
// causal keys held by this rank (dense MLA: no indexer).
func (r *Runner) selectDenseDCP(R int) {
	M, K := r.nLocal, r.topk
	for i := range R {
		dst := r.indices[i*K : (i+1)*K]
		fillInvalid(dst)
		br := r.blockRow(i/M, i%M)
		if br < 0 {
			continue
		}
		slots := r.keys(int(r.rowSeq[br]))
		end := r.Layout.LocalLen(int(r.rowPos[br])+1, r.dcpRank)
		copy(dst, slots[:end])
	}
}

// SelectionTrace receives, when set on a Runner, the positions each row
// selected in each layer (sorted as the indexer returned them). It exists for
// verification; production steps leave it nil.
type SelectionTrace func(layer int, pos int32, seq int32, positions []int32)
