package model

import (
	"fmt"

	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
)

// Seq is one request's share of a step: the new tokens it runs and where they
// sit in its sequence.
type Seq struct {
	Tokens     []int32 // new tokens of this step
	Start      int     // position of Tokens[0] (= tokens already in the cache)
	BlockTable []int32 // cache blocks of the request, in order
	// LogitsAll asks for logits after every new token instead of only the last.
	LogitsAll bool
}

// Batch is the work of one step.
type Batch struct {
	Seqs []Seq
}

// RunnerOptions sizes a Runner once, at start-up.
type RunnerOptions struct {
	MaxTokens    int // rows per step
	MaxModelLen  int // longest sequence
	MaxLogitRows int // rows per step that may ask for logits
	MaxSeqs      int // sequences per step
	BlockSize    int
	NumBlocks    int
	KVDType      kvcache.KVDType
	IndexerDType kvcache.IndexerDType
}

// Runner executes forward steps of one rank over its paged KV cache. Every
// buffer is sized from RunnerOptions when it is created and never grows.
type Runner struct {
	M      *Model
	Cache  *kvcache.Cache
	Layout kvcache.Layout
	Opt    RunnerOptions
	// Trace, when set, observes every row's selected positions.
	Trace SelectionTrace

	curLayer int
	topk     int // indices per row: index_topk, or MaxModelLen for dense MLA

	// per-step tables
	rowPos, rowSeq []int32
	seqSlot        []int32 // slots of positions [0, end) of each seq, back to back
	seqSlotOff     []int
	logitRow       []int32 // rows whose logits are computed
	// activations
	h, x, cq, q, kva, qabs, attnOut, lse, o, u []float32
	gather, gatherOut                          []float32
	gate, up                                   []float32
	qI, kI, wI, scores                         []float32
	idxPos, idxCount, indices                  []int32
	ends                                       []int32
	logits                                     []float32
	ws                                         *mla.Workspace
	buffers                                    []Buffer
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
	r := &Runner{M: m, Cache: cache, Layout: kvcache.Layout{N: 1, I: 1}, Opt: opt}
	r.topk = opt.MaxModelLen
	if cfg.Sparse() {
		r.topk = cfg.IndexTopK
	}
	T, H := opt.MaxTokens, m.Heads
	D, dn, dr, dv, dc := cfg.HiddenSize, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	qIn := max(cfg.QLoraRank, 1)
	f := func(name string, n int) []float32 { r.track(name, int64(n)*4); return make([]float32, n) }
	i32 := func(name string, n int) []int32 { r.track(name, int64(n)*4); return make([]int32, n) }
	r.rowPos, r.rowSeq = i32("row positions", T), i32("row sequences", T)
	r.seqSlot = i32("position slots", opt.MaxSeqs*opt.MaxModelLen)
	r.seqSlotOff = make([]int, 0, opt.MaxSeqs)
	r.logitRow = i32("logit rows", opt.MaxLogitRows)[:0]
	r.h, r.x = f("hidden", T*D), f("normed hidden", T*D)
	r.cq, r.q = f("q latent", T*qIn), f("q", T*H*(dn+dr))
	r.kva = f("kv latent", T*(dc+dr))
	r.qabs = f("absorbed q", T*H*mla.RowDim)
	r.attnOut, r.lse = f("attention out", T*H*mla.LatentDim), f("attention lse", T*H)
	r.o, r.u = f("value heads", T*H*dv), f("layer out", T*D)
	r.gather, r.gatherOut = f("head gather", T*max(dn, dc)), f("head gather out", T*max(dc, dv))
	il := m.Layers[0].IntermediateSize
	r.gate, r.up = f("mlp gate", T*il), f("mlp up", T*il)
	if cfg.Sparse() {
		r.qI = f("indexer q", T*cfg.IndexNHeads*cfg.IndexHeadDim)
		r.kI = f("indexer k", T*cfg.IndexHeadDim)
		r.wI = f("indexer weights", T*cfg.IndexNHeads)
		r.scores = f("indexer scores", opt.MaxModelLen)
		r.idxPos = i32("top-k positions", r.topk)
		r.idxCount = make([]int32, 1)
		r.ends = make([]int32, 1)
	}
	r.indices = i32("top-k slots", T*r.topk)
	r.logits = f("logits", opt.MaxLogitRows*cfg.VocabSize)
	r.ws = mla.NewWorkspace(r.topk, H)
	r.track("attention workspace", mla.WorkspaceBytes(r.topk, H))
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

// slotsFor checks that the step fits the start-up sized tables.
func (r *Runner) slotsFor(T int, b *Batch) error {
	if len(b.Seqs) > r.Opt.MaxSeqs {
		return fmt.Errorf("step has %d sequences, more than max sequences %d", len(b.Seqs), r.Opt.MaxSeqs)
	}
	need := 0
	for _, s := range b.Seqs {
		need += s.Start + len(s.Tokens)
	}
	if need > len(r.seqSlot) {
		return fmt.Errorf("step covers %d cached positions, more than the %d the runner was sized for", need, len(r.seqSlot))
	}
	return nil
}

// Forward runs one step: it writes the step's KV into the cache, runs every
// layer, and computes logits for the last token of each sequence (or every
// token where LogitsAll is set).
func (r *Runner) Forward(b *Batch) error {
	cfg, m := r.M.Cfg, r.M
	T := 0
	for _, s := range b.Seqs {
		T += len(s.Tokens)
	}
	if T == 0 {
		r.logitRow = r.logitRow[:0]
		return nil
	}
	if T > r.Opt.MaxTokens {
		return fmt.Errorf("step has %d tokens, more than max tokens %d", T, r.Opt.MaxTokens)
	}
	if err := r.slotsFor(T, b); err != nil {
		return err
	}
	B := r.Cache.BlockSize()
	// Row tables, slot tables and logit rows.
	r.seqSlotOff = r.seqSlotOff[:0]
	r.logitRow = r.logitRow[:0]
	row, off := 0, 0
	for si, s := range b.Seqs {
		end := s.Start + len(s.Tokens)
		if end > r.Opt.MaxModelLen {
			return fmt.Errorf("sequence %d reaches position %d, beyond max model len %d", si, end, r.Opt.MaxModelLen)
		}
		if need := (end + B - 1) / B; len(s.BlockTable) < need {
			return fmt.Errorf("sequence %d needs %d blocks for %d positions, block table has %d", si, need, end, len(s.BlockTable))
		}
		r.seqSlotOff = append(r.seqSlotOff, off)
		for p := 0; p < end; p++ {
			r.seqSlot[off+p] = r.Layout.Slot(s.BlockTable, B, p, 0)
		}
		off += end
		for j, tok := range s.Tokens {
			if tok < 0 || int(tok) >= cfg.VocabSize {
				return fmt.Errorf("sequence %d token %d is %d, outside the vocabulary [0, %d)", si, j, tok, cfg.VocabSize)
			}
			r.rowPos[row] = int32(s.Start + j)
			r.rowSeq[row] = int32(si)
			if s.LogitsAll || j == len(s.Tokens)-1 {
				if len(r.logitRow) == cap(r.logitRow) {
					return fmt.Errorf("step asks for more than %d logit rows", cap(r.logitRow))
				}
				r.logitRow = append(r.logitRow, int32(row))
			}
			row++
		}
	}
	D := cfg.HiddenSize
	row = 0
	for _, s := range b.Seqs {
		for _, tok := range s.Tokens {
			m.Embed.Row(int(tok), r.h[row*D:(row+1)*D])
			row++
		}
	}
	for li := range m.Layers {
		r.curLayer = li
		r.layer(li, b, T)
	}
	V := cfg.VocabSize
	for i, lr := range r.logitRow {
		x := r.x[:D]
		kernels.RMSNorm(x, r.h[int(lr)*D:(int(lr)+1)*D], m.Norm, float32(cfg.RMSNormEps))
		kernels.MatMulT(r.logits[i*V:(i+1)*V], x, 1, m.LMHead)
	}
	return nil
}

func (r *Runner) layer(li int, b *Batch, T int) {
	m, cfg := r.M, r.M.Cfg
	L := &m.Layers[li]
	lc := r.Cache.Layer(li)
	D, H := cfg.HiddenSize, m.Heads
	dn, dr, dv, dc := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	eps := float32(cfg.RMSNormEps)
	qw := dn + dr

	for t := 0; t < T; t++ {
		kernels.RMSNorm(r.x[t*D:(t+1)*D], r.h[t*D:(t+1)*D], L.InputNorm, eps)
	}
	x := r.x[:T*D]
	// Query path.
	q := r.q[:T*H*qw]
	var cq []float32
	if L.QA != nil {
		dq := cfg.QLoraRank
		cq = r.cq[:T*dq]
		kernels.MatMulT(cq, x, T, L.QA)
		for t := 0; t < T; t++ {
			kernels.RMSNorm(cq[t*dq:(t+1)*dq], cq[t*dq:(t+1)*dq], L.QANorm, eps)
		}
		kernels.MatMulT(q, cq, T, L.QB)
	} else {
		cq = x
		kernels.MatMulT(q, x, T, L.QB)
	}
	for t := 0; t < T; t++ {
		pos := int(r.rowPos[t])
		for h := 0; h < H; h++ {
			base := (t*H+h)*qw + dn
			m.Rope.Apply(q[base:base+dr], pos, cfg.RopeInterleave)
		}
	}
	// Latent KV: normalize, rotate, store before attention.
	kva := r.kva[:T*(dc+dr)]
	kernels.MatMulT(kva, x, T, L.KVA)
	for t := 0; t < T; t++ {
		rowv := kva[t*(dc+dr) : (t+1)*(dc+dr)]
		kernels.RMSNorm(rowv[:dc], rowv[:dc], L.KVANorm, eps)
		m.Rope.Apply(rowv[dc:], int(r.rowPos[t]), cfg.RopeInterleave)
		if slot := r.slotOf(t); slot >= 0 {
			lc.WriteRow(slot, rowv)
		}
	}
	// Absorb q_nope through W_UK per head: Q = [W_UKᵀ q_nope | q_pe].
	for h := 0; h < H; h++ {
		g := r.gather[:T*dn]
		for t := 0; t < T; t++ {
			copy(g[t*dn:(t+1)*dn], q[(t*H+h)*qw:(t*H+h)*qw+dn])
		}
		gout := r.gatherOut[:T*dc]
		kernels.MatMulT(gout, g, T, &L.WUKT[h])
		for t := 0; t < T; t++ {
			dst := r.qabs[(t*H+h)*mla.RowDim : (t*H+h+1)*mla.RowDim]
			copy(dst[:dc], gout[t*dc:(t+1)*dc])
			copy(dst[dc:], q[(t*H+h)*qw+dn:(t*H+h+1)*qw])
		}
	}
	// Sparse selection.
	K := r.topk
	indices := r.indices[:T*K]
	if cfg.Sparse() {
		r.indexer(L, lc, cq, x, T)
	} else {
		for t := 0; t < T; t++ {
			end := int(r.rowPos[t]) + 1
			slots := r.seqSlots(int(r.rowSeq[t]))
			for k := 0; k < K; k++ {
				if k < end {
					indices[t*K+k] = slots[k]
				} else {
					indices[t*K+k] = -1
				}
			}
		}
	}
	out, lse := r.attnOut[:T*H*mla.LatentDim], r.lse[:T*H]
	mla.SparseAttention(out, lse, nil, r.qabs[:T*H*mla.RowDim], T, H, lc, indices, K, nil, m.Scale, r.ws)
	// Up-project values per head and the output projection.
	o := r.o[:T*H*dv]
	for h := 0; h < H; h++ {
		g := r.gather[:T*dc]
		for t := 0; t < T; t++ {
			copy(g[t*dc:(t+1)*dc], out[(t*H+h)*mla.LatentDim:(t*H+h+1)*mla.LatentDim])
		}
		gout := r.gatherOut[:T*dv]
		kernels.MatMulT(gout, g, T, &L.WUV[h])
		for t := 0; t < T; t++ {
			copy(o[(t*H+h)*dv:(t*H+h+1)*dv], gout[t*dv:(t+1)*dv])
		}
	}
	u := r.u[:T*D]
	kernels.MatMulT(u, o, T, L.O)
	kernels.Axpy(1, u, r.h[:T*D])
	// Dense SwiGLU MLP.
	for t := 0; t < T; t++ {
		kernels.RMSNorm(r.x[t*D:(t+1)*D], r.h[t*D:(t+1)*D], L.PostNorm, eps)
	}
	il := L.IntermediateSize
	gate, up := r.gate[:T*il], r.up[:T*il]
	kernels.MatMulT(gate, x, T, L.Gate)
	kernels.MatMulT(up, x, T, L.Up)
	kernels.SwiGLU(gate, gate, up)
	kernels.MatMulT(u, gate, T, L.Down)
	kernels.Axpy(1, u, r.h[:T*D])
}

// indexer computes this layer's indexer keys (stored before scoring) and the
// global top-k positions of every row, converted to cache slots.
func (r *Runner) indexer(L *Layer, lc *kvcache.LayerCache, cq, x []float32, T int) {
	m, cfg := r.M, r.M.Cfg
	HI, dI, dr := cfg.IndexNHeads, cfg.IndexHeadDim, cfg.QKRopeHeadDim
	qI := r.qI[:T*HI*dI]
	kernels.MatMulT(qI, cq, T, L.IdxWQB)
	kI := r.kI[:T*dI]
	kernels.MatMulT(kI, x, T, L.IdxWK)
	wI := r.wI[:T*HI]
	kernels.MatMulT(wI, x, T, L.IdxWProj)
	for i := range wI {
		wI[i] *= m.IdxScal
	}
	for t := 0; t < T; t++ {
		pos := int(r.rowPos[t])
		for h := 0; h < HI; h++ {
			m.Rope.Apply(qI[(t*HI+h)*dI:(t*HI+h)*dI+dr], pos, cfg.IndexerRopeInterleave)
		}
		k := kI[t*dI : (t+1)*dI]
		kernels.LayerNorm(k, k, L.IdxNormW, L.IdxNormB, 1e-6)
		m.Rope.Apply(k[:dr], pos, cfg.IndexerRopeInterleave)
		if slot := r.slotOf(t); slot >= 0 {
			lc.WriteKey(slot, k)
		}
	}
	K := r.topk
	for t := 0; t < T; t++ {
		end := int(r.rowPos[t]) + 1
		slots := r.seqSlots(int(r.rowSeq[t]))
		r.ends[0] = int32(end)
		scores := r.scores[:end]
		mla.IndexerScores(scores, qI[t*HI*dI:(t+1)*HI*dI], wI[t*HI:(t+1)*HI], 1, HI, dI, lc, slots[:end], r.ends)
		mla.IndexerTopK(r.idxPos, r.idxCount, scores, 1, end, K)
		if r.Trace != nil {
			r.Trace(r.curLayer, r.rowPos[t], r.rowSeq[t], r.idxPos[:r.idxCount[0]])
		}
		dst := r.indices[t*K : (t+1)*K]
		for k := 0; k < K; k++ {
			if p := r.idxPos[k]; p >= 0 {
				dst[k] = slots[p]
			} else {
				dst[k] = -1
			}
		}
	}
}

func (r *Runner) seqSlots(si int) []int32 {
	start := r.seqSlotOff[si]
	if si+1 < len(r.seqSlotOff) {
		return r.seqSlot[start:r.seqSlotOff[si+1]]
	}
	return r.seqSlot[start:]
}

func (r *Runner) slotOf(t int) int32 {
	return r.seqSlots(int(r.rowSeq[t]))[r.rowPos[t]]
}

// SelectionTrace receives, when set on a Runner, the positions each row
// selected in each layer (sorted as the indexer returned them). It exists for
// verification; production steps leave it nil.
type SelectionTrace func(layer int, pos int32, seq int32, positions []int32)
