package model

import (
	"fmt"
	"io"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
)

// Shard selects the tensor-parallel slice of the weights a rank holds.
type Shard struct {
	TPRank, TPSize int
}

// Layer holds one decoder layer's weights as this rank uses them: attention
// heads [HeadLo, HeadLo+Heads) and an MLP slice of the intermediate dimension.
type Layer struct {
	InputNorm []float32
	QA        *kernels.Matrix // [dq, D]; nil when the model has no q LoRA
	QANorm    []float32
	QB        *kernels.Matrix // [heads·(dn+dr), dq or D]: this rank's heads
	KVA       *kernels.Matrix // [dc+dr, D]
	KVANorm   []float32
	WUKT      []kernels.Matrix // per local head: W_UKᵀ [dc, dn] (f32)
	WUV       []kernels.Matrix // per local head: W_UV [dv, dc]
	O         *kernels.Matrix  // [D, heads·dv]: this rank's input columns

	IdxWQB, IdxWK, IdxWProj *kernels.Matrix // indexer (nil for dense MLA)
	IdxNormW, IdxNormB      []float32

	PostNorm         []float32
	Gate, Up, Down   *kernels.Matrix // gate/up: [I/tp, D]; down: [D, I/tp]
	IntermediateSize int             // local slice of the MLP width
}

// Model is one rank's view of a sparse-MLA model: replicated embedding,
// norms, indexer and LM head; TP-sharded attention heads and MLP.
type Model struct {
	Cfg    *config.Model
	Shard  Shard
	Heads  int // local attention heads
	HeadLo int // first global head of this rank

	Embed   *kernels.Matrix // [V, D]
	Layers  []Layer
	Norm    []float32
	LMHead  *kernels.Matrix // [V, D]
	Rope    *kernels.Rope   // main and indexer RoPE share one frequency table
	Scale   float32         // softmax scale
	IdxScal float32         // indexer weight scale H_I^-0.5·d_I^-0.5

	closer io.Closer
}

// Close releases the checkpoint mapping, if any.
func (m *Model) Close() error {
	if m.closer != nil {
		return m.closer.Close()
	}
	return nil
}

// Build assembles a rank's model from a tensor source. It validates every
// tensor's shape before use and slices the TP shard without copying where the
// slice is contiguous.
func Build(cfg *config.Model, src TensorSource, shard Shard) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if shard.TPSize == 0 {
		shard.TPSize = 1
	}
	if cfg.NumHeads%shard.TPSize != 0 {
		return nil, fmt.Errorf("num_attention_heads %d is not divisible by tensor-parallel-size %d; use a TP size that divides it", cfg.NumHeads, shard.TPSize)
	}
	if cfg.IntermediateSize%shard.TPSize != 0 {
		return nil, fmt.Errorf("intermediate_size %d is not divisible by tensor-parallel-size %d", cfg.IntermediateSize, shard.TPSize)
	}
	for i := 0; i < cfg.NumLayers; i++ {
		if !cfg.DenseLayer(i) {
			return nil, fmt.Errorf("layer %d is a MoE layer (n_routed_experts %d, first_k_dense_replace %d): the CPU engine runs dense SwiGLU layers only", i, cfg.NRoutedExperts, cfg.FirstKDenseReplace)
		}
	}
	specs := map[string]TensorSpec{}
	for _, s := range TensorSpecs(cfg) {
		specs[s.Name] = s
	}
	get := func(name string) (*kernels.Matrix, error) {
		t, err := checkTensor(src, specs[name])
		if err != nil {
			return nil, err
		}
		if len(t.Shape) == 1 {
			return nil, fmt.Errorf("tensor %s is 1-D", name)
		}
		return matrixOf(t)
	}
	vec := func(name string) ([]float32, error) {
		t, err := checkTensor(src, specs[name])
		if err != nil {
			return nil, err
		}
		return vectorOf(t)
	}
	m := &Model{Cfg: cfg, Shard: shard, Heads: cfg.NumHeads / shard.TPSize}
	m.HeadLo = shard.TPRank * m.Heads
	m.Scale = float32(cfg.SoftmaxScale())
	if cfg.Sparse() {
		m.IdxScal = float32(cfg.IndexerWeightScale())
	}
	m.Rope = kernels.NewRope(cfg.QKRopeHeadDim, cfg.RopeTheta, cfg.RopeScaling)
	var err error
	if m.Embed, err = get("model.embed_tokens.weight"); err != nil {
		return nil, err
	}
	if m.Norm, err = vec("model.norm.weight"); err != nil {
		return nil, err
	}
	if m.LMHead, err = get("lm_head.weight"); err != nil {
		return nil, err
	}
	dn, dr, dv, dc := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	m.Layers = make([]Layer, cfg.NumLayers)
	for i := range m.Layers {
		L := &m.Layers[i]
		p := LayerPrefix(i)
		a := p + "self_attn."
		type matrixField struct {
			dst  **kernels.Matrix
			name string
		}
		steps := []matrixField{
			{&L.KVA, a + "kv_a_proj_with_mqa.weight"},
			{&L.Gate, p + "mlp.gate_proj.weight"},
			{&L.Up, p + "mlp.up_proj.weight"},
			{&L.Down, p + "mlp.down_proj.weight"},
		}
		if cfg.QLoraRank > 0 {
			steps = append(steps, matrixField{&L.QA, a + "q_a_proj.weight"}, matrixField{&L.QB, a + "q_b_proj.weight"})
		} else {
			steps = append(steps, matrixField{&L.QB, a + "q_proj.weight"})
		}
		if cfg.Sparse() {
			steps = append(steps,
				matrixField{&L.IdxWQB, a + "indexer.wq_b.weight"},
				matrixField{&L.IdxWK, a + "indexer.wk.weight"},
				matrixField{&L.IdxWProj, a + "indexer.weights_proj.weight"})
		}
		for _, s := range steps {
			if *s.dst, err = get(s.name); err != nil {
				return nil, err
			}
		}
		for _, v := range []struct {
			dst  *[]float32
			name string
		}{
			{&L.InputNorm, p + "input_layernorm.weight"},
			{&L.KVANorm, a + "kv_a_layernorm.weight"},
			{&L.PostNorm, p + "post_attention_layernorm.weight"},
		} {
			if *v.dst, err = vec(v.name); err != nil {
				return nil, err
			}
		}
		if cfg.QLoraRank > 0 {
			if L.QANorm, err = vec(a + "q_a_layernorm.weight"); err != nil {
				return nil, err
			}
		}
		// TP slices: q_b rows of this rank's heads (contiguous).
		L.QB = rowSlice(L.QB, m.HeadLo*(dn+dr), m.Heads*(dn+dr))
		kvb, err := get(a + "kv_b_proj.weight")
		if err != nil {
			return nil, err
		}
		L.WUKT = make([]kernels.Matrix, m.Heads)
		L.WUV = make([]kernels.Matrix, m.Heads)
		scratch := make([]float32, dc)
		for h := 0; h < m.Heads; h++ {
			base := (m.HeadLo + h) * (dn + dv)
			t := make([]float32, dc*dn)
			for j := 0; j < dn; j++ {
				row := kvb.Row(base+j, scratch)
				for c := 0; c < dc; c++ {
					t[c*dn+j] = row[c]
				}
			}
			L.WUKT[h] = kernels.Matrix{Rows: dc, Cols: dn, F32: t}
			L.WUV[h] = *rowSlice(kvb, base+dn, dv)
		}
		o, err := get(a + "o_proj.weight")
		if err != nil {
			return nil, err
		}
		L.O = colSlice(o, m.HeadLo*dv, m.Heads*dv)
		ilocal := cfg.IntermediateSize / shard.TPSize
		L.IntermediateSize = ilocal
		L.Gate = rowSlice(L.Gate, shard.TPRank*ilocal, ilocal)
		L.Up = rowSlice(L.Up, shard.TPRank*ilocal, ilocal)
		L.Down = colSlice(L.Down, shard.TPRank*ilocal, ilocal)
		if cfg.Sparse() {
			if L.IdxNormW, err = vec(a + "indexer.k_norm.weight"); err != nil {
				return nil, err
			}
			if L.IdxNormB, err = vec(a + "indexer.k_norm.bias"); err != nil {
				return nil, err
			}
		}
	}
	if c, ok := src.(io.Closer); ok {
		m.closer = c
	}
	return m, nil
}

// rowSlice views rows [lo, lo+n) of a row-major matrix.
func rowSlice(w *kernels.Matrix, lo, n int) *kernels.Matrix {
	if lo == 0 && n == w.Rows {
		return w
	}
	s := &kernels.Matrix{Rows: n, Cols: w.Cols}
	if w.F32 != nil {
		s.F32 = w.F32[lo*w.Cols : (lo+n)*w.Cols]
	} else {
		s.BF16 = w.BF16[lo*w.Cols : (lo+n)*w.Cols]
	}
	return s
}

// colSlice copies columns [lo, lo+n) of a row-major matrix, keeping its dtype.
func colSlice(w *kernels.Matrix, lo, n int) *kernels.Matrix {
	if lo == 0 && n == w.Cols {
		return w
	}
	s := &kernels.Matrix{Rows: w.Rows, Cols: n}
	if w.F32 != nil {
		s.F32 = make([]float32, w.Rows*n)
		for r := 0; r < w.Rows; r++ {
			copy(s.F32[r*n:(r+1)*n], w.F32[r*w.Cols+lo:r*w.Cols+lo+n])
		}
	} else {
		s.BF16 = make([]uint16, w.Rows*n)
		for r := 0; r < w.Rows; r++ {
			copy(s.BF16[r*n:(r+1)*n], w.BF16[r*w.Cols+lo:r*w.Cols+lo+n])
		}
	}
	return s
}
