package config

import (
	"embed"
	"fmt"
)

// Built-in presets.
//
//   - "glm-5" and "deepseek-v3.2" are the published configurations, read
//     from published/*.json at start-up (the planner and `model inspect`
//     use them; their weights are far too large for this engine's hosts).
//   - The dense "-mini" presets keep the exact 576/512 MLA kernel shapes and
//     the 128-wide indexer of the real models at a size that runs on a
//     laptop; "glm5-shape" has GLM-5's exact attention dimensions for kernel
//     benchmarks; "glm5-dense-350m" is a whole dense model of about 356M
//     parameters with GLM-5's head dimensions (hidden 2048, 4 layers, 16
//     heads, indexer 32 × 128, top-k 2048), for end-to-end benchmarks.
//   - The "-moe-mini" presets are faithful tiny checkpoints of the real
//     architecture: the minis' attention, one dense and two MoE layers with
//     16 routed experts of width 128 (4 per token, one shared expert), GLM-5's
//     single routing group or DeepSeek-V3.2's grouped routing (4 groups, best
//     2), and one MTP layer.
//   - "glm5-moe-shape" has GLM-5's attention, hidden size 6144 and expert
//     width 2048, with as many experts as fit in 8 GiB of fp8 weights, for
//     benchmarks of MoE decode and prefill.
var presets = map[string]func() *Model{
	"glm5-mini":       glm5Mini,
	"v32-mini":        v32Mini,
	"glm5-shape":      glm5Shape,
	"glm5-dense-350m": glm5Dense350M,
	"glm5-moe-mini":   glm5MoEMini,
	"v32-moe-mini":    v32MoEMini,
	"glm5-moe-shape":  glm5MoEShape,
	"glm-5":           published("glm-5"),
	"deepseek-v3.2":   published("deepseek-v3.2"),
}

// DefaultPreset is the model every command uses when none is given.
const DefaultPreset = "glm5-mini"

//go:embed published/*.json
var publishedFiles embed.FS

// published returns the preset read from published/NAME.json. The file is
// parsed once per call so that callers may change what they get.
func published(name string) func() *Model {
	return func() *Model {
		data, err := publishedFiles.ReadFile("published/" + name + ".json")
		if err != nil {
			panic(fmt.Sprintf("config: embedded published/%s.json: %v", name, err))
		}
		m, err := ParseHF(data)
		if err != nil {
			panic(fmt.Sprintf("config: embedded published/%s.json: %v", name, err))
		}
		return m
	}
}

// denseMoE is the routing block of a dense preset: every layer keeps its
// MLP (first_k_dense_replace = num_hidden_layers, which transformers reads
// as all-dense) and no experts.
func denseMoE(layers int) MoE {
	return MoE{FirstKDenseReplace: layers, MoELayerFreq: 1, NGroup: 1, TopKGroup: 1, RoutedScalingFactor: 1,
		ScoringFunc: "sigmoid", TopKMethod: "noaux_tc", NormTopKProb: true}
}

func intp(v int) *int { return &v }

func glm5Mini() *Model {
	return &Model{
		Architecture:          "glm_moe_dsa",
		HiddenSize:            256,
		NumLayers:             2,
		NumHeads:              8,
		QLoraRank:             64,
		KVLoraRank:            512,
		QKNopeHeadDim:         192,
		QKRopeHeadDim:         64,
		VHeadDim:              256,
		IndexNHeads:           4,
		IndexHeadDim:          128,
		IndexTopK:             16,
		VocabSize:             129280,
		IntermediateSize:      512,
		MaxPositionEmbeddings: 4096,
		RMSNormEps:            1e-5,
		RopeTheta:             1e6,
		RopeInterleave:        true,
		IndexerRopeInterleave: true,
		HiddenAct:             "silu",
		MoE:                   denseMoE(2),
		TorchDtype:            "bfloat16",
		BOSTokenID:            intp(0),
		EOSTokenIDs:           []int{1},
	}
}

func v32Mini() *Model {
	m := glm5Mini()
	m.Architecture = "deepseek_v32"
	m.IndexerRopeInterleave = false
	m.RopeTheta = 10000
	m.RMSNormEps = 1e-6
	m.RopeScaling = &YaRN{Factor: 40, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1}
	m.MaxPositionEmbeddings = 163840
	return m
}

func glm5Shape() *Model {
	m := glm5Mini()
	m.HiddenSize = 6144
	m.NumLayers = 1
	m.MoE = denseMoE(1)
	m.NumHeads = 64
	m.QLoraRank = 2048
	m.IndexNHeads = 32
	m.IndexTopK = 2048
	m.VocabSize = 8192
	m.IntermediateSize = 1024
	m.MaxPositionEmbeddings = 202752
	return m
}

// glm5Dense350M is a dense model of 356M parameters (bf16: 712 MB) with
// GLM-5's per-head dimensions, its q_lora_rank and indexer, at hidden size
// 2048: 16 heads, 4 layers, SwiGLU width 6144, a 16 Ki vocabulary with an
// untied LM head, top-k 2048, contexts up to 64 Ki.
func glm5Dense350M() *Model {
	m := glm5Mini()
	m.HiddenSize = 2048
	m.NumLayers = 4
	m.MoE = denseMoE(4)
	m.NumHeads = 16
	m.QLoraRank = 2048
	m.IndexNHeads = 32
	m.IndexTopK = 2048
	m.VocabSize = 16384
	m.IntermediateSize = 6144
	m.MaxPositionEmbeddings = 65536
	return m
}

// moeMini turns a dense mini into the faithful tiny MoE checkpoint: layer 0
// dense, layers 1 and 2 routed, one MTP layer.
func moeMini(m *Model, nGroup, topkGroup int) *Model {
	m.NumLayers = 3
	m.MoE = MoE{FirstKDenseReplace: 1, MoELayerFreq: 1, NRoutedExperts: 16, NSharedExperts: 1, NumExpertsPerTok: 4,
		MoEIntermediateSize: 128, NGroup: nGroup, TopKGroup: topkGroup, RoutedScalingFactor: 2.5,
		ScoringFunc: "sigmoid", TopKMethod: "noaux_tc", NormTopKProb: true}
	m.NumNextNPredict = 1
	return m
}

func glm5MoEMini() *Model { return moeMini(glm5Mini(), 1, 1) }

func v32MoEMini() *Model { return moeMini(v32Mini(), 4, 2) }

// glm5MoEShapeExperts is the routed expert count of glm5-moe-shape: the
// largest multiple of 16 for which its fp8 weights (two routed layers, the
// MTP layer included) fit in 8 GiB (config_test.go checks both sides).
const glm5MoEShapeExperts = 96

func glm5MoEShape() *Model {
	m := glm5Shape()
	m.NumLayers = 2
	m.IntermediateSize = 12288
	m.MoE = MoE{FirstKDenseReplace: 1, MoELayerFreq: 1, NRoutedExperts: glm5MoEShapeExperts, NSharedExperts: 1, NumExpertsPerTok: 8,
		MoEIntermediateSize: 2048, NGroup: 1, TopKGroup: 1, RoutedScalingFactor: 2.5,
		ScoringFunc: "sigmoid", TopKMethod: "noaux_tc", NormTopKProb: true}
	m.NumNextNPredict = 1
	return m
}
