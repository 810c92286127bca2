package oracle

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cpmla/cpmla/config"
)

// WeightSource hands out checkpoint tensors by their HF name, converted to
// float32, with their shape ([out, in] for linear layers).
type WeightSource interface {
	Tensor(name string) (values []float32, shape []int, err error)
}

// Options selects how the caches round what they store.
type Options struct {
	// KVDType is the MLA cache dtype: "f32", "bf16" or "fp8_ds_mla"
	// ("" means "f32").
	KVDType string
	// IndexerDType is the indexer key cache dtype: "f32" or "fp8"
	// ("" means "f32"). Ignored for dense models.
	IndexerDType string
}

// KV cache and indexer key dtypes accepted in Options.
const (
	KVF32      = "f32"
	KVBF16     = "bf16"
	KVFP8DSMLA = "fp8_ds_mla"
	IndexerF32 = "f32"
	IndexerFP8 = "fp8"
)

// DSMLA record geometry: RoundDSMLA works on rows of 512 latent + 64 RoPE
// dims; the fp8 indexer key record holds 128 dims.
const (
	dsmlaLatentDim  = 512
	dsmlaRopeDim    = 64
	fp8IndexerDim   = 128
	indexerNormEps  = 1e-6
	tensorPrefix    = "model.layers."
	embedTensorName = "model.embed_tokens.weight"
	normTensorName  = "model.norm.weight"
	headTensorName  = "lm_head.weight"
)

// normalize fills defaults and checks the dtype names against the
// configuration they must round.
func (o Options) normalize(cfg *config.Model) (Options, error) {
	if o.KVDType == "" {
		o.KVDType = KVF32
	}
	if o.IndexerDType == "" {
		o.IndexerDType = IndexerF32
	}
	switch o.KVDType {
	case KVF32, KVBF16:
	case KVFP8DSMLA:
		if cfg.KVLoraRank != dsmlaLatentDim || cfg.QKRopeHeadDim != dsmlaRopeDim {
			return o, fmt.Errorf("kv cache dtype %q stores rows of %d latent + %d rope dims, but the model has kv_lora_rank=%d, qk_rope_head_dim=%d; use kv cache dtype %q or %q",
				KVFP8DSMLA, dsmlaLatentDim, dsmlaRopeDim, cfg.KVLoraRank, cfg.QKRopeHeadDim, KVF32, KVBF16)
		}
	default:
		return o, fmt.Errorf("kv cache dtype %q is not one of %q, %q, %q", o.KVDType, KVF32, KVBF16, KVFP8DSMLA)
	}
	switch o.IndexerDType {
	case IndexerF32:
	case IndexerFP8:
		if cfg.Sparse() && cfg.IndexHeadDim != fp8IndexerDim {
			return o, fmt.Errorf("indexer key dtype %q stores %d-dim keys, but the model has index_head_dim=%d; use indexer key dtype %q",
				IndexerFP8, fp8IndexerDim, cfg.IndexHeadDim, IndexerF32)
		}
	default:
		return o, fmt.Errorf("indexer key dtype %q is not one of %q, %q", o.IndexerDType, IndexerF32, IndexerFP8)
	}
	return o, nil
}

// TensorShapes lists every tensor the oracle reads for cfg with its
// expected shape. Indexer tensors appear only for sparse models; q_proj
// replaces q_a_proj/q_a_layernorm/q_b_proj when q_lora_rank is 0; lm_head is
// omitted when the embeddings are tied.
func TensorShapes(cfg *config.Model) map[string][]int {
	d := cfg.HiddenSize
	qk := cfg.QKNopeHeadDim + cfg.QKRopeHeadDim
	h := cfg.NumHeads
	out := map[string][]int{
		embedTensorName: {cfg.VocabSize, d},
		normTensorName:  {d},
	}
	if !cfg.TieWordEmbeddings {
		out[headTensorName] = []int{cfg.VocabSize, d}
	}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("%s%d.", tensorPrefix, i)
		out[p+"input_layernorm.weight"] = []int{d}
		if cfg.QLoraRank > 0 {
			out[p+"self_attn.q_a_proj.weight"] = []int{cfg.QLoraRank, d}
			out[p+"self_attn.q_a_layernorm.weight"] = []int{cfg.QLoraRank}
			out[p+"self_attn.q_b_proj.weight"] = []int{h * qk, cfg.QLoraRank}
		} else {
			out[p+"self_attn.q_proj.weight"] = []int{h * qk, d}
		}
		out[p+"self_attn.kv_a_proj_with_mqa.weight"] = []int{cfg.KVLoraRank + cfg.QKRopeHeadDim, d}
		out[p+"self_attn.kv_a_layernorm.weight"] = []int{cfg.KVLoraRank}
		out[p+"self_attn.kv_b_proj.weight"] = []int{h * (cfg.QKNopeHeadDim + cfg.VHeadDim), cfg.KVLoraRank}
		out[p+"self_attn.o_proj.weight"] = []int{d, h * cfg.VHeadDim}
		if cfg.Sparse() {
			hi, di := cfg.IndexNHeads, cfg.IndexHeadDim
			out[p+"self_attn.indexer.wq_b.weight"] = []int{hi * di, cfg.QLoraRank}
			out[p+"self_attn.indexer.wk.weight"] = []int{di, d}
			out[p+"self_attn.indexer.k_norm.weight"] = []int{di}
			out[p+"self_attn.indexer.k_norm.bias"] = []int{di}
			out[p+"self_attn.indexer.weights_proj.weight"] = []int{hi, d}
		}
		out[p+"post_attention_layernorm.weight"] = []int{d}
		out[p+"mlp.gate_proj.weight"] = []int{cfg.IntermediateSize, d}
		out[p+"mlp.up_proj.weight"] = []int{cfg.IntermediateSize, d}
		out[p+"mlp.down_proj.weight"] = []int{d, cfg.IntermediateSize}
	}
	return out
}

// layerWeights holds one decoder layer's tensors (row-major [out, in]).
type layerWeights struct {
	inputNorm []float32
	qA        []float32 // W_DQ [dq, D] (nil when q_lora_rank = 0)
	qANorm    []float32
	qB        []float32 // W_UQ [H(dn+dr), dq]
	q         []float32 // W_Q [H(dn+dr), D] when q_lora_rank = 0
	kvA       []float32 // W_DKV [dc+dr, D]
	kvANorm   []float32
	kvB       []float32 // W_UKV [H(dn+dv), dc]
	o         []float32 // W_O [D, H dv]

	idxWQB     []float32 // [HI dI, dq]
	idxWK      []float32 // [dI, D]
	idxKNormW  []float32
	idxKNormB  []float32
	idxWeights []float32 // [HI, D]

	postNorm []float32
	gate     []float32 // [I, D]
	up       []float32 // [I, D]
	down     []float32 // [D, I]
}

// Model is a loaded oracle model. It is safe for concurrent Runs.
type Model struct {
	cfg    config.Model
	opt    Options
	embed  []float32
	norm   []float32
	head   []float32
	layers []layerWeights
	rope   ropeTable

	stored   StoredValues
	rounding RoundingReport
}

// New checks cfg and opt, reads every tensor from w and checks its shape.
// The error names every missing or mismatched tensor.
func New(cfg *config.Model, w WeightSource, opt Options) (*Model, error) {
	if cfg == nil {
		return nil, errors.New("oracle: nil model config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	for i := range cfg.NumLayers {
		if !cfg.DenseLayer(i) {
			return nil, fmt.Errorf("oracle: layer %d is a MoE layer (n_routed_experts=%d, first_k_dense_replace=%d) but the oracle runs dense SwiGLU layers only; use a config with n_routed_experts=0 such as the glm5-mini or v32-mini preset",
				i, cfg.NRoutedExperts, cfg.FirstKDenseReplace)
		}
	}
	if cfg.IntermediateSize <= 0 {
		return nil, fmt.Errorf("oracle: intermediate_size must be > 0 for the dense MLP, got %d", cfg.IntermediateSize)
	}
	if cfg.Sparse() {
		if cfg.QLoraRank <= 0 {
			return nil, fmt.Errorf("oracle: the indexer projects the q latent, so a sparse model (index_topk=%d) needs q_lora_rank > 0, got %d; set index_topk=0 for a dense model",
				cfg.IndexTopK, cfg.QLoraRank)
		}
		if cfg.IndexHeadDim < cfg.QKRopeHeadDim {
			return nil, fmt.Errorf("oracle: index_head_dim (%d) must be ≥ qk_rope_head_dim (%d): the indexer rotates its first %d dims",
				cfg.IndexHeadDim, cfg.QKRopeHeadDim, cfg.QKRopeHeadDim)
		}
	}
	if w == nil {
		return nil, errors.New("oracle: nil weight source")
	}
	opt, err := opt.normalize(cfg)
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	m := &Model{cfg: *cfg, opt: opt, layers: make([]layerWeights, cfg.NumLayers), rope: newRopeTable(cfg)}

	shapes := TensorShapes(cfg)
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	slices.Sort(names)
	got := make(map[string][]float32, len(shapes))
	var errs []error
	for _, name := range names {
		want := shapes[name]
		vals, shape, err := w.Tensor(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("tensor %s (want shape %v): %w", name, want, err))
			continue
		}
		if !slices.Equal(shape, want) {
			errs = append(errs, fmt.Errorf("tensor %s has shape %v, want %v", name, shape, want))
			continue
		}
		if n := product(want); len(vals) != n {
			errs = append(errs, fmt.Errorf("tensor %s has %d values, its shape %v needs %d", name, len(vals), want, n))
			continue
		}
		got[name] = vals
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("oracle: weights for model %q: %w", cfg.Name, errors.Join(errs...))
	}

	m.embed = got[embedTensorName]
	m.norm = got[normTensorName]
	m.head = got[headTensorName]
	if cfg.TieWordEmbeddings {
		m.head = m.embed
	}
	for i := range m.layers {
		p := fmt.Sprintf("%s%d.", tensorPrefix, i)
		m.layers[i] = layerWeights{
			inputNorm:  got[p+"input_layernorm.weight"],
			qA:         got[p+"self_attn.q_a_proj.weight"],
			qANorm:     got[p+"self_attn.q_a_layernorm.weight"],
			qB:         got[p+"self_attn.q_b_proj.weight"],
			q:          got[p+"self_attn.q_proj.weight"],
			kvA:        got[p+"self_attn.kv_a_proj_with_mqa.weight"],
			kvANorm:    got[p+"self_attn.kv_a_layernorm.weight"],
			kvB:        got[p+"self_attn.kv_b_proj.weight"],
			o:          got[p+"self_attn.o_proj.weight"],
			idxWQB:     got[p+"self_attn.indexer.wq_b.weight"],
			idxWK:      got[p+"self_attn.indexer.wk.weight"],
			idxKNormW:  got[p+"self_attn.indexer.k_norm.weight"],
			idxKNormB:  got[p+"self_attn.indexer.k_norm.bias"],
			idxWeights: got[p+"self_attn.indexer.weights_proj.weight"],
			postNorm:   got[p+"post_attention_layernorm.weight"],
			gate:       got[p+"mlp.gate_proj.weight"],
			up:         got[p+"mlp.up_proj.weight"],
			down:       got[p+"mlp.down_proj.weight"],
		}
	}
	return m, nil
}

// Config returns a copy of the model configuration the oracle runs.
func (m *Model) Config() config.Model { return m.cfg }

// Options returns the normalized cache dtypes the oracle rounds to.
func (m *Model) Options() Options { return m.opt }

func product(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// MapSource is an in-memory WeightSource keyed by HF tensor name.
type MapSource map[string]Tensor

// Tensor is one in-memory tensor: row-major values and their shape.
type Tensor struct {
	Values []float32
	Shape  []int
}

// Tensor implements WeightSource.
func (s MapSource) Tensor(name string) ([]float32, []int, error) {
	t, ok := s[name]
	if !ok {
		return nil, nil, fmt.Errorf("tensor %s not found among %d tensors", name, len(s))
	}
	return t.Values, t.Shape, nil
}

// WithStoredValues makes later runs check and adopt an engine's stored cache
// values at rounding boundaries (see StoredValues). A Model is not safe for
// concurrent runs.
func (m *Model) WithStoredValues(s StoredValues) { m.stored = s }
