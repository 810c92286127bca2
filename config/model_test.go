package config

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSoftmaxScale(t *testing.T) {
	tests := []struct {
		preset string
		want   float64
	}{
		{"deepseek-v3.2", 0.1352337789},
		{"glm-5", 0.0625},
		{"glm5-mini", 0.0625},
		{"v32-mini", 0.1171158879}, // nope 192: 256^-0.5 · (0.1·ln 40 + 1)²
	}
	for _, tc := range tests {
		m, err := Load(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.SoftmaxScale(); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: SoftmaxScale = %.10f, want %.10f", tc.preset, got, tc.want)
		}
	}
}

func TestPresetsValidateAndRoundTrip(t *testing.T) {
	for _, name := range PresetNames() {
		m, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		data, err := m.MarshalHF()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseHF(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back.Name = m.Name
		if d := cmp.Diff(m, back, cmpopts.IgnoreFields(Model{}, "Source")); d != "" {
			t.Errorf("%s: round trip differs (-want +got):\n%s", name, d)
		}
	}
}

func TestParseHFGLM5RopeParameters(t *testing.T) {
	js := `{"model_type":"glm_moe_dsa","hidden_size":6144,"num_hidden_layers":78,"num_attention_heads":64,
	"q_lora_rank":2048,"kv_lora_rank":512,"qk_nope_head_dim":192,"qk_rope_head_dim":64,"v_head_dim":256,
	"index_n_heads":32,"index_head_dim":128,"index_topk":2048,"vocab_size":154880,"max_position_embeddings":202752,
	"rms_norm_eps":1e-5,"rope_parameters":{"rope_type":"default","rope_theta":1000000},"indexer_rope_interleave":true,
	"eos_token_id":[154820,154827,154829]}`
	m, err := ParseHF([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if m.RopeTheta != 1e6 || m.RopeScaling != nil || !m.RopeInterleave || !m.IndexerRopeInterleave {
		t.Errorf("rope fields: theta %g scaling %v interleave %v/%v", m.RopeTheta, m.RopeScaling, m.RopeInterleave, m.IndexerRopeInterleave)
	}
	if d := cmp.Diff([]int{154820, 154827, 154829}, m.EOSTokenIDs); d != "" {
		t.Error(d)
	}
}

func TestParseHFV32YaRNAndNullQLora(t *testing.T) {
	js := `{"model_type":"deepseek_v2","hidden_size":2048,"num_hidden_layers":27,"num_attention_heads":16,
	"q_lora_rank":null,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,
	"vocab_size":102400,"max_position_embeddings":163840,"rms_norm_eps":1e-6,"rope_theta":10000,
	"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096,"beta_fast":32,"beta_slow":1,"mscale":0.707,"mscale_all_dim":0.707},
	"eos_token_id":100001}`
	m, err := ParseHF([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if m.QLoraRank != 0 || m.Sparse() {
		t.Errorf("q_lora %d sparse %v", m.QLoraRank, m.Sparse())
	}
	if got, want := m.SoftmaxScale(), 0.1147213868; math.Abs(got-want) > 1e-9 {
		t.Errorf("V2-Lite scale %.10f want %.10f", got, want)
	}
}

func TestParseHFRejects(t *testing.T) {
	for _, js := range []string{`{`, `[]`, `null`, `{"hidden_size":1}`, `{"model_type":"x"}`, `{"model_type":"glm_moe_dsa","rope_scaling":{"type":"linear"}}`} {
		if _, err := ParseHF([]byte(js)); err == nil {
			t.Errorf("ParseHF(%s) accepted", js)
		}
	}
	if _, err := Load("no-such-model"); err == nil {
		t.Error("Load of unknown name accepted")
	}
}

func FuzzParseHF(f *testing.F) {
	f.Add([]byte(`{"model_type":"glm_moe_dsa","hidden_size":256}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseHF(data)
		if err == nil {
			_ = m.Validate()
		}
	})
}
