package model

import (
	"regexp"
	"sort"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/safetensors"
)

// Count is a number of tensors, parameters and bytes.
type Count struct {
	Tensors int   `json:"tensors"`
	Params  int64 `json:"params"`
	Bytes   int64 `json:"bytes"`
}

func (c *Count) add(params, bytes int64) {
	c.Tensors++
	c.Params += params
	c.Bytes += bytes
}

// Inspection describes a checkpoint (or what a checkpoint of a config holds):
// its layers, its parameters and bytes by dtype and by part, which tensors
// are fp8, and the parameters one token activates.
type Inspection struct {
	Model        string `json:"model"`
	Architecture string `json:"architecture"`
	// FromConfig is true when no weights were read: the counts are those
	// of a checkpoint of the config in its published format.
	FromConfig bool `json:"from_config"`
	// Layers lists each decoder layer's kind: "dense" or "moe".
	Layers    []string `json:"layers"`
	MTPLayers int      `json:"mtp_layers"`
	Total     Count    `json:"total"`
	// ByDType counts tensors by stored dtype (block scales are F32).
	ByDType map[string]Count `json:"by_dtype"`
	ByPart  map[Part]Count   `json:"by_part"`
	// FP8 lists the fp8 weights, with layer and expert numbers replaced by
	// "*" ("model.layers.*.mlp.experts.*.gate_proj.weight").
	FP8 []string `json:"fp8_tensors"`
	// ActiveParamsPerToken counts every main-model parameter but the routed
	// experts a token does not select (num_experts_per_tok of
	// n_routed_experts per routed layer); MTP layers are not counted.
	ActiveParamsPerToken int64 `json:"active_params_per_token"`
	// Quantization is the checkpoint's quantization_config, if any.
	Quantization *config.Quantization `json:"quantization_config,omitempty"`
}

var layerNumber = regexp.MustCompile(`\.\d+\.`)

// Inspect describes the checkpoint src holds for cfg, checking every tensor
// against the config as Build does (shapes, dtypes, fp8 block scales, no
// tensor the config does not account for) and refusing the first mismatch
// by name. With a nil src it describes a checkpoint of cfg in its published
// format: Linear weights fp8 under an fp8 quantization_config, the
// router's bias float32, everything else in cfg's torch_dtype.
func Inspect(cfg *config.Model, src TensorSource) (*Inspection, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	in := &Inspection{Model: cfg.Name, Architecture: cfg.Architecture, FromConfig: src == nil, MTPLayers: cfg.NumNextNPredict,
		ByDType: map[string]Count{}, ByPart: map[Part]Count{}, Quantization: cfg.Quantization}
	for i := 0; i < cfg.NumLayers; i++ {
		kind := "dense"
		if cfg.Routed(i) {
			kind = "moe"
		}
		in.Layers = append(in.Layers, kind)
	}
	var l *weightLoader
	if src != nil {
		l = newWeightLoader(cfg, src)
	}
	fp8 := map[string]bool{}
	for _, s := range TensorSpecs(cfg) {
		params := int64(Elems(s.Shape))
		dtype, bytes, scaleBytes, err := specStorage(cfg, l, s)
		if err != nil {
			return nil, err
		}
		count := func(dt string, b int64, p int64) {
			c := in.ByDType[dt]
			c.add(p, b)
			in.ByDType[dt] = c
		}
		count(dtype, bytes, params)
		if scaleBytes > 0 {
			count(safetensors.F32.String(), scaleBytes, 0)
			fp8[layerNumber.ReplaceAllString(s.Name, ".*.")] = true
		}
		pc := in.ByPart[s.Part]
		pc.add(params, bytes+scaleBytes)
		in.ByPart[s.Part] = pc
		in.Total.add(params, bytes+scaleBytes)
		if s.Part != PartMTP {
			active := params
			if s.Part == PartExperts {
				active = params * int64(cfg.NumExpertsPerTok) / int64(cfg.NRoutedExperts)
			}
			in.ActiveParamsPerToken += active
		}
	}
	if l != nil {
		if err := l.checkAllUsed(); err != nil {
			return nil, err
		}
	}
	for p := range fp8 {
		in.FP8 = append(in.FP8, p)
	}
	sort.Strings(in.FP8)
	return in, nil
}

// specStorage is the stored dtype and bytes of a tensor and of its block
// scales: read and checked from the loader's source, or, without one, as a
// published checkpoint of cfg stores it.
func specStorage(cfg *config.Model, l *weightLoader, s TensorSpec) (dtype string, bytes, scaleBytes int64, err error) {
	n := int64(Elems(s.Shape))
	if l == nil {
		switch {
		case s.F32:
			return "F32", 4 * n, 0, nil
		case cfg.Quantization != nil && s.Quantizable() && !cfg.Quantization.NotConverted(ModuleOf(s.Name)):
			blocks := int64(ceilDiv(s.Shape[0], config.FP8BlockSize) * ceilDiv(s.Shape[1], config.FP8BlockSize))
			return "F8_E4M3", n, 4 * blocks, nil
		case cfg.TorchDtype == "float32":
			return "F32", 4 * n, 0, nil
		}
		return "BF16", 2 * n, 0, nil
	}
	if len(s.Shape) == 2 {
		m, err := l.matrix(s.Name)
		if err != nil {
			return "", 0, 0, err
		}
		switch {
		case m.FP8 != nil:
			return "F8_E4M3", int64(len(m.FP8)), 4 * int64(len(m.Scales.S)), nil
		case m.BF16 != nil:
			return "BF16", 2 * n, 0, nil
		}
		t, _ := l.src.Tensor(s.Name)
		return t.DType.String(), int64(len(t.Data)), 0, nil
	}
	t, _, err := l.tensor(s.Name)
	if err != nil {
		return "", 0, 0, err
	}
	if _, err := l.vector(s.Name); err != nil {
		return "", 0, 0, err
	}
	return t.DType.String(), int64(len(t.Data)), 0, nil
}
