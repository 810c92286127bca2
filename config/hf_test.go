package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPublishedPresetsKeyForKey pins the glm-5 and deepseek-v3.2 presets to
// the published config.json files: written back, they have the same keys
// with the same values.
func TestPublishedPresetsKeyForKey(t *testing.T) {
	for _, name := range []string{"glm-5", "deepseek-v3.2"} {
		file, err := publishedFiles.ReadFile("published/" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		m, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.MarshalHF()
		if err != nil {
			t.Fatal(err)
		}
		var want, got map[string]any
		if err := json.Unmarshal(file, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: preset written back differs from the published config.json (-published +written):\n%s", name, d)
		}
	}
}

func TestPublishedPresetsMath(t *testing.T) {
	glm, _ := Load("glm-5")
	v32, _ := Load("deepseek-v3.2")
	type row struct {
		Routed, Dense, Sparse           bool
		Experts, PerTok, Group, TopKGrp int
		RSF                             float64
		Quant                           bool
		EOS                             []int
	}
	got := map[string]row{}
	for n, m := range map[string]*Model{"glm-5": glm, "deepseek-v3.2": v32} {
		got[n] = row{m.Routed(3), m.DenseLayer(2), m.Sparse(), m.NRoutedExperts, m.NumExpertsPerTok, m.NGroup, m.TopKGroup,
			m.RoutedScalingFactor, m.Quantization != nil, m.EOSTokenIDs}
	}
	want := map[string]row{
		"glm-5":         {true, true, true, 256, 8, 1, 1, 2.5, false, []int{154820, 154827, 154829}},
		"deepseek-v3.2": {true, true, true, 256, 8, 8, 4, 2.5, true, []int{1}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Error(d)
	}
	if glm.RopeTheta != 1e6 || !glm.IndexerRopeInterleave || v32.IndexerRopeInterleave || v32.RopeScaling == nil || v32.RopeScaling.Factor != 40 {
		t.Errorf("rope: glm θ %g interleave %v; v32 interleave %v scaling %+v", glm.RopeTheta, glm.IndexerRopeInterleave, v32.IndexerRopeInterleave, v32.RopeScaling)
	}
}

// TestDensePresetsReadAsDense: transformers' deepseek_v32 and glm_moe_dsa
// classes make layer i a MoE layer when i ≥ first_k_dense_replace, so a
// dense preset must write first_k_dense_replace ≥ num_hidden_layers.
func TestDensePresetsReadAsDense(t *testing.T) {
	for _, name := range PresetNames() {
		m, _ := Load(name)
		if m.HasRouted(m.NumLayers) {
			continue
		}
		out, _ := m.MarshalHF()
		var js struct {
			FirstK int `json:"first_k_dense_replace"`
			Layers int `json:"num_hidden_layers"`
		}
		if err := json.Unmarshal(out, &js); err != nil {
			t.Fatal(err)
		}
		if js.FirstK < js.Layers {
			t.Errorf("%s: dense preset writes first_k_dense_replace %d < num_hidden_layers %d; transformers would build MoE layers", name, js.FirstK, js.Layers)
		}
	}
}

// mutate returns the glm5-moe-mini config.json with key set to value (raw
// JSON; "" deletes the key).
func mutate(t *testing.T, base string, edits map[string]string) []byte {
	t.Helper()
	m, err := Load(base)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := m.MarshalHF()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(out, &top); err != nil {
		t.Fatal(err)
	}
	for k, v := range edits {
		if v == "" {
			delete(top, k)
		} else {
			top[k] = json.RawMessage(v)
		}
	}
	data, _ := json.Marshal(top)
	return data
}

func TestConfigRefusals(t *testing.T) {
	tests := []struct {
		name  string
		edits map[string]string
		want  []string // every string appears in the error
	}{
		{"softmax scoring", map[string]string{"scoring_func": `"softmax"`}, []string{"scoring_func", "softmax", "sigmoid"}},
		{"greedy top-k", map[string]string{"topk_method": `"greedy"`}, []string{"topk_method", "greedy", "noaux_tc"}},
		{"block 64", map[string]string{"quantization_config": `{"quant_method":"fp8","weight_block_size":[64,64]}`}, []string{"weight_block_size", "[64 64]", "[128, 128]"}},
		{"awq", map[string]string{"quantization_config": `{"quant_method":"awq","weight_block_size":[128,128]}`}, []string{"quant_method", "awq"}},
		{"e5m2", map[string]string{"quantization_config": `{"quant_method":"fp8","fmt":"e5m2","weight_block_size":[128,128]}`}, []string{"fmt", "e5m2"}},
		{"static activations", map[string]string{"quantization_config": `{"quant_method":"fp8","activation_scheme":"static","weight_block_size":[128,128]}`}, []string{"activation_scheme", "static"}},
		{"scale fmt", map[string]string{"quantization_config": `{"quant_method":"fp8","scale_fmt":"e8m0x","weight_block_size":[128,128]}`}, []string{"scale_fmt", "e8m0x"}},
		{"unknown quant key", map[string]string{"quantization_config": `{"quant_method":"fp8","weight_block_size":[128,128],"group_size":32}`}, []string{"group_size"}},
		{"gelu", map[string]string{"hidden_act": `"gelu"`}, []string{"hidden_act", "gelu", "silu"}},
		{"attention bias", map[string]string{"attention_bias": `true`}, []string{"attention_bias", "true"}},
		{"shared indexer", map[string]string{"indexer_types": `["full","shared","full"]`}, []string{"indexer_types", "shared"}},
		{"indexer freq", map[string]string{"index_topk_freq": `4`}, []string{"index_topk_freq", "4"}},
		{"bf16 router", map[string]string{"moe_router_dtype": `"bfloat16"`}, []string{"moe_router_dtype", "bfloat16"}},
		{"mlp types disagree", map[string]string{"mlp_layer_types": `["dense","dense","sparse"]`}, []string{"mlp_layer_types[1]", "dense", "first_k_dense_replace 1"}},
		{"groups do not divide", map[string]string{"n_group": `3`, "topk_group": `1`}, []string{"n_routed_experts 16", "n_group 3"}},
		{"topk_group > n_group", map[string]string{"n_group": `2`, "topk_group": `3`}, []string{"topk_group 3", "n_group = 2"}},
		{"too many per token", map[string]string{"n_group": `4`, "topk_group": `1`, "num_experts_per_tok": `5`}, []string{"num_experts_per_tok 5", "topk_group 1"}},
		{"no expert width", map[string]string{"moe_intermediate_size": `0`}, []string{"moe_intermediate_size"}},
		{"vocab zero", map[string]string{"vocab_size": `0`}, []string{"vocab_size must be > 0"}},
		{"eos outside vocab", map[string]string{"eos_token_id": `[1, 999999]`}, []string{"eos_token_id 999999"}},
		{"unknown arch", map[string]string{"model_type": `"llama"`}, []string{"llama", "glm_moe_dsa"}},
		{"num_experts disagrees", map[string]string{"num_experts": `8`}, []string{"num_experts 8", "n_routed_experts 16"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := mutate(t, "glm5-moe-mini", tc.edits)
			err := loadData(t, data)
			if err == nil {
				t.Fatalf("config accepted; want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// loadData writes data as config.json of a fresh directory and loads it.
func loadData(t *testing.T, data []byte) error {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	return err
}

func TestConfigAccepts(t *testing.T) {
	tests := []struct {
		name  string
		edits map[string]string
		check func(*Model) bool
	}{
		{"fp8 with exclusions", map[string]string{"quantization_config": `{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128],"modules_to_not_convert":["lm_head","mlp.gate"]}`},
			func(m *Model) bool { return m.Quantization.NotConverted("model.layers.2.mlp.gate") }},
		{"ue8m0", map[string]string{"quantization_config": `{"quant_method":"fp8","scale_fmt":"ue8m0","weight_block_size":[128,128]}`},
			func(m *Model) bool { return m.Quantization.ScaleFmt == "ue8m0" }},
		{"all-full indexers", map[string]string{"indexer_types": `["full","full","full"]`, "index_topk_freq": `1`}, func(*Model) bool { return true }},
		{"agreeing mlp types", map[string]string{"mlp_layer_types": `["dense","sparse","sparse"]`}, func(m *Model) bool { return m.Routed(1) && !m.Routed(0) }},
		{"moe_layer_freq 2", map[string]string{"moe_layer_freq": `2`}, func(m *Model) bool { return !m.Routed(1) && m.Routed(2) }},
		{"null experts is dense", map[string]string{"n_routed_experts": `null`}, func(m *Model) bool { return !m.HasRouted(m.NumLayers) }},
		{"dtype key", map[string]string{"torch_dtype": "", "dtype": `"float32"`}, func(m *Model) bool { return m.TorchDtype == "float32" && m.Source.DTypeKey == "dtype" }},
		{"router fp32", map[string]string{"moe_router_dtype": `"float32"`}, func(*Model) bool { return true }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseHF(mutate(t, "glm5-moe-mini", tc.edits))
			if err == nil {
				err = m.Validate()
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(m) {
				t.Errorf("parsed config does not hold what %q sets: %+v", tc.name, m.MoE)
			}
			out, _ := m.MarshalHF()
			var a, b map[string]any
			_ = json.Unmarshal(mutate(t, "glm5-moe-mini", tc.edits), &a)
			_ = json.Unmarshal(out, &b)
			if d := cmp.Diff(a, b); d != "" {
				t.Errorf("written back differs (-read +written):\n%s", d)
			}
		})
	}
}

func TestNotConverted(t *testing.T) {
	q := &Quantization{QuantMethod: "fp8", WeightBlockSize: []int{128, 128},
		ModulesToNotConvert: []string{"lm_head", "model.embed_tokens", "mlp.gate", "self_attn.indexers_proj"}}
	for module, want := range map[string]bool{
		"lm_head":                                       true,
		"model.embed_tokens":                            true,
		"model.layers.4.mlp.gate":                       true,
		"model.layers.4.mlp.gate_proj":                  false,
		"model.layers.4.mlp.experts.3.gate_proj":        false,
		"model.layers.4.self_attn.indexer.weights_proj": true,
		"model.layers.4.self_attn.indexer.wq_b":         false,
		"model.layers.4.self_attn.q_a_proj":             false,
	} {
		if got := q.NotConverted(module); got != want {
			t.Errorf("NotConverted(%q) = %v, want %v", module, got, want)
		}
	}
	var none *Quantization
	if none.NotConverted("lm_head") {
		t.Error("a nil quantization config excludes modules")
	}
}

func TestLoadRefusesConfigFile(t *testing.T) {
	dir := t.TempDir()
	m, _ := Load("glm5-mini")
	data, _ := m.MarshalHF()
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "is a file, not a checkpoint directory") || !strings.Contains(err.Error(), dir) {
		t.Errorf("Load(%s) = %v; want a refusal naming the file and its directory", path, err)
	}
	if _, err := Load(dir); err != nil {
		t.Errorf("Load(%s) = %v", dir, err)
	}
}
