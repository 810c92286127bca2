package model

import (
	"bytes"
	"testing"
)

// TestMTPEmbeddingCopyIsTheEmbedding: DeepSeek-V3.2 checkpoints store a copy
// of the embedding in the MTP layer, equal to model.embed_tokens (the MTP
// layer shares the main model's embedding); random checkpoints must too, or
// a runtime that reads the copy drafts differently from one that reads the
// main embedding.
func TestMTPEmbeddingCopyIsTheEmbedding(t *testing.T) {
	for _, dtype := range []string{WeightBF16, WeightF32} {
		cfg := moeConfig(t, "v32-moe-mini", dtype)
		cfg.VocabSize = 512 // the layout is the preset's; a small vocabulary keeps it quick
		if !cfg.MTPOwnHead() || cfg.NumNextNPredict != 1 {
			t.Fatalf("v32-moe-mini: MTP own head %v, %d MTP layers; the test needs DeepSeek's MTP layout", cfg.MTPOwnHead(), cfg.NumNextNPredict)
		}
		ts := RandomTensors(cfg, 11)
		main, err := ts.Tensor("model.embed_tokens.weight")
		if err != nil {
			t.Fatal(err)
		}
		cp, err := ts.Tensor(LayerPrefix(cfg.NumLayers) + "embed_tokens.weight")
		if err != nil {
			t.Fatal(err)
		}
		if main.DType != cp.DType || !bytes.Equal(main.Data, cp.Data) {
			t.Errorf("%s: the MTP layer's embed_tokens (%s) differs from model.embed_tokens (%s)", dtype, cp.DType, main.DType)
		}
		if other, _ := ts.Tensor(LayerPrefix(cfg.NumLayers) + "shared_head.head.weight"); bytes.Equal(other.Data, main.Data) {
			t.Errorf("%s: the MTP shared head equals the embedding: the check compares nothing", dtype)
		}
	}
}
