package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cpmla/cpmla/checkpoints"
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
// read from an HF config.json or taken from a built-in preset. The attention
// and embedding fields live here; the expert layout is MoE (embedded, so its
// keys sit at the top level of config.json as they do in real checkpoints)
// and the fp8 weight format is Quantization.
type Model struct {
	// Name is the preset name or the checkpoint directory it came from.
	Name string `json:"-"`
	// Architecture is the HF model_type: "deepseek_v32" or "glm_moe_dsa"
	// (dense-MLA "deepseek_v3"/"deepseek_v2" configs are read too).
	Architecture string `json:"model_type"`

	HiddenSize            int     `json:"hidden_size"`
	NumLayers             int     `json:"num_hidden_layers"`
	NumHeads              int     `json:"num_attention_heads"`
	QLoraRank             int     `json:"-"` // 0 = plain q_proj (q_lora_rank null)
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
	RopeTheta             float64 `json:"-"`
	RopeScaling           *YaRN   `json:"-"`
	// RopeInterleave selects the interleaved (GPT-J) layout for the main MLA RoPE.
	RopeInterleave bool `json:"rope_interleave"`
	// IndexerRopeInterleave selects the interleaved layout for the indexer RoPE
	// (GLM-5: true; DeepSeek-V3.2: false = half-split).
	IndexerRopeInterleave bool `json:"indexer_rope_interleave"`
	// HiddenAct is the MLP activation; only "silu" (SwiGLU, also meant by
	// "") is implemented.
	HiddenAct string `json:"hidden_act"`

	MoE

	// NumNextNPredict is the number of multi-token-prediction layers stored
	// after the decoder layers (model.layers.{num_hidden_layers}…).
	NumNextNPredict int `json:"num_nextn_predict_layers"`

	TieWordEmbeddings bool   `json:"tie_word_embeddings"`
	TorchDtype        string `json:"-"`
	BOSTokenID        *int   `json:"-"`
	EOSTokenIDs       []int  `json:"-"`
	PadTokenID        *int   `json:"-"`

	// Quantization is the checkpoint's quantization_config (nil: weights are
	// stored in their own dtype).
	Quantization *Quantization `json:"-"`

	// Source records how a parsed config.json spelled what it holds, so that
	// MarshalHF writes the same keys back. It is nil for presets built in code.
	Source *HFSource `json:"-"`
}

// QKHeadDim is the per-head query/key width of the MHA form (nope + rope).
func (m *Model) QKHeadDim() int { return m.QKNopeHeadDim + m.QKRopeHeadDim }

// CacheRowDim is the width of one cached MLA row: latent + RoPE key (576).
func (m *Model) CacheRowDim() int { return m.KVLoraRank + m.QKRopeHeadDim }

// Sparse reports whether the model has a DSA lightning indexer.
func (m *Model) Sparse() bool { return m.IndexTopK > 0 && m.IndexNHeads > 0 }

// QInputDim is the width the query up-projections read: q_lora_rank, or the
// hidden size for a model without a q LoRA.
func (m *Model) QInputDim() int {
	if m.QLoraRank > 0 {
		return m.QLoraRank
	}
	return m.HiddenSize
}

// MTPOwnHead reports whether the checkpoint's MTP layers store their own
// shared_head.head and a copy of the embedding (DeepSeek-V3.x) or use the
// main model's (GLM-5 checkpoints store neither).
func (m *Model) MTPOwnHead() bool { return m.Architecture != "glm_moe_dsa" }

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

// DenseLayer reports whether decoder layer i uses a dense MLP (every layer
// of a model without routed experts).
func (m *Model) DenseLayer(i int) bool { return !m.MoE.Routed(i) }

// Validate checks the whole configuration and reports every problem at once:
// sizes the engine relies on, the expert layout, the quantization format,
// and the tokens the configuration names.
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
	if m.QLoraRank < 0 {
		errs = append(errs, fmt.Errorf("q_lora_rank must be ≥ 0 (or null), got %d", m.QLoraRank))
	}
	if m.QKRopeHeadDim <= 0 || m.QKRopeHeadDim%2 != 0 {
		errs = append(errs, fmt.Errorf("qk_rope_head_dim must be even and > 0, got %d", m.QKRopeHeadDim))
	}
	if m.IndexTopK < 0 {
		errs = append(errs, fmt.Errorf("index_topk must be ≥ 0 (0: dense MLA), got %d", m.IndexTopK))
	}
	if m.IndexTopK > 0 {
		pos("index_n_heads", m.IndexNHeads)
		if m.IndexHeadDim < m.QKRopeHeadDim {
			errs = append(errs, fmt.Errorf("index_head_dim (%d) must be ≥ qk_rope_head_dim (%d)", m.IndexHeadDim, m.QKRopeHeadDim))
		}
	}
	if !(m.RMSNormEps > 0) || math.IsInf(m.RMSNormEps, 0) {
		errs = append(errs, fmt.Errorf("rms_norm_eps must be a finite number > 0, got %g", m.RMSNormEps))
	}
	if !(m.RopeTheta > 0) || math.IsInf(m.RopeTheta, 0) {
		errs = append(errs, fmt.Errorf("rope_theta must be a finite number > 0, got %g", m.RopeTheta))
	}
	if y := m.RopeScaling; y != nil {
		if !(y.Factor > 0) || y.OriginalMaxPositionEmbeddings <= 0 || !(y.BetaFast > 0) || !(y.BetaSlow > 0) {
			errs = append(errs, fmt.Errorf("rope_scaling (yarn) needs factor, original_max_position_embeddings, beta_fast and beta_slow > 0, got %+v", *y))
		}
	}
	if m.HiddenAct != "silu" && m.HiddenAct != "" {
		errs = append(errs, fmt.Errorf("hidden_act %q is not implemented; the engine runs SwiGLU MLPs (hidden_act \"silu\")", m.HiddenAct))
	}
	if m.NumNextNPredict < 0 {
		errs = append(errs, fmt.Errorf("num_nextn_predict_layers must be ≥ 0, got %d", m.NumNextNPredict))
	}
	dense := false
	for i := 0; i < m.NumLayers; i++ {
		dense = dense || m.DenseLayer(i)
	}
	if dense {
		pos("intermediate_size", m.IntermediateSize)
	}
	errs = append(errs, m.MoE.validate(m.NumLayers)...)
	if m.Quantization != nil {
		if err := m.Quantization.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	token := func(name string, id int) {
		if m.VocabSize > 0 && (id < 0 || id >= m.VocabSize) {
			errs = append(errs, fmt.Errorf("%s %d is outside the vocabulary [0, %d)", name, id, m.VocabSize))
		}
	}
	for _, id := range m.EOSTokenIDs {
		token("eos_token_id", id)
	}
	if m.BOSTokenID != nil {
		token("bos_token_id", *m.BOSTokenID)
	}
	if m.PadTokenID != nil {
		token("pad_token_id", *m.PadTokenID)
	}
	if len(errs) > 0 {
		return fmt.Errorf("model config %q: %w", m.Name, errors.Join(errs...))
	}
	return nil
}

// Load resolves a model argument: a preset name, the name of a checkpoint
// built into the binary (package checkpoints), or a checkpoint directory
// holding config.json; a name is looked up before any directory of that
// name. The configuration is validated as a whole before it is returned. A
// file where a directory is expected is refused by name.
func Load(nameOrPath string) (*Model, error) {
	if p, ok := presets[nameOrPath]; ok {
		m := p()
		m.Name = nameOrPath
		if err := m.Validate(); err != nil {
			return nil, err
		}
		return m, nil
	}
	if fsys, ok := checkpoints.Open(nameOrPath); ok {
		return loadBuiltin(nameOrPath, fsys)
	}
	st, err := os.Stat(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("model %q is neither a preset (%s), a built-in checkpoint (%s) nor a checkpoint directory: %w",
			nameOrPath, strings.Join(PresetNames(), ", "), strings.Join(checkpoints.Names(), ", "), err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("model %q is a file, not a checkpoint directory: pass the directory that holds config.json (e.g. --model %s)", nameOrPath, filepath.Dir(nameOrPath))
	}
	path := filepath.Join(nameOrPath, "config.json")
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	return parseNamed(data, nameOrPath, path)
}

// maxConfigBytes bounds config.json: real ones are a few KiB.
const maxConfigBytes = 1 << 20

// loadBuiltin reads the config.json of the built-in checkpoint name.
func loadBuiltin(name string, fsys fs.FS) (*Model, error) {
	st, err := fs.Stat(fsys, "config.json")
	if err != nil {
		return nil, fmt.Errorf("built-in checkpoint %s: %w", name, err)
	}
	if st.Size() > maxConfigBytes {
		return nil, fmt.Errorf("built-in checkpoint %s: config.json is %d bytes; a config.json holds at most %d", name, st.Size(), maxConfigBytes)
	}
	data, err := fs.ReadFile(fsys, "config.json")
	if err != nil {
		return nil, fmt.Errorf("built-in checkpoint %s: %w", name, err)
	}
	return parseNamed(data, name, "built-in checkpoint "+name+": config.json")
}

// parseNamed parses and validates config.json's data as the model name;
// errors start with where.
func parseNamed(data []byte, name, where string) (*Model, error) {
	m, err := ParseHF(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	m.Name = name
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return m, nil
}

func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read model config: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read model config: %w", err)
	}
	if st.Size() > maxConfigBytes {
		return nil, fmt.Errorf("%s is %d bytes; a config.json holds at most %d", path, st.Size(), maxConfigBytes)
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("read model config: %w", err)
	}
	return data, nil
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

// Clone returns a deep copy of m (slices and pointers copied), so that a
// caller may change the copy without touching a shared preset.
func (m *Model) Clone() *Model {
	c := *m
	c.EOSTokenIDs = append([]int(nil), m.EOSTokenIDs...)
	c.MLPLayerTypes = append([]string(nil), m.MLPLayerTypes...)
	if m.RopeScaling != nil {
		y := *m.RopeScaling
		c.RopeScaling = &y
	}
	for _, p := range []**int{&c.BOSTokenID, &c.PadTokenID} {
		if *p != nil {
			v := **p
			*p = &v
		}
	}
	if m.Quantization != nil {
		q := *m.Quantization
		q.ModulesToNotConvert = append([]string(nil), m.Quantization.ModulesToNotConvert...)
		c.Quantization = &q
	}
	if m.Source != nil {
		s := *m.Source
		s.Extra = make(map[string]json.RawMessage, len(m.Source.Extra))
		for k, v := range m.Source.Extra {
			s.Extra[k] = v
		}
		s.Given = make(map[string]bool, len(m.Source.Given))
		for k, v := range m.Source.Given {
			s.Given[k] = v
		}
		c.Source = &s
	}
	return &c
}
