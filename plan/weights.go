package plan

import (
	"fmt"
	"math"
	"strings"

	"github.com/cpmla/cpmla/config"
)

// Weight dtypes the estimate knows. Quantized dtypes apply to the linear
// projections of attention, indexer and MLP/experts; embeddings, the LM
// head, norms, the router and the indexer head weights stay bf16.
const (
	WeightBF16  = "bf16"
	WeightF32   = "f32"
	WeightFP8   = "fp8"   // e4m3, one f32 scale per 128×128 block
	WeightNVFP4 = "nvfp4" // e2m1, one e4m3 scale per 16 values
)

// WeightBytesPerParam is the storage of one parameter of a quantizable
// linear layer: bf16 2, f32 4, fp8 1 + 4/(128·128), nvfp4 0.5 + 1/16.
func WeightBytesPerParam(dtype string) (float64, error) {
	switch strings.ToLower(dtype) {
	case WeightBF16, "bfloat16", "":
		return 2, nil
	case WeightF32, "float32":
		return 4, nil
	case WeightFP8:
		return 1 + 4.0/(128*128), nil
	case WeightNVFP4:
		return 0.5 + 1.0/16, nil
	}
	return 0, fmt.Errorf("weight dtype %q is not supported; use bf16, fp8, nvfp4 or f32", dtype)
}

// Sharding says how a group of parameters is split across ranks.
type Sharding int

// Shardings: split over TP (column/row parallel, vocab parallel), held
// whole by every rank, or distributed by expert parallelism.
const (
	ShardTP Sharding = iota
	ShardReplicated
	ShardExperts
)

// ParamGroup is a group of parameters with one sharding and one storage.
type ParamGroup struct {
	Name      string
	Params    int64
	Sharding  Sharding
	Quantized bool // stored in the weight dtype (else bf16)
}

// ParamGroups counts the parameters of a DeepSeek-V3.2 / GLM-5 style model
// from its config, by sharding. With mtp, the next-n predict modules (a
// full MoE decoder layer each, with their own embedding and head copies
// where the checkpoint stores them: DeepSeek does, GLM-5 does not) are
// included.
func ParamGroups(m *config.Model, mtp bool) []ParamGroup {
	h, heads := int64(m.HiddenSize), int64(m.NumHeads)
	// The indexer's query projection reads the q latent, or the hidden
	// state when the model has no q latent.
	ql := h
	if m.QLoraRank > 0 {
		ql = int64(m.QLoraRank)
	}
	kl, rope := int64(m.KVLoraRank), int64(m.QKRopeHeadDim)
	nope, v := int64(m.QKNopeHeadDim), int64(m.VHeadDim)
	vocab := int64(m.VocabSize)

	var attnRep, attnTP, attnNorm int64
	if m.QLoraRank > 0 {
		attnRep += h * ql // q_a_proj
		attnNorm += ql    // q_a_layernorm
	} else {
		attnTP += h * heads * (nope + rope) // q_proj
	}
	if m.QLoraRank > 0 {
		attnTP += ql * heads * (nope + rope) // q_b_proj
	}
	attnRep += h * (kl + rope)              // kv_a_proj_with_mqa
	attnNorm += kl + 2*h                    // kv_a_layernorm, input and post-attention norms
	attnTP += kl*heads*(nope+v) + heads*v*h // kv_b_proj, o_proj
	var idxLinear, idxOther int64
	if m.Sparse() {
		ih, id := int64(m.IndexNHeads), int64(m.IndexHeadDim)
		idxLinear = ql*ih*id + h*id // wq_b, wk
		idxOther = 2*id + h*ih      // k_norm weight and bias, weights_proj
	}
	denseMLP := 3 * h * int64(m.IntermediateSize)
	e, moe := int64(m.NRoutedExperts), int64(m.MoEIntermediateSize)
	routed := e * 3 * h * moe
	shared := int64(m.NSharedExperts) * 3 * h * moe
	router := h*e + e // gate and score-correction bias

	layers := int64(m.NumLayers)
	var dense, moeLayers int64
	for i := 0; i < m.NumLayers; i++ {
		if m.DenseLayer(i) {
			dense++
		} else {
			moeLayers++
		}
	}
	head := vocab * h
	if m.TieWordEmbeddings {
		head = 0
	}
	groups := []ParamGroup{
		{"embedding", vocab * h, ShardTP, false},
		{"lm head", head, ShardTP, false},
		{"norms", layers*attnNorm + h, ShardReplicated, false},
		{"attention (TP-split)", layers * attnTP, ShardTP, true},
		{"attention (replicated)", layers * attnRep, ShardReplicated, true},
		{"indexer", layers * idxLinear, ShardReplicated, true},
		{"indexer heads and norm", layers * idxOther, ShardReplicated, false},
		{"dense MLP", dense * denseMLP, ShardTP, true},
		{"shared experts", moeLayers * shared, ShardTP, true},
		{"routed experts", moeLayers * routed, ShardExperts, true},
		{"router", moeLayers * router, ShardReplicated, false},
	}
	if mtp && m.NumNextNPredict > 0 {
		n := int64(m.NumNextNPredict)
		mlpTP, mlpExp, mlpRouter := shared, routed, router
		if e == 0 {
			mlpTP, mlpExp, mlpRouter = denseMLP, 0, 0
		}
		var ownHead int64
		if m.MTPOwnHead() {
			ownHead = 2 * vocab * h
		}
		groups = append(groups,
			ParamGroup{"mtp embedding and head", n * ownHead, ShardTP, false},
			ParamGroup{"mtp projections", n * (attnTP + mlpTP), ShardTP, true},
			ParamGroup{"mtp replicated projections", n * (attnRep + idxLinear + 2*h*h), ShardReplicated, true},
			ParamGroup{"mtp norms, router, indexer heads", n * (attnNorm + 3*h + idxOther + mlpRouter), ShardReplicated, false},
			ParamGroup{"mtp routed experts", n * mlpExp, ShardExperts, true},
		)
	}
	return groups
}

// TotalParams sums parameter groups.
func TotalParams(groups []ParamGroup) int64 {
	var n int64
	for _, g := range groups {
		n += g.Params
	}
	return n
}

// WeightBytesPerRank estimates the weight memory of one rank: TP-sharded
// groups divided by tp, expert groups divided by ep (experts are whole and
// spread over ep ranks; a rank holds ⌈experts/ep⌉ of them), replicated groups
// whole; quantizable groups in dtype, the rest in bf16.
func WeightBytesPerRank(m *config.Model, groups []ParamGroup, dtype string, tp, ep int) (int64, error) {
	if tp < 1 || ep < 1 {
		return 0, fmt.Errorf("tensor parallel (%d) and expert parallel (%d) sizes must be ≥ 1", tp, ep)
	}
	q, err := WeightBytesPerParam(dtype)
	if err != nil {
		return 0, err
	}
	var total float64
	for _, g := range groups {
		per := 2.0
		if g.Quantized {
			per = q
		}
		n := float64(g.Params)
		switch g.Sharding {
		case ShardTP:
			n /= float64(tp)
		case ShardExperts:
			if e := m.NRoutedExperts; e > 0 {
				n = n / float64(e) * math.Ceil(float64(e)/float64(ep))
			}
		}
		total += n * per
	}
	return int64(math.Ceil(total)), nil
}
