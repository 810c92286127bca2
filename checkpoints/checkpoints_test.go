package checkpoints_test

import (
	"encoding/json"
	"io/fs"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/checkpoints"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/safetensors"
	"github.com/cpmla/cpmla/tokenizer"
)

// Every built-in checkpoint is in the published layout: config.json, an
// index whose every tensor its one shard holds, tensors that match the
// config one for one (model.Inspect refuses any mismatch), the tokenizer
// with its special tokens and chat template, and nothing else.
func TestBuiltinsArePublishedCheckpoints(t *testing.T) {
	if d := cmp.Diff([]string{"cpmla-tiny", "cpmla-tiny-fp8"}, checkpoints.Names()); d != "" {
		t.Fatal(d)
	}
	for _, name := range checkpoints.Names() {
		t.Run(name, func(t *testing.T) {
			fsys, ok := checkpoints.Open(name)
			if !ok {
				t.Fatal("not found")
			}
			files, err := fs.Glob(fsys, "*")
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"config.json", "model-00001-of-00001.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}
			if d := cmp.Diff(want, files); d != "" {
				t.Errorf("files (-want +got):\n%s", d)
			}
			cfg, err := config.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Architecture != "glm_moe_dsa" || cfg.KVLoraRank+cfg.QKRopeHeadDim != 576 || cfg.IndexTopK != 128 || cfg.NumNextNPredict != 1 || cfg.VocabSize != 512 || cfg.MaxPositionEmbeddings != 4096 {
				t.Errorf("config %+v is not cpmla-tiny's", cfg)
			}
			ck, err := safetensors.OpenFS(fsys, name)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			in, err := model.Inspect(cfg, ck)
			if err != nil {
				t.Fatal(err)
			}
			fp8 := in.ByDType["F8_E4M3"].Tensors > 0
			if fp8 != (name == "cpmla-tiny-fp8") || fp8 != (cfg.Quantization != nil) {
				t.Errorf("fp8 tensors %v, quantization_config %v", fp8, cfg.Quantization)
			}
			if fp8 && !slices.Contains(ck.Names(), "model.layers.1.mlp.experts.0.down_proj.weight_scale_inv") {
				t.Error("no weight_scale_inv beside the fp8 weights")
			}
			raw, err := fs.ReadFile(fsys, "model.safetensors.index.json")
			if err != nil {
				t.Fatal(err)
			}
			var idx struct {
				WeightMap map[string]string `json:"weight_map"`
			}
			if err := json.Unmarshal(raw, &idx); err != nil {
				t.Fatal(err)
			}
			if len(idx.WeightMap) != len(ck.Names()) {
				t.Errorf("the index lists %d tensors, the checkpoint holds %d", len(idx.WeightMap), len(ck.Names()))
			}
			tk, err := tokenizer.LoadFS(fsys, name)
			if err != nil {
				t.Fatal(err)
			}
			for id, tok := range map[int]string{508: "<|endoftext|>", 509: "<|user|>", 510: "<|assistant|>", 511: "<|system|>"} {
				if got, ok := tk.TokenID(tok); !ok || got != id || !tk.IsSpecial(id) {
					t.Errorf("%s is %d (%v), want special id %d", tok, got, ok, id)
				}
			}
			if d := cmp.Diff([]int{508, 509}, cfg.EOSTokenIDs); d != "" || tk.EOS() != 508 {
				t.Errorf("eos ids %v, tokenizer eos %d", cfg.EOSTokenIDs, tk.EOS())
			}
			chat, err := tk.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: "Question: 1"}}, true)
			if err != nil || chat != "<|user|>Question: 1<|assistant|>" {
				t.Errorf("chat %q, %v", chat, err)
			}
		})
	}
	if _, ok := checkpoints.Open("glm5-mini"); ok {
		t.Error("a preset name opened as a built-in checkpoint")
	}
	if _, ok := checkpoints.Open("."); ok {
		t.Error(`"." opened`)
	}
}
