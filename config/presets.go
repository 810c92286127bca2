package config

// Built-in presets. The "-mini" presets keep the exact 576/512 MLA kernel
// shapes and the 128-wide indexer of the real models at a size that runs on
// a laptop; "glm5-shape" has GLM-5's exact attention dimensions for kernel
// benchmarks; "glm-5" and "deepseek-v3.2" are the published configurations
// (MoE included), used by the planner.
var presets = map[string]func() *Model{
	"glm5-mini":     glm5Mini,
	"v32-mini":      v32Mini,
	"glm5-shape":    glm5Shape,
	"glm-5":         glm5,
	"deepseek-v3.2": deepseekV32,
}

// DefaultPreset is the model every command uses when none is given.
const DefaultPreset = "glm5-mini"

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
		TorchDtype:            "bfloat16",
		BOSTokenID:            0,
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
	m.NumHeads = 64
	m.QLoraRank = 2048
	m.IndexNHeads = 32
	m.IndexTopK = 2048
	m.VocabSize = 8192
	m.IntermediateSize = 1024
	m.MaxPositionEmbeddings = 202752
	return m
}

func glm5() *Model {
	return &Model{
		Architecture:          "glm_moe_dsa",
		HiddenSize:            6144,
		NumLayers:             78,
		NumHeads:              64,
		QLoraRank:             2048,
		KVLoraRank:            512,
		QKNopeHeadDim:         192,
		QKRopeHeadDim:         64,
		VHeadDim:              256,
		IndexNHeads:           32,
		IndexHeadDim:          128,
		IndexTopK:             2048,
		VocabSize:             154880,
		IntermediateSize:      12288,
		MaxPositionEmbeddings: 202752,
		RMSNormEps:            1e-5,
		RopeTheta:             1e6,
		RopeInterleave:        true,
		IndexerRopeInterleave: true,
		FirstKDenseReplace:    3,
		NRoutedExperts:        256,
		NSharedExperts:        1,
		NumExpertsPerTok:      8,
		MoEIntermediateSize:   2048,
		NumNextNPredict:       1,
		TorchDtype:            "bfloat16",
		EOSTokenIDs:           []int{154820, 154827, 154829},
	}
}

func deepseekV32() *Model {
	return &Model{
		Architecture:          "deepseek_v32",
		HiddenSize:            7168,
		NumLayers:             61,
		NumHeads:              128,
		QLoraRank:             1536,
		KVLoraRank:            512,
		QKNopeHeadDim:         128,
		QKRopeHeadDim:         64,
		VHeadDim:              128,
		IndexNHeads:           64,
		IndexHeadDim:          128,
		IndexTopK:             2048,
		VocabSize:             129280,
		IntermediateSize:      18432,
		MaxPositionEmbeddings: 163840,
		RMSNormEps:            1e-6,
		RopeTheta:             10000,
		RopeScaling:           &YaRN{Factor: 40, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1},
		RopeInterleave:        true,
		IndexerRopeInterleave: false,
		FirstKDenseReplace:    3,
		NRoutedExperts:        256,
		NSharedExperts:        1,
		NumExpertsPerTok:      8,
		MoEIntermediateSize:   2048,
		NumNextNPredict:       1,
		TorchDtype:            "bfloat16",
		BOSTokenID:            0,
		EOSTokenIDs:           []int{1},
	}
}
