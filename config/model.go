package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// YaRN holds the rope-scaling parameters of DeepSeek-style YaRN
// (rope_scaling / rope_parameters with type "yarn").
type YaRN struct {
	Factor                        float64 `json:"factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
	BetaFast                      float64 `json:"beta_fast"`
	BetaSlow                      float64 `json:"beta_slow"`
	MScale                        float64 `json:"mscale"`
	MScaleAllDim                  float64 `json:"mscale_all_dim"`
}

// Model is the architecture of a DeepSeek-V3.2 / GLM-5 style sparse-MLA model,
// read from an HF config.json or taken from a built-in preset.
type Model struct {
	// Name is the preset name or the checkpoint directory it came from.
	Name string `json:"-"`
	// Architecture is the HF model_type: "deepseek_v32" or "glm_moe_dsa"
	// (dense-MLA "deepseek_v3"/"deepseek_v2" configs are read too).
	Architecture string `json:"model_type"`

	HiddenSize            int     `json:"hidden_size"`
	NumLayers             int     `json:"num_hidden_layers"`
	NumHeads              int     `json:"num_attention_heads"`
	QLoraRank             int     `json:"q_lora_rank"` // 0 = plain q_proj
	KVLoraRank            int     `json:"kv_lora_rank"`
	QKNopeHeadDim         int     `json:"qk_nope_head_dim"`
	QKRopeHeadDim         int     `json:"qk_rope_head_dim"`
	VHeadDim              int     `json:"v_head_dim"`
	IndexNHeads           int     `json:"index_n_heads"`
	IndexHeadDim          int     `json:"index_head_dim"`
	IndexTopK             int     `json:"index_topk"` // 0 = dense MLA (no indexer)
	VocabSize             int     `json:"vocab_size"`
	IntermediateSize      int     `json:"intermediate_size"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	RopeTheta             float64 `json:"rope_theta"`
	RopeScaling           *YaRN   `json:"rope_scaling,omitempty"`
	// RopeInterleave selects the interleaved (GPT-J) layout for the main MLA RoPE.
	RopeInterleave bool `json:"rope_interleave"`
	// IndexerRopeInterleave selects the interleaved layout for the indexer RoPE
	// (GLM-5: true; DeepSeek-V3.2: false = half-split).
	IndexerRopeInterleave bool `json:"indexer_rope_interleave"`

	// MoE fields: read for the planner's weight estimate; the CPU engine runs
	// dense SwiGLU layers only.
	FirstKDenseReplace  int `json:"first_k_dense_replace"`
	NRoutedExperts      int `json:"n_routed_experts"`
	NSharedExperts      int `json:"n_shared_experts"`
	NumExpertsPerTok    int `json:"num_experts_per_tok"`
	MoEIntermediateSize int `json:"moe_intermediate_size"`
	NumNextNPredict     int `json:"num_nextn_predict_layers"`

	TieWordEmbeddings bool   `json:"tie_word_embeddings"`
	TorchDtype        string `json:"torch_dtype"`
	BOSTokenID        int    `json:"bos_token_id"`
	EOSTokenIDs       []int  `json:"-"`
}

// QKHeadDim is the per-head query/key width of the MHA form (nope + rope).
func (m *Model) QKHeadDim() int { return m.QKNopeHeadDim + m.QKRopeHeadDim }

// CacheRowDim is the width of one cached MLA row: latent + RoPE key (576).
func (m *Model) CacheRowDim() int { return m.KVLoraRank + m.QKRopeHeadDim }

// Sparse reports whether the model has a DSA lightning indexer.
func (m *Model) Sparse() bool { return m.IndexTopK > 0 && m.IndexNHeads > 0 }

// YaRNMScale is DeepSeek's yarn_get_mscale: 0.1·m·ln(f) + 1, or 1 for f ≤ 1.
func YaRNMScale(factor, m float64) float64 {
	if factor <= 1 {
		return 1
	}
	return 0.1*m*math.Log(factor) + 1
}

// SoftmaxScale is (d_nope + d_rope)^-0.5 · mscale(factor, mscale_all_dim)²,
// the scale of both the MHA and the absorbed MQA dot products.
func (m *Model) SoftmaxScale() float64 {
	s := 1 / math.Sqrt(float64(m.QKHeadDim()))
	if m.RopeScaling != nil && m.RopeScaling.MScaleAllDim != 0 {
		ms := YaRNMScale(m.RopeScaling.Factor, m.RopeScaling.MScaleAllDim)
		s *= ms * ms
	}
	return s
}

// IndexerWeightScale is the constant folded into the indexer head weights:
// H_I^-0.5 · d_I^-0.5.
func (m *Model) IndexerWeightScale() float64 {
	return 1 / math.Sqrt(float64(m.IndexNHeads)) / math.Sqrt(float64(m.IndexHeadDim))
}

// DenseLayer reports whether layer i uses a dense MLP (true for every layer
// of a model without routed experts).
func (m *Model) DenseLayer(i int) bool {
	return m.NRoutedExperts == 0 || i < m.FirstKDenseReplace
}

// Validate checks the fields the engine relies on and reports every problem.
func (m *Model) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be > 0, got %d", name, v))
		}
	}
	pos("hidden_size", m.HiddenSize)
	pos("num_hidden_layers", m.NumLayers)
	pos("num_attention_heads", m.NumHeads)
	pos("kv_lora_rank", m.KVLoraRank)
	pos("qk_nope_head_dim", m.QKNopeHeadDim)
	pos("v_head_dim", m.VHeadDim)
	pos("vocab_size", m.VocabSize)
	pos("max_position_embeddings", m.MaxPositionEmbeddings)
	if m.QKRopeHeadDim <= 0 || m.QKRopeHeadDim%2 != 0 {
		errs = append(errs, fmt.Errorf("qk_rope_head_dim must be even and > 0, got %d", m.QKRopeHeadDim))
	}
	if m.IndexTopK > 0 {
		pos("index_n_heads", m.IndexNHeads)
		if m.IndexHeadDim < m.QKRopeHeadDim {
			errs = append(errs, fmt.Errorf("index_head_dim (%d) must be ≥ qk_rope_head_dim (%d)", m.IndexHeadDim, m.QKRopeHeadDim))
		}
	}
	if m.RMSNormEps <= 0 {
		errs = append(errs, fmt.Errorf("rms_norm_eps must be > 0, got %g", m.RMSNormEps))
	}
	if m.RopeTheta <= 0 {
		errs = append(errs, fmt.Errorf("rope_theta must be > 0, got %g", m.RopeTheta))
	}
	if y := m.RopeScaling; y != nil {
		if y.Factor <= 0 || y.OriginalMaxPositionEmbeddings <= 0 || y.BetaFast <= 0 || y.BetaSlow <= 0 {
			errs = append(errs, fmt.Errorf("rope_scaling (yarn) needs factor, original_max_position_embeddings, beta_fast and beta_slow > 0, got %+v", *y))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("model config %q: %w", m.Name, errors.Join(errs...))
	}
	return nil
}

// hfConfig mirrors the JSON keys that differ between DeepSeek-V3.2 and GLM-5.
type hfConfig struct {
	Model
	RopeParameters json.RawMessage `json:"rope_parameters"`
	RopeScalingRaw json.RawMessage `json:"rope_scaling"`
	EOS            json.RawMessage `json:"eos_token_id"`
	QLoraRankRaw   json.RawMessage `json:"q_lora_rank"`
	BOSRaw         json.RawMessage `json:"bos_token_id"`
}

type ropeParams struct {
	Type                          string   `json:"type"`
	RopeType                      string   `json:"rope_type"`
	RopeTheta                     *float64 `json:"rope_theta"`
	Factor                        float64  `json:"factor"`
	OriginalMaxPositionEmbeddings int      `json:"original_max_position_embeddings"`
	BetaFast                      float64  `json:"beta_fast"`
	BetaSlow                      float64  `json:"beta_slow"`
	MScale                        float64  `json:"mscale"`
	MScaleAllDim                  float64  `json:"mscale_all_dim"`
}

// ParseHF reads an HF config.json for DeepSeek-V3.2 (deepseek_v32) or GLM-5
// (glm_moe_dsa). rope_scaling and the newer rope_parameters are both accepted.
func ParseHF(data []byte) (*Model, error) {
	var c hfConfig
	c.Model.RopeInterleave = true
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("parse config.json: %w", err)
	}
	m := c.Model
	m.RopeScaling = nil
	// q_lora_rank may be null (V2-Lite: plain q_proj).
	if len(c.QLoraRankRaw) > 0 && string(c.QLoraRankRaw) != "null" {
		if err := json.Unmarshal(c.QLoraRankRaw, &m.QLoraRank); err != nil {
			return nil, fmt.Errorf("config.json q_lora_rank: %w", err)
		}
	} else {
		m.QLoraRank = 0
	}
	for _, raw := range []json.RawMessage{c.RopeScalingRaw, c.RopeParameters} {
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var rp ropeParams
		if err := json.Unmarshal(raw, &rp); err != nil {
			return nil, fmt.Errorf("config.json rope parameters: %w", err)
		}
		if rp.RopeTheta != nil && m.RopeTheta == 0 {
			m.RopeTheta = *rp.RopeTheta
		}
		kind := rp.Type
		if kind == "" {
			kind = rp.RopeType
		}
		switch kind {
		case "yarn", "deepseek_yarn":
			m.RopeScaling = &YaRN{
				Factor: rp.Factor, OriginalMaxPositionEmbeddings: rp.OriginalMaxPositionEmbeddings,
				BetaFast: rp.BetaFast, BetaSlow: rp.BetaSlow, MScale: rp.MScale, MScaleAllDim: rp.MScaleAllDim,
			}
			if m.RopeScaling.BetaFast == 0 {
				m.RopeScaling.BetaFast = 32
			}
			if m.RopeScaling.BetaSlow == 0 {
				m.RopeScaling.BetaSlow = 1
			}
		case "", "default":
		default:
			return nil, fmt.Errorf("config.json: rope type %q is not supported (want yarn or default)", kind)
		}
	}
	if len(c.EOS) > 0 && string(c.EOS) != "null" {
		var one int
		if err := json.Unmarshal(c.EOS, &one); err == nil {
			m.EOSTokenIDs = []int{one}
		} else if err := json.Unmarshal(c.EOS, &m.EOSTokenIDs); err != nil {
			return nil, fmt.Errorf("config.json eos_token_id: %w", err)
		}
	}
	if len(c.BOSRaw) > 0 && string(c.BOSRaw) != "null" {
		if err := json.Unmarshal(c.BOSRaw, &m.BOSTokenID); err != nil {
			return nil, fmt.Errorf("config.json bos_token_id: %w", err)
		}
	}
	if m.Architecture == "" {
		return nil, errors.New("config.json: model_type is missing")
	}
	if m.RopeTheta == 0 {
		m.RopeTheta = 10000
	}
	if m.RMSNormEps == 0 {
		m.RMSNormEps = 1e-6
	}
	return &m, nil
}

// MarshalHF writes the model as an HF config.json.
func (m *Model) MarshalHF() ([]byte, error) {
	out := map[string]any{
		"architectures":            []string{archClass(m.Architecture)},
		"model_type":               m.Architecture,
		"hidden_size":              m.HiddenSize,
		"num_hidden_layers":        m.NumLayers,
		"num_attention_heads":      m.NumHeads,
		"num_key_value_heads":      m.NumHeads,
		"kv_lora_rank":             m.KVLoraRank,
		"qk_nope_head_dim":         m.QKNopeHeadDim,
		"qk_rope_head_dim":         m.QKRopeHeadDim,
		"head_dim":                 m.QKRopeHeadDim,
		"v_head_dim":               m.VHeadDim,
		"vocab_size":               m.VocabSize,
		"intermediate_size":        m.IntermediateSize,
		"max_position_embeddings":  m.MaxPositionEmbeddings,
		"rms_norm_eps":             m.RMSNormEps,
		"rope_theta":               m.RopeTheta,
		"rope_interleave":          m.RopeInterleave,
		"indexer_rope_interleave":  m.IndexerRopeInterleave,
		"first_k_dense_replace":    m.FirstKDenseReplace,
		"n_routed_experts":         nilIfZero(m.NRoutedExperts),
		"n_shared_experts":         nilIfZero(m.NSharedExperts),
		"num_experts_per_tok":      nilIfZero(m.NumExpertsPerTok),
		"moe_intermediate_size":    m.MoEIntermediateSize,
		"num_nextn_predict_layers": m.NumNextNPredict,
		"tie_word_embeddings":      m.TieWordEmbeddings,
		"torch_dtype":              m.TorchDtype,
		"bos_token_id":             m.BOSTokenID,
	}
	if m.QLoraRank > 0 {
		out["q_lora_rank"] = m.QLoraRank
	} else {
		out["q_lora_rank"] = nil
	}
	if m.IndexTopK > 0 {
		out["index_n_heads"] = m.IndexNHeads
		out["index_head_dim"] = m.IndexHeadDim
		out["index_topk"] = m.IndexTopK
	}
	if m.RopeScaling != nil {
		y := m.RopeScaling
		out["rope_scaling"] = map[string]any{
			"type": "yarn", "factor": y.Factor, "original_max_position_embeddings": y.OriginalMaxPositionEmbeddings,
			"beta_fast": y.BetaFast, "beta_slow": y.BetaSlow, "mscale": y.MScale, "mscale_all_dim": y.MScaleAllDim,
		}
	}
	switch len(m.EOSTokenIDs) {
	case 0:
	case 1:
		out["eos_token_id"] = m.EOSTokenIDs[0]
	default:
		out["eos_token_id"] = m.EOSTokenIDs
	}
	return json.MarshalIndent(out, "", "  ")
}

func nilIfZero(v int) any {
	if v == 0 {
		return nil
	}
	return v
}

func archClass(modelType string) string {
	switch modelType {
	case "glm_moe_dsa":
		return "GlmMoeDsaForCausalLM"
	case "deepseek_v32":
		return "DeepseekV32ForCausalLM"
	case "deepseek_v2":
		return "DeepseekV2ForCausalLM"
	default:
		return "DeepseekV3ForCausalLM"
	}
}

// Load resolves a model argument: a preset name, a checkpoint directory
// holding config.json, or a path to a config.json file.
func Load(nameOrPath string) (*Model, error) {
	if p, ok := presets[nameOrPath]; ok {
		m := p()
		m.Name = nameOrPath
		return m, nil
	}
	path := nameOrPath
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "config.json")
	} else if err != nil {
		return nil, fmt.Errorf("model %q is neither a preset (%s) nor a readable path: %w", nameOrPath, strings.Join(PresetNames(), ", "), err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read model config: %w", err)
	}
	m, err := ParseHF(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Name = nameOrPath
	return m, nil
}

// PresetNames lists the built-in presets in sorted order.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
