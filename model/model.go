package model

import (
	"fmt"
	"io"
	"unsafe"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
)

// Shard selects the slice of the weights a rank holds: its tensor-parallel
// heads and MLP columns and, with expert parallelism (EPSize > 1), its
// whole routed experts.
type Shard struct {
	TPRank, TPSize int
	// EPRank and EPSize place the rank among the ranks sharing the routed
	// experts (its world rank among TP × PCP). EPSize ≤ 1 means no expert
	// parallelism: every rank holds every expert, TP-sliced along its width.
	EPRank, EPSize int
}

// Layer holds one decoder layer's weights as this rank uses them: the
// attention, and either a dense MLP or a MoE block.
type Layer struct {
	InputNorm []float32
	Attn      Attention
	PostNorm  []float32
	MLP       *MLP // dense layers
	MoE       *MoE // routed layers
}

// MTPLayer is a multi-token-prediction layer: the glue that joins the
// embedding of the next token with the previous hidden state, a full
// decoder layer, and the shared head (its own, or the main LM head where the
// checkpoint stores none, as GLM-5's). It is loaded and checked with the
// model; speculative decoding runs it.
type MTPLayer struct {
	ENorm, HNorm []float32
	EHProj       *kernels.Matrix // [D, 2D]
	Block        Layer
	HeadNorm     []float32
	Head         *kernels.Matrix // [V, D]
}

// Model is one rank's view of a sparse-MLA model: replicated embedding,
// norms, indexer, routers and LM head; TP-sharded attention heads, MLPs and
// shared experts; routed experts TP-sliced or, with expert parallelism,
// spread whole over the ranks.
type Model struct {
	Cfg    *config.Model
	Shard  Shard
	Heads  int // local attention heads
	HeadLo int // first global head of this rank

	Embed   *kernels.Matrix // [V, D]
	Layers  []Layer
	Norm    []float32
	LMHead  *kernels.Matrix // [V, D] (the embedding when tied)
	MTP     []MTPLayer
	Rope    *kernels.Rope // main and indexer RoPE share one frequency table
	Scale   float32       // softmax scale
	IdxScal float32       // indexer weight scale H_I^-0.5·d_I^-0.5

	closer io.Closer
}

// Close releases the checkpoint mapping, if any.
func (m *Model) Close() error {
	if m.closer != nil {
		return m.closer.Close()
	}
	return nil
}

// CheckShard refuses a shard the model cannot be split into, naming the
// sizes and a setting that works. Build calls it; commands call it before
// any weight is read.
func CheckShard(cfg *config.Model, shard Shard) error {
	if shard.TPSize == 0 {
		shard.TPSize = 1
	}
	if cfg.NumHeads%shard.TPSize != 0 {
		return fmt.Errorf("num_attention_heads %d is not divisible by tensor-parallel-size %d; use a TP size that divides it", cfg.NumHeads, shard.TPSize)
	}
	for i := 0; i < cfg.NumLayers; i++ {
		if cfg.DenseLayer(i) && cfg.IntermediateSize%shard.TPSize != 0 {
			return fmt.Errorf("intermediate_size %d is not divisible by tensor-parallel-size %d; use a TP size that divides it", cfg.IntermediateSize, shard.TPSize)
		}
	}
	if shard.EPSize > 1 && !cfg.HasRouted(cfg.NumLayers) {
		return fmt.Errorf("expert parallelism needs routed experts, but %q has none; leave --enable-expert-parallel off", cfg.Name)
	}
	if shard.EPSize > 1 && (shard.EPRank < 0 || shard.EPRank >= shard.EPSize) {
		return fmt.Errorf("expert-parallel rank %d is outside [0, %d)", shard.EPRank, shard.EPSize)
	}
	return checkMoEShard(cfg, shard)
}

// Build assembles a rank's model from a tensor source. It validates the
// config and every tensor's shape and dtype before use (fp8 weights with
// their block scales), slices the rank's shard without copying where the
// slice is contiguous, and refuses a checkpoint holding tensors the config
// does not account for.
func Build(cfg *config.Model, src TensorSource, shard Shard) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if shard.TPSize == 0 {
		shard.TPSize = 1
	}
	if shard.EPSize == 0 {
		shard.EPSize = 1
	}
	if err := CheckShard(cfg, shard); err != nil {
		return nil, err
	}
	l := newWeightLoader(cfg, src)
	m := &Model{Cfg: cfg, Shard: shard, Heads: cfg.NumHeads / shard.TPSize}
	m.HeadLo = shard.TPRank * m.Heads
	m.Scale = float32(cfg.SoftmaxScale())
	if cfg.Sparse() {
		m.IdxScal = float32(cfg.IndexerWeightScale())
	}
	m.Rope = kernels.NewRope(cfg.QKRopeHeadDim, cfg.RopeTheta, cfg.RopeScaling)
	var err error
	if m.Embed, err = l.matrix("model.embed_tokens.weight"); err != nil {
		return nil, err
	}
	if m.Norm, err = l.vector("model.norm.weight"); err != nil {
		return nil, err
	}
	m.LMHead = m.Embed
	if !cfg.TieWordEmbeddings {
		if m.LMHead, err = l.matrix("lm_head.weight"); err != nil {
			return nil, err
		}
	}
	m.Layers = make([]Layer, cfg.NumLayers)
	for i := range m.Layers {
		if m.Layers[i], err = m.loadLayer(l, LayerPrefix(i), cfg.DenseLayer(i)); err != nil {
			return nil, err
		}
	}
	m.MTP = make([]MTPLayer, cfg.NumNextNPredict)
	for k := range m.MTP {
		if m.MTP[k], err = m.loadMTP(l, cfg.NumLayers+k); err != nil {
			return nil, err
		}
	}
	if err := l.checkAllUsed(); err != nil {
		return nil, err
	}
	m.interleaveWeights()
	if c, ok := src.(io.Closer); ok {
		m.closer = c
	}
	return m, nil
}

// loadLayer reads the decoder layer at prefix p.
func (m *Model) loadLayer(l *weightLoader, p string, dense bool) (Layer, error) {
	cfg, shard := m.Cfg, m.Shard
	var L Layer
	var err error
	if L.InputNorm, err = l.vector(p + "input_layernorm.weight"); err != nil {
		return L, err
	}
	if L.Attn, err = loadAttention(l, cfg, p, m.HeadLo, m.Heads); err != nil {
		return L, err
	}
	if L.PostNorm, err = l.vector(p + "post_attention_layernorm.weight"); err != nil {
		return L, err
	}
	if dense {
		w := cfg.IntermediateSize / shard.TPSize
		L.MLP, err = loadMLP(l, p+"mlp.", shard.TPRank*w, w)
	} else {
		L.MoE, err = loadMoE(l, cfg, p, shard)
	}
	return L, err
}

// loadMTP reads MTP layer i (stored at model.layers.{i}).
func (m *Model) loadMTP(l *weightLoader, i int) (MTPLayer, error) {
	cfg, p := m.Cfg, LayerPrefix(i)
	var t MTPLayer
	var err error
	vec := func(dst *[]float32, name string) {
		if err == nil {
			*dst, err = l.vector(name)
		}
	}
	vec(&t.ENorm, p+"enorm.weight")
	vec(&t.HNorm, p+"hnorm.weight")
	vec(&t.HeadNorm, p+"shared_head.norm.weight")
	if err != nil {
		return t, err
	}
	if t.EHProj, err = l.matrix(p + "eh_proj.weight"); err != nil {
		return t, err
	}
	t.Head = m.LMHead
	if cfg.MTPOwnHead() {
		// The MTP layer's copy of the embedding is the main one (checked
		// for shape, read from model.embed_tokens as vLLM does).
		if _, err = l.matrix(p + "embed_tokens.weight"); err != nil {
			return t, err
		}
		if t.Head, err = l.matrix(p + "shared_head.head.weight"); err != nil {
			return t, err
		}
	}
	t.Block, err = m.loadLayer(l, p, !cfg.HasRouted(cfg.NumLayers))
	return t, err
}

// matrices lists every matrix of the rank, the embedding first; a matrix
// held by two fields (tied embeddings, a head shared with the MTP layer) is
// listed twice.
func (m *Model) matrices() []*kernels.Matrix {
	ms := []*kernels.Matrix{m.Embed, m.LMHead}
	layer := func(L *Layer) {
		ms = append(ms, L.Attn.matrices()...)
		if L.MLP != nil {
			ms = append(ms, L.MLP.matrices()...)
		}
		if L.MoE != nil {
			ms = append(ms, L.MoE.matrices()...)
		}
	}
	for i := range m.Layers {
		layer(&m.Layers[i])
	}
	for i := range m.MTP {
		t := &m.MTP[i]
		layer(&t.Block)
		ms = append(ms, t.EHProj, t.Head)
	}
	return ms
}

// headLists returns every list of per-head matrices the model holds: each
// attention's W_UKᵀ and W_UV heads, the MTP layers' included.
func (m *Model) headLists() [][]kernels.Matrix {
	var ls [][]kernels.Matrix
	add := func(at *Attention) {
		ls = append(ls, at.WUKT, at.WUV)
	}
	for i := range m.Layers {
		add(&m.Layers[i].Attn)
	}
	for i := range m.MTP {
		add(&m.MTP[i].Block.Attn)
	}
	return ls
}

// interleaveWeights moves the bf16 and fp8 weights the products read into
// the layouts the AVX-512 tiles stream (kernels.Matrix.InterleaveBF16 and
// InterleaveFP8, a copy of each; where another implementation runs, or a
// shape, a block offset or a scale does not allow it, a matrix stays as it
// is). The embedding, which only lends rows, stays row-major unless it is
// also the LM head. Two matrices viewing the same storage end up sharing
// one copy.
func (m *Model) interleaveWeights() {
	done := map[*kernels.Matrix]bool{}
	copies := map[unsafe.Pointer]*kernels.Matrix{}
	// A one-row product over a layer's fp8 heads walks all of them as one
	// (kernels.MatMulTHeads) when they share a layout, and streams best
	// from one allocation: a list is interleaved into one, or, if any head
	// cannot take the layout, every head stays row-major. No other matrix
	// views a head's storage (W_UKᵀ is a copy, kv_b of W_UV is not kept).
	for _, heads := range m.headLists() {
		if len(heads) == 0 || heads[0].FP8 == nil {
			continue
		}
		kernels.InterleaveFP8Each(heads)
		for i := range heads {
			done[&heads[i]] = true
		}
	}
	for _, w := range m.matrices()[1:] {
		if w == nil || done[w] || len(w.BF16) == 0 && len(w.FP8) == 0 {
			continue
		}
		done[w] = true
		src := unsafe.Pointer(unsafe.SliceData(w.BF16))
		if w.FP8 != nil {
			src = unsafe.Pointer(unsafe.SliceData(w.FP8))
		}
		if c, ok := copies[src]; ok && c.Rows == w.Rows && c.Cols == w.Cols && sameScales(c, w) {
			*w = *c
			continue
		}
		if w.InterleaveBF16() || w.InterleaveFP8() {
			copies[src] = w
		}
	}
}

// sameScales reports whether two matrices over the same storage read the
// same block scales (both none, or one grid at the same offsets), so that
// one interleaved copy serves both.
func sameScales(a, b *kernels.Matrix) bool {
	if a.Scales == nil || b.Scales == nil {
		return a.Scales == b.Scales
	}
	sa, sb := a.Scales, b.Scales
	return unsafe.SliceData(sa.S) == unsafe.SliceData(sb.S) && sa.Stride == sb.Stride && sa.RowOff == sb.RowOff && sa.ColOff == sb.ColOff
}

// WeightBytes is the memory of the rank's weights: every matrix (fp8 codes
// and their block scales included) and vector it holds, counting storage
// shared by two fields (tied embeddings, a head shared with the MTP layer)
// once.
func (m *Model) WeightBytes() int64 {
	seen := map[uintptr]bool{}
	var n int64
	add := func(p unsafe.Pointer, bytes int64) {
		if bytes == 0 || seen[uintptr(p)] {
			return
		}
		seen[uintptr(p)] = true
		n += bytes
	}
	mat := func(w *kernels.Matrix) {
		switch {
		case w == nil:
		case len(w.F32) > 0:
			add(unsafe.Pointer(&w.F32[0]), int64(len(w.F32))*4)
		case len(w.BF16) > 0:
			add(unsafe.Pointer(&w.BF16[0]), int64(len(w.BF16))*2)
		case len(w.FP8) > 0:
			add(unsafe.Pointer(&w.FP8[0]), int64(len(w.FP8)))
			if s := w.Scales; s != nil && len(s.S) > 0 {
				add(unsafe.Pointer(&s.S[0]), int64(len(s.S))*4)
			}
		}
	}
	vec := func(v []float32) {
		if len(v) > 0 {
			add(unsafe.Pointer(&v[0]), int64(len(v))*4)
		}
	}
	for _, w := range m.matrices() {
		mat(w)
	}
	layer := func(L *Layer) {
		for _, v := range L.Attn.vectors() {
			vec(v)
		}
		vec(L.InputNorm)
		vec(L.PostNorm)
		if L.MoE != nil {
			vec(L.MoE.Bias)
		}
	}
	vec(m.Norm)
	for i := range m.Layers {
		layer(&m.Layers[i])
	}
	for i := range m.MTP {
		t := &m.MTP[i]
		layer(&t.Block)
		vec(t.ENorm)
		vec(t.HNorm)
		vec(t.HeadNorm)
	}
	return n
}
