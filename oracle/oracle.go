package oracle

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/numfmt"
)

// WeightSource hands out checkpoint tensors by their HF name, converted to
// float32, with their shape ([out, in] for linear layers).
type WeightSource interface {
	Tensor(name string) (values []float32, shape []int, err error)
}

// FP8Source is implemented by weight sources whose checkpoints store Linear
// weights as F8_E4M3 codes with 128×128 block scales (weight_scale_inv). FP8
// returns a weight's codes, its [⌈rows/128⌉, ⌈cols/128⌉] scales and its
// shape, with ok false when the tensor is not stored in fp8. The oracle
// dequantizes them itself: W[i, j] = e4m3(q[i, j]) · scale[i/128, j/128],
// the exact product rounded once to float32.
type FP8Source interface {
	FP8(name string) (codes []byte, scales []float32, shape []int, ok bool, err error)
}

// fp8Block is the side of an fp8 weight's scale blocks.
const fp8Block = 128

// dequantFP8 is W[i, j] = e4m3(q[i, j]) · s[i/128, j/128] for a [rows, cols]
// weight, each product rounded once to float32.
func dequantFP8(codes []byte, scales []float32, rows, cols int) ([]float32, error) {
	bc := (cols + fp8Block - 1) / fp8Block
	if len(codes) != rows*cols || len(scales) != ((rows+fp8Block-1)/fp8Block)*bc {
		return nil, fmt.Errorf("fp8 weight [%d, %d] has %d codes and %d block scales; want %d and %d",
			rows, cols, len(codes), len(scales), rows*cols, ((rows+fp8Block-1)/fp8Block)*bc)
	}
	out := make([]float32, rows*cols)
	for i := range rows {
		for j := range cols {
			out[i*cols+j] = float32(float64(numfmt.F32FromE4M3(codes[i*cols+j])) * float64(scales[(i/fp8Block)*bc+j/fp8Block]))
		}
	}
	return out, nil
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
	for i := range cfg.NumLayers + cfg.NumNextNPredict {
		p := fmt.Sprintf("%s%d.", tensorPrefix, i)
		if i >= cfg.NumLayers {
			// MTP glue: enorm, hnorm, eh_proj, the shared head (its own head
			// only where the checkpoint stores one: not GLM-5).
			out[p+"enorm.weight"] = []int{d}
			out[p+"hnorm.weight"] = []int{d}
			out[p+"eh_proj.weight"] = []int{d, 2 * d}
			out[p+"shared_head.norm.weight"] = []int{d}
			if cfg.MTPOwnHead() {
				out[p+"shared_head.head.weight"] = []int{cfg.VocabSize, d}
			}
		}
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
		if !layerRouted(cfg, i) {
			addMLPShapes(out, p+"mlp.", cfg.IntermediateSize, d)
			continue
		}
		e, w := cfg.NRoutedExperts, cfg.MoEIntermediateSize
		out[p+"mlp.gate.weight"] = []int{e, d}
		out[p+"mlp.gate.e_score_correction_bias"] = []int{e}
		for j := range e {
			addMLPShapes(out, fmt.Sprintf("%smlp.experts.%d.", p, j), w, d)
		}
		if cfg.NSharedExperts > 0 {
			addMLPShapes(out, p+"mlp.shared_experts.", cfg.NSharedExperts*w, d)
		}
	}
	return out
}

// layerRouted reports whether layer i (an MTP layer for i ≥
// num_hidden_layers: a MoE layer whenever the model routes) has routed
// experts.
func layerRouted(cfg *config.Model, i int) bool {
	if i >= cfg.NumLayers {
		return cfg.HasRouted(cfg.NumLayers)
	}
	return cfg.Routed(i)
}

func addMLPShapes(out map[string][]int, p string, w, d int) {
	out[p+"gate_proj.weight"] = []int{w, d}
	out[p+"up_proj.weight"] = []int{w, d}
	out[p+"down_proj.weight"] = []int{d, w}
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
	dense    *mlpWeights // dense layers
	moe      *moeWeights // routed layers
}

// Model is a loaded oracle model. It is safe for concurrent Runs.
type Model struct {
	cfg    config.Model
	opt    Options
	embed  []float32
	norm   []float32
	head   []float32
	layers []layerWeights // the decoder layers, then the MTP layers' blocks
	mtp    []mtpWeights
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
	m := &Model{cfg: *cfg, opt: opt, layers: make([]layerWeights, cfg.NumLayers+cfg.NumNextNPredict), rope: newRopeTable(cfg)}

	shapes := TensorShapes(cfg)
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	slices.Sort(names)
	got := make(map[string][]float32, len(shapes))
	var errs []error
	fp8, _ := w.(FP8Source)
	for _, name := range names {
		want := shapes[name]
		vals, shape, err := readWeight(w, fp8, name)
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
		}
		mlp := func(p string, w int) *mlpWeights {
			return &mlpWeights{gate: got[p+"gate_proj.weight"], up: got[p+"up_proj.weight"], down: got[p+"down_proj.weight"], width: w}
		}
		if i >= cfg.NumLayers {
			head := m.head
			if cfg.MTPOwnHead() {
				head = got[p+"shared_head.head.weight"]
			}
			m.mtp = append(m.mtp, mtpWeights{enorm: got[p+"enorm.weight"], hnorm: got[p+"hnorm.weight"],
				eh: got[p+"eh_proj.weight"], headNorm: got[p+"shared_head.norm.weight"], head: head})
		}
		if !layerRouted(cfg, i) {
			m.layers[i].dense = mlp(p+"mlp.", cfg.IntermediateSize)
			continue
		}
		mw := &moeWeights{router: got[p+"mlp.gate.weight"], bias: got[p+"mlp.gate.e_score_correction_bias"]}
		for j := range cfg.NRoutedExperts {
			mw.experts = append(mw.experts, *mlp(fmt.Sprintf("%smlp.experts.%d.", p, j), cfg.MoEIntermediateSize))
		}
		if cfg.NSharedExperts > 0 {
			mw.shared = mlp(p+"mlp.shared_experts.", cfg.NSharedExperts*cfg.MoEIntermediateSize)
		}
		m.layers[i].moe = mw
	}
	return m, nil
}

// readWeight returns a tensor's float32 values: an fp8 weight dequantized
// from its codes and block scales, anything else as the source gives it.
func readWeight(w WeightSource, fp8 FP8Source, name string) ([]float32, []int, error) {
	if fp8 != nil {
		codes, scales, shape, ok, err := fp8.FP8(name)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			if len(shape) != 2 {
				return nil, nil, fmt.Errorf("fp8 tensor %s has shape %v; only [out, in] weights are stored in fp8", name, shape)
			}
			v, err := dequantFP8(codes, scales, shape[0], shape[1])
			return v, shape, err
		}
	}
	return w.Tensor(name)
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
