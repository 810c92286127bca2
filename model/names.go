package model

import (
	"fmt"

	"github.com/cpmla/cpmla/config"
)

// TensorSpec names one checkpoint tensor and its shape under HF naming.
type TensorSpec struct {
	Name  string
	Shape []int
	// Kind says how random initialisation fills it.
	Kind InitKind
}

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

// LayerPrefix is the HF prefix of decoder layer i.
func LayerPrefix(i int) string { return fmt.Sprintf("model.layers.%d.", i) }

// TensorSpecs lists every tensor the engine reads for cfg, in a fixed order.
// MoE layers are not part of the CPU engine; cfg must describe dense layers.
func TensorSpecs(cfg *config.Model) []TensorSpec {
	d, h := cfg.HiddenSize, cfg.NumHeads
	dn, dr, dv, dc := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	specs := []TensorSpec{{"model.embed_tokens.weight", []int{cfg.VocabSize, d}, InitEmbedding}}
	for i := 0; i < cfg.NumLayers; i++ {
		p := LayerPrefix(i)
		a := p + "self_attn."
		specs = append(specs, TensorSpec{p + "input_layernorm.weight", []int{d}, InitNormWeight})
		if cfg.QLoraRank > 0 {
			specs = append(specs,
				TensorSpec{a + "q_a_proj.weight", []int{cfg.QLoraRank, d}, InitLinear},
				TensorSpec{a + "q_a_layernorm.weight", []int{cfg.QLoraRank}, InitNormWeight},
				TensorSpec{a + "q_b_proj.weight", []int{h * (dn + dr), cfg.QLoraRank}, InitLinear},
			)
		} else {
			specs = append(specs, TensorSpec{a + "q_proj.weight", []int{h * (dn + dr), d}, InitLinear})
		}
		specs = append(specs,
			TensorSpec{a + "kv_a_proj_with_mqa.weight", []int{dc + dr, d}, InitLinear},
			TensorSpec{a + "kv_a_layernorm.weight", []int{dc}, InitNormWeight},
			TensorSpec{a + "kv_b_proj.weight", []int{h * (dn + dv), dc}, InitLinear},
			TensorSpec{a + "o_proj.weight", []int{d, h * dv}, InitLinear},
		)
		if cfg.Sparse() {
			qIn := cfg.QLoraRank
			if qIn == 0 {
				qIn = d
			}
			hi, di := cfg.IndexNHeads, cfg.IndexHeadDim
			specs = append(specs,
				TensorSpec{a + "indexer.wq_b.weight", []int{hi * di, qIn}, InitLinear},
				TensorSpec{a + "indexer.wk.weight", []int{di, d}, InitLinear},
				TensorSpec{a + "indexer.k_norm.weight", []int{di}, InitNormWeight},
				TensorSpec{a + "indexer.k_norm.bias", []int{di}, InitBias},
				TensorSpec{a + "indexer.weights_proj.weight", []int{hi, d}, InitLinear},
			)
		}
		specs = append(specs,
			TensorSpec{p + "post_attention_layernorm.weight", []int{d}, InitNormWeight},
			TensorSpec{p + "mlp.gate_proj.weight", []int{cfg.IntermediateSize, d}, InitLinear},
			TensorSpec{p + "mlp.up_proj.weight", []int{cfg.IntermediateSize, d}, InitLinear},
			TensorSpec{p + "mlp.down_proj.weight", []int{d, cfg.IntermediateSize}, InitLinear},
		)
	}
	specs = append(specs,
		TensorSpec{"model.norm.weight", []int{d}, InitNormWeight},
		TensorSpec{"lm_head.weight", []int{cfg.VocabSize, d}, InitLinear},
	)
	return specs
}

// Elems is the element count of a shape.
func Elems(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}
