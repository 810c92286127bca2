package model

import (
	"fmt"
	"strings"

	"github.com/cpmla/cpmla/config"
)

// TensorSpec names one checkpoint tensor and its shape under HF naming.
type TensorSpec struct {
	Name  string
	Shape []int
	// Kind says how random initialisation fills it.
	Kind InitKind
	// Part is the part of the model it belongs to (model inspect's grouping).
	Part Part
	// Linear marks a Linear weight: the tensors an fp8 checkpoint stores as
	// F8_E4M3 with a weight_scale_inv, unless they are kept in their own
	// dtype (KeepDType).
	Linear bool
	// KeepDType marks the Linear weights real fp8 checkpoints keep in bf16:
	// the router, the indexer's head-weight projection, the MTP glue.
	KeepDType bool
	// F32 marks the tensors real checkpoints store in float32 whatever the
	// model dtype (the router's selection bias).
	F32 bool
}

// Quantizable reports whether an fp8 checkpoint stores the tensor as
// F8_E4M3 with a weight_scale_inv.
func (s TensorSpec) Quantizable() bool { return s.Linear && !s.KeepDType }

// InitKind selects the distribution of a randomly initialised tensor.
type InitKind int

const (
	// InitLinear draws N(0, 1/fan_in): unit-variance outputs for unit-variance inputs.
	InitLinear InitKind = iota
	// InitEmbedding draws N(0, 1).
	InitEmbedding
	// InitNormWeight draws 1 + N(0, 0.1²).
	InitNormWeight
	// InitBias draws N(0, 0.1²).
	InitBias
)

// Part is the part of a model a tensor belongs to.
type Part string

// The parts `model inspect` reports.
const (
	PartEmbedding Part = "embeddings"
	PartAttention Part = "attention"
	PartIndexer   Part = "indexer"
	PartNorms     Part = "norms"
	PartDenseMLP  Part = "dense mlp"
	PartRouter    Part = "router"
	PartExperts   Part = "routed experts"
	PartShared    Part = "shared experts"
	PartMTP       Part = "mtp"
)

// ScaleSuffix is the name suffix of an fp8 weight's block scales.
const ScaleSuffix = "_scale_inv"

// LayerPrefix is the HF prefix of decoder layer i.
func LayerPrefix(i int) string { return fmt.Sprintf("model.layers.%d.", i) }

// ExpertPrefix is the HF prefix of routed expert j of the MoE block at prefix p.
func ExpertPrefix(p string, j int) string { return fmt.Sprintf("%smlp.experts.%d.", p, j) }

// TensorSpecs lists every tensor of a checkpoint of cfg, in a fixed order:
// the embedding, every decoder layer (attention, indexer, dense MLP or MoE
// block), the final norm, the LM head (absent with tied embeddings), then
// the num_nextn_predict_layers MTP layers at model.layers.{num_hidden_layers}…
// as DeepSeek-V3.2 and GLM-5 store them. fp8 block scales are not listed:
// every Quantizable tensor of an fp8 checkpoint has one beside it.
func TensorSpecs(cfg *config.Model) []TensorSpec {
	d := cfg.HiddenSize
	specs := []TensorSpec{{Name: "model.embed_tokens.weight", Shape: []int{cfg.VocabSize, d}, Kind: InitEmbedding, Part: PartEmbedding}}
	for i := 0; i < cfg.NumLayers; i++ {
		specs = append(specs, decoderLayerSpecs(cfg, LayerPrefix(i), cfg.DenseLayer(i), "")...)
	}
	specs = append(specs, TensorSpec{Name: "model.norm.weight", Shape: []int{d}, Kind: InitNormWeight, Part: PartNorms})
	if !cfg.TieWordEmbeddings {
		specs = append(specs, TensorSpec{Name: "lm_head.weight", Shape: []int{cfg.VocabSize, d}, Kind: InitLinear, Part: PartEmbedding, Linear: true, KeepDType: true})
	}
	for k := 0; k < cfg.NumNextNPredict; k++ {
		specs = append(specs, mtpLayerSpecs(cfg, cfg.NumLayers+k)...)
	}
	return specs
}

// mtpLayerSpecs lists MTP layer i: the glue (enorm, hnorm, eh_proj, the
// shared head's norm and, for DeepSeek-V3.2, its own head and a copy of the
// embedding) and a full MoE decoder layer. GLM-5 stores neither the head
// nor the embedding copy: its MTP layer uses the main LM head.
func mtpLayerSpecs(cfg *config.Model, i int) []TensorSpec {
	d, p := cfg.HiddenSize, LayerPrefix(i)
	glue := func(s TensorSpec) TensorSpec { s.Part = PartMTP; return s }
	specs := []TensorSpec{
		glue(TensorSpec{Name: p + "enorm.weight", Shape: []int{d}, Kind: InitNormWeight}),
		glue(TensorSpec{Name: p + "hnorm.weight", Shape: []int{d}, Kind: InitNormWeight}),
		glue(TensorSpec{Name: p + "eh_proj.weight", Shape: []int{d, 2 * d}, Kind: InitLinear, Linear: true, KeepDType: true}),
		glue(TensorSpec{Name: p + "shared_head.norm.weight", Shape: []int{d}, Kind: InitNormWeight}),
	}
	if cfg.MTPOwnHead() {
		specs = append(specs,
			glue(TensorSpec{Name: p + "embed_tokens.weight", Shape: []int{cfg.VocabSize, d}, Kind: InitEmbedding}),
			glue(TensorSpec{Name: p + "shared_head.head.weight", Shape: []int{cfg.VocabSize, d}, Kind: InitLinear, Linear: true, KeepDType: true}))
	}
	// The MTP block is a MoE layer whenever the model routes at all.
	return append(specs, decoderLayerSpecs(cfg, p, !cfg.HasRouted(cfg.NumLayers), PartMTP)...)
}

// decoderLayerSpecs lists one decoder layer under prefix p; part overrides
// the parts of its tensors when set (the MTP block).
func decoderLayerSpecs(cfg *config.Model, p string, dense bool, part Part) []TensorSpec {
	d, h := cfg.HiddenSize, cfg.NumHeads
	dn, dr, dv, dc := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	a := p + "self_attn."
	lin := func(name string, out, in int, pt Part) TensorSpec {
		return TensorSpec{Name: name, Shape: []int{out, in}, Kind: InitLinear, Part: pt, Linear: true}
	}
	norm := func(name string, n int, pt Part) TensorSpec {
		return TensorSpec{Name: name, Shape: []int{n}, Kind: InitNormWeight, Part: pt}
	}
	specs := []TensorSpec{norm(p+"input_layernorm.weight", d, PartNorms)}
	if cfg.QLoraRank > 0 {
		specs = append(specs,
			lin(a+"q_a_proj.weight", cfg.QLoraRank, d, PartAttention),
			norm(a+"q_a_layernorm.weight", cfg.QLoraRank, PartNorms),
			lin(a+"q_b_proj.weight", h*(dn+dr), cfg.QLoraRank, PartAttention),
		)
	} else {
		specs = append(specs, lin(a+"q_proj.weight", h*(dn+dr), d, PartAttention))
	}
	specs = append(specs,
		lin(a+"kv_a_proj_with_mqa.weight", dc+dr, d, PartAttention),
		norm(a+"kv_a_layernorm.weight", dc, PartNorms),
		lin(a+"kv_b_proj.weight", h*(dn+dv), dc, PartAttention),
		lin(a+"o_proj.weight", d, h*dv, PartAttention),
	)
	if cfg.Sparse() {
		hi, di := cfg.IndexNHeads, cfg.IndexHeadDim
		proj := lin(a+"indexer.weights_proj.weight", hi, d, PartIndexer)
		proj.KeepDType = true
		specs = append(specs,
			lin(a+"indexer.wq_b.weight", hi*di, cfg.QInputDim(), PartIndexer),
			lin(a+"indexer.wk.weight", di, d, PartIndexer),
			TensorSpec{Name: a + "indexer.k_norm.weight", Shape: []int{di}, Kind: InitNormWeight, Part: PartIndexer},
			TensorSpec{Name: a + "indexer.k_norm.bias", Shape: []int{di}, Kind: InitBias, Part: PartIndexer},
			proj,
		)
	}
	specs = append(specs, norm(p+"post_attention_layernorm.weight", d, PartNorms))
	if dense {
		w := cfg.IntermediateSize
		specs = append(specs,
			lin(p+"mlp.gate_proj.weight", w, d, PartDenseMLP),
			lin(p+"mlp.up_proj.weight", w, d, PartDenseMLP),
			lin(p+"mlp.down_proj.weight", d, w, PartDenseMLP),
		)
	} else {
		e, w := cfg.NRoutedExperts, cfg.MoEIntermediateSize
		router := lin(p+"mlp.gate.weight", e, d, PartRouter)
		router.KeepDType = true
		specs = append(specs, router,
			TensorSpec{Name: p + "mlp.gate.e_score_correction_bias", Shape: []int{e}, Kind: InitBias, Part: PartRouter, F32: true})
		for j := 0; j < e; j++ {
			x := ExpertPrefix(p, j)
			specs = append(specs,
				lin(x+"gate_proj.weight", w, d, PartExperts),
				lin(x+"up_proj.weight", w, d, PartExperts),
				lin(x+"down_proj.weight", d, w, PartExperts),
			)
		}
		if ns := cfg.NSharedExperts; ns > 0 {
			sw := ns * w
			specs = append(specs,
				lin(p+"mlp.shared_experts.gate_proj.weight", sw, d, PartShared),
				lin(p+"mlp.shared_experts.up_proj.weight", sw, d, PartShared),
				lin(p+"mlp.shared_experts.down_proj.weight", d, sw, PartShared),
			)
		}
	}
	if part != "" {
		for i := range specs {
			specs[i].Part = part
		}
	}
	return specs
}

// ModuleOf is the module path of a weight tensor (its name without the
// ".weight" suffix), the name quantization_config.modules_to_not_convert
// lists.
func ModuleOf(tensor string) string { return strings.TrimSuffix(tensor, ".weight") }

// Elems is the element count of a shape.
func Elems(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}
