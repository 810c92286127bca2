package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// HFSource records how a parsed config.json spelled what it holds, so that
// MarshalHF writes back the keys it read.
type HFSource struct {
	// Given is the set of top-level keys the file held.
	Given map[string]bool
	// Extra holds the keys that change no arithmetic (architectures,
	// transformers_version, initializer_range, ...), written back unchanged.
	Extra map[string]json.RawMessage
	// RopeParameters is true when RoPE came as rope_parameters (newer
	// transformers) rather than rope_theta + rope_scaling.
	RopeParameters bool
	// EOSList is true when eos_token_id was a list.
	EOSList bool
	// DTypeKey is "torch_dtype" or "dtype", whichever the file used.
	DTypeKey string
	// Nulls are the keys given as null (written back as null while their
	// value stays zero).
	Nulls map[string]bool
}

// archDefaults returns the values transformers' config class of model_type
// gives keys a config.json leaves out. Dimension keys have no default: a
// config must state them.
func archDefaults(modelType string) (*Model, error) {
	m := &Model{
		Architecture:   modelType,
		HiddenAct:      "silu",
		RMSNormEps:     1e-6,
		RopeTheta:      10000,
		RopeInterleave: true,
		MoE: MoE{MoELayerFreq: 1, NGroup: 1, TopKGroup: 1, RoutedScalingFactor: 1,
			ScoringFunc: "sigmoid", TopKMethod: "noaux_tc", NormTopKProb: true},
	}
	zero, one := 0, 1
	switch modelType {
	case "glm_moe_dsa":
		m.RMSNormEps = 1e-5
		m.IndexerRopeInterleave = true
		m.IndexNHeads, m.IndexHeadDim, m.IndexTopK = 32, 128, 2048
		m.MoE = MoE{FirstKDenseReplace: 3, MoELayerFreq: 1, NRoutedExperts: 256, NSharedExperts: 1, NumExpertsPerTok: 8,
			MoEIntermediateSize: 2048, NGroup: 1, TopKGroup: 1, RoutedScalingFactor: 2.5,
			ScoringFunc: "sigmoid", TopKMethod: "noaux_tc", NormTopKProb: true}
	case "deepseek_v32", "deepseek_v3":
		if modelType == "deepseek_v32" {
			m.IndexNHeads, m.IndexHeadDim, m.IndexTopK = 64, 128, 2048
		}
		m.MoE = MoE{FirstKDenseReplace: 3, MoELayerFreq: 1, NRoutedExperts: 256, NSharedExperts: 1, NumExpertsPerTok: 8,
			MoEIntermediateSize: 2048, NGroup: 8, TopKGroup: 4, RoutedScalingFactor: 2.5,
			ScoringFunc: "sigmoid", TopKMethod: "noaux_tc", NormTopKProb: true}
	case "deepseek_v2":
		// DeepSeek-V2 routes with a softmax and plain top-k: read, then
		// refused by Validate if a layer routes.
		m.MoE.ScoringFunc, m.MoE.TopKMethod, m.MoE.NormTopKProb = "softmax", "greedy", false
	default:
		return nil, fmt.Errorf("model_type %q is not a sparse-MLA architecture cpmla runs; want glm_moe_dsa, deepseek_v32, deepseek_v3 or deepseek_v2", modelType)
	}
	m.BOSTokenID, m.EOSTokenIDs = &zero, []int{one}
	return m, nil
}

// specialKeys are the modelled keys ParseHF reads by hand (they are not json
// fields of Model).
var specialKeys = []string{"q_lora_rank", "rope_theta", "rope_scaling", "rope_parameters", "eos_token_id", "bos_token_id",
	"pad_token_id", "torch_dtype", "dtype", "quantization_config", "mlp_layer_types", "num_experts"}

// modelledKeys are every top-level key Model holds: its json fields (MoE's
// included) and the special keys.
var modelledKeys = func() map[string]bool {
	k := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
				k[tag] = true
			}
		}
	}
	walk(reflect.TypeOf(Model{}))
	for _, s := range specialKeys {
		k[s] = true
	}
	return k
}()

// nullIsZero are keys whose JSON null means "none" (0), as transformers
// reads None for them.
var nullIsZero = map[string]func(*Model){
	"n_routed_experts":         func(m *Model) { m.NRoutedExperts = 0 },
	"n_shared_experts":         func(m *Model) { m.NSharedExperts = 0 },
	"num_experts_per_tok":      func(m *Model) { m.NumExpertsPerTok = 0 },
	"moe_intermediate_size":    func(m *Model) { m.MoEIntermediateSize = 0 },
	"first_k_dense_replace":    func(m *Model) { m.FirstKDenseReplace = 0 },
	"index_topk":               func(m *Model) { m.IndexTopK = 0 },
	"num_nextn_predict_layers": func(m *Model) { m.NumNextNPredict = 0 },
}

// refusedKeys are keys of published configurations that change the math in
// a way the engine does not implement, with the value it does implement.
// A config that sets one to anything else is refused by name.
var refusedKeys = []struct {
	key, implemented string
	ok               func(raw json.RawMessage, m *Model) bool
}{
	{"attention_bias", "false", isFalse},
	{"mlp_bias", "false", isFalse},
	{"moe_router_dtype", `"float32" (the router always runs in float32)`, func(r json.RawMessage, _ *Model) bool { return isString(r, "float32", "fp32") }},
	{"index_topk_freq", "1 (every layer runs its own indexer)", func(r json.RawMessage, _ *Model) bool { return isNumber(r, 1) }},
	{"index_topk_pattern", `all "F" (every layer runs its own indexer)`, func(r json.RawMessage, _ *Model) bool { return allEntries(r, "F", "full") }},
	{"indexer_types", `all "full" (every layer runs its own indexer)`, func(r json.RawMessage, _ *Model) bool { return allEntries(r, "full") }},
	{"index_share_for_mtp_iteration", "false", isFalse},
	{"layer_types", `all "deepseek_sparse_attention" (or all "full_attention" for dense MLA)`, func(r json.RawMessage, m *Model) bool {
		if m.Sparse() {
			return allEntries(r, "deepseek_sparse_attention")
		}
		return allEntries(r, "full_attention")
	}},
}

func isNull(r json.RawMessage) bool { return len(r) == 0 || string(bytes.TrimSpace(r)) == "null" }

func isFalse(r json.RawMessage, _ *Model) bool {
	var b bool
	return isNull(r) || (json.Unmarshal(r, &b) == nil && !b)
}

func isString(r json.RawMessage, want ...string) bool {
	var s string
	if isNull(r) {
		return true
	}
	if json.Unmarshal(r, &s) != nil {
		return false
	}
	for _, w := range want {
		if s == w {
			return true
		}
	}
	return false
}

func isNumber(r json.RawMessage, want float64) bool {
	var v float64
	return isNull(r) || (json.Unmarshal(r, &v) == nil && v == want)
}

// allEntries reports whether r is null, a string of want characters/words,
// or a list whose every entry is one of want.
func allEntries(r json.RawMessage, want ...string) bool {
	if isNull(r) {
		return true
	}
	in := func(s string) bool {
		for _, w := range want {
			if s == w {
				return true
			}
		}
		return false
	}
	var s string
	if json.Unmarshal(r, &s) == nil {
		for _, c := range s {
			if !in(string(c)) {
				return false
			}
		}
		return true
	}
	var list []string
	if json.Unmarshal(r, &list) != nil {
		return false
	}
	for _, e := range list {
		if !in(e) {
			return false
		}
	}
	return true
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

// ParseHF reads an HF config.json of DeepSeek-V3.2 (deepseek_v32), GLM-5
// (glm_moe_dsa) or the dense-MLA deepseek_v3/deepseek_v2 family. Every key
// that changes the math is read; a key whose value the engine does not
// implement is refused by name; keys that change no arithmetic are kept in
// Source.Extra. Keys a config leaves out take transformers' defaults for its
// model_type. The result is not yet validated as a whole (Load does that).
func ParseHF(data []byte) (*Model, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("parse config.json: %w", err)
	}
	if top == nil {
		return nil, errors.New("parse config.json: not a JSON object")
	}
	var modelType string
	if raw, ok := top["model_type"]; !ok || json.Unmarshal(raw, &modelType) != nil || modelType == "" {
		return nil, errors.New("config.json: model_type is missing or not a string")
	}
	m, err := archDefaults(modelType)
	if err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("parse config.json: %w", err)
	}
	src := &HFSource{Given: map[string]bool{}, Extra: map[string]json.RawMessage{}, Nulls: map[string]bool{}, DTypeKey: "torch_dtype"}
	m.Source = src
	for k, raw := range top {
		src.Given[k] = true
		if !modelledKeys[k] {
			src.Extra[k] = raw
		}
		if isNull(raw) {
			src.Nulls[k] = true
			if f, ok := nullIsZero[k]; ok {
				f(m)
			}
		}
	}
	// q_lora_rank may be null (V2-Lite: plain q_proj).
	if raw, ok := top["q_lora_rank"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &m.QLoraRank); err != nil {
			return nil, fmt.Errorf("config.json q_lora_rank: %w", err)
		}
	}
	if raw, ok := top["num_experts"]; ok && !isNull(raw) {
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, fmt.Errorf("config.json num_experts: %w", err)
		}
		if top["n_routed_experts"] != nil && n != m.NRoutedExperts {
			return nil, fmt.Errorf("config.json: num_experts %d and n_routed_experts %d disagree; give one", n, m.NRoutedExperts)
		}
		m.NRoutedExperts = n
	}
	if err := parseRope(m, top); err != nil {
		return nil, err
	}
	if err := parseTokens(m, top); err != nil {
		return nil, err
	}
	for _, k := range []string{"torch_dtype", "dtype"} {
		if raw, ok := top[k]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, &m.TorchDtype); err != nil {
				return nil, fmt.Errorf("config.json %s: %w", k, err)
			}
			src.DTypeKey = k
		}
	}
	if raw, ok := top["quantization_config"]; ok && !isNull(raw) {
		if m.Quantization, err = parseQuantization(raw); err != nil {
			return nil, fmt.Errorf("config.json: %w", err)
		}
	}
	if raw, ok := top["mlp_layer_types"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &m.MLPLayerTypes); err != nil {
			return nil, fmt.Errorf("config.json mlp_layer_types: %w", err)
		}
	}
	var refused []string
	for _, r := range refusedKeys {
		if raw, ok := top[r.key]; ok && !r.ok(raw, m) {
			refused = append(refused, fmt.Sprintf("%s is %s, but the engine implements only %s", r.key, bytes.TrimSpace(raw), r.implemented))
		}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		return nil, fmt.Errorf("config.json: %s", strings.Join(refused, "; "))
	}
	return m, nil
}

func parseRope(m *Model, top map[string]json.RawMessage) error {
	if raw, ok := top["rope_theta"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &m.RopeTheta); err != nil {
			return fmt.Errorf("config.json rope_theta: %w", err)
		}
	}
	m.RopeScaling = nil
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		raw, ok := top[key]
		if !ok || isNull(raw) {
			continue
		}
		if key == "rope_parameters" {
			m.Source.RopeParameters = true
		}
		var rp ropeParams
		if err := json.Unmarshal(raw, &rp); err != nil {
			return fmt.Errorf("config.json %s: %w", key, err)
		}
		if rp.RopeTheta != nil {
			if _, top := top["rope_theta"]; !top {
				m.RopeTheta = *rp.RopeTheta
			}
		}
		kind := rp.Type
		if kind == "" {
			kind = rp.RopeType
		}
		switch kind {
		case "yarn", "deepseek_yarn":
			y := &YaRN{Factor: rp.Factor, OriginalMaxPositionEmbeddings: rp.OriginalMaxPositionEmbeddings,
				BetaFast: rp.BetaFast, BetaSlow: rp.BetaSlow, MScale: rp.MScale, MScaleAllDim: rp.MScaleAllDim}
			if y.BetaFast == 0 {
				y.BetaFast = 32
			}
			if y.BetaSlow == 0 {
				y.BetaSlow = 1
			}
			m.RopeScaling = y
		case "", "default":
		default:
			return fmt.Errorf("config.json: %s type %q is not supported (want yarn or default)", key, kind)
		}
	}
	return nil
}

func parseTokens(m *Model, top map[string]json.RawMessage) error {
	if raw, ok := top["eos_token_id"]; ok {
		m.EOSTokenIDs = nil
		if !isNull(raw) {
			var one int
			if err := json.Unmarshal(raw, &one); err == nil {
				m.EOSTokenIDs = []int{one}
			} else if err := json.Unmarshal(raw, &m.EOSTokenIDs); err != nil {
				return fmt.Errorf("config.json eos_token_id: %w", err)
			} else {
				m.Source.EOSList = true
			}
		}
	}
	for _, t := range []struct {
		key string
		dst **int
	}{{"bos_token_id", &m.BOSTokenID}, {"pad_token_id", &m.PadTokenID}} {
		raw, ok := top[t.key]
		if !ok {
			continue
		}
		*t.dst = nil
		if isNull(raw) {
			continue
		}
		var v int
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("config.json %s: %w", t.key, err)
		}
		*t.dst = &v
	}
	return nil
}

// MarshalHF writes the model as an HF config.json. A parsed config is
// written back with the keys it had (its Source); a preset built in code
// gets every key transformers and vLLM read.
func (m *Model) MarshalHF() ([]byte, error) {
	out := map[string]any{}
	src := m.Source
	given := func(k string) bool { return src == nil || src.Given[k] }
	opt := func(k string, v any) {
		if !given(k) {
			return
		}
		if src != nil && src.Nulls[k] && reflect.ValueOf(v).IsZero() {
			v = nil
		}
		out[k] = v
	}
	if src != nil {
		for k, v := range src.Extra {
			out[k] = v
		}
	} else {
		out["architectures"] = []string{archClass(m.Architecture)}
		out["num_key_value_heads"] = m.NumHeads
		out["head_dim"] = m.QKRopeHeadDim
		out["attention_bias"] = false
		out["attention_dropout"] = 0.0
		out["initializer_range"] = 0.02
		out["use_cache"] = true
	}
	for k, v := range map[string]any{
		"model_type":               m.Architecture,
		"hidden_size":              m.HiddenSize,
		"num_hidden_layers":        m.NumLayers,
		"num_attention_heads":      m.NumHeads,
		"kv_lora_rank":             m.KVLoraRank,
		"qk_nope_head_dim":         m.QKNopeHeadDim,
		"qk_rope_head_dim":         m.QKRopeHeadDim,
		"v_head_dim":               m.VHeadDim,
		"vocab_size":               m.VocabSize,
		"intermediate_size":        m.IntermediateSize,
		"max_position_embeddings":  m.MaxPositionEmbeddings,
		"rms_norm_eps":             m.RMSNormEps,
		"hidden_act":               cmp.Or(m.HiddenAct, "silu"),
		"num_nextn_predict_layers": m.NumNextNPredict,
		"tie_word_embeddings":      m.TieWordEmbeddings,
		"first_k_dense_replace":    m.FirstKDenseReplace,
		"n_routed_experts":         m.NRoutedExperts,
		"n_shared_experts":         m.NSharedExperts,
		"num_experts_per_tok":      m.NumExpertsPerTok,
		"moe_intermediate_size":    m.MoEIntermediateSize,
		"n_group":                  m.NGroup,
		"topk_group":               m.TopKGroup,
		"routed_scaling_factor":    m.RoutedScalingFactor,
		"scoring_func":             m.ScoringFunc,
		"topk_method":              m.TopKMethod,
		"norm_topk_prob":           m.NormTopKProb,
	} {
		opt(k, v)
	}
	opt("moe_layer_freq", max(m.MoELayerFreq, 1))
	if m.QLoraRank > 0 {
		out["q_lora_rank"] = m.QLoraRank
	} else {
		opt("q_lora_rank", nil)
	}
	if m.IndexTopK > 0 || (src != nil && src.Given["index_topk"]) {
		opt("index_n_heads", m.IndexNHeads)
		opt("index_head_dim", m.IndexHeadDim)
		opt("index_topk", m.IndexTopK)
	}
	opt("rope_interleave", m.RopeInterleave)
	opt("indexer_rope_interleave", m.IndexerRopeInterleave)
	m.marshalRope(out, given)
	dtypeKey := "torch_dtype"
	if src != nil {
		dtypeKey = src.DTypeKey
	}
	if m.TorchDtype != "" || given(dtypeKey) {
		out[dtypeKey] = m.TorchDtype
	}
	for _, t := range []struct {
		key string
		id  *int
	}{{"bos_token_id", m.BOSTokenID}, {"pad_token_id", m.PadTokenID}} {
		switch {
		case t.id != nil && given(t.key):
			out[t.key] = *t.id
		case src != nil && src.Given[t.key]:
			out[t.key] = nil
		}
	}
	switch {
	case len(m.EOSTokenIDs) == 1 && (src == nil || !src.EOSList):
		out["eos_token_id"] = m.EOSTokenIDs[0]
	case len(m.EOSTokenIDs) > 0:
		out["eos_token_id"] = m.EOSTokenIDs
	case src != nil && src.Given["eos_token_id"]:
		out["eos_token_id"] = nil
	}
	if len(m.MLPLayerTypes) > 0 {
		out["mlp_layer_types"] = m.MLPLayerTypes
	}
	if m.Quantization != nil {
		out["quantization_config"] = m.Quantization
	}
	return json.MarshalIndent(out, "", "  ")
}

// marshalRope writes rope_theta with rope_scaling, or rope_parameters, in the
// form the config came in (presets of glm_moe_dsa use rope_parameters, as
// GLM-5 publishes it).
func (m *Model) marshalRope(out map[string]any, given func(string) bool) {
	params := m.Architecture == "glm_moe_dsa"
	if m.Source != nil {
		params = m.Source.RopeParameters
	}
	yarn := func(p map[string]any) map[string]any {
		y := m.RopeScaling
		p["factor"], p["original_max_position_embeddings"] = y.Factor, y.OriginalMaxPositionEmbeddings
		p["beta_fast"], p["beta_slow"], p["mscale"], p["mscale_all_dim"] = y.BetaFast, y.BetaSlow, y.MScale, y.MScaleAllDim
		return p
	}
	if !params {
		out["rope_theta"] = m.RopeTheta
		if m.RopeScaling != nil {
			out["rope_scaling"] = yarn(map[string]any{"type": "yarn"})
		} else if m.Source != nil && m.Source.Given["rope_scaling"] {
			out["rope_scaling"] = nil
		}
		return
	}
	p := map[string]any{"rope_theta": m.RopeTheta, "rope_type": "default"}
	if m.RopeScaling != nil {
		p = yarn(map[string]any{"rope_theta": m.RopeTheta, "rope_type": "yarn"})
	}
	out["rope_parameters"] = p
	if m.Source != nil && m.Source.Given["rope_theta"] {
		out["rope_theta"] = m.RopeTheta
	}
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
