package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/numfmt"
	"github.com/cpmla/cpmla/safetensors"
)

// TensorSource yields checkpoint tensors by HF name.
type TensorSource interface {
	Tensor(name string) (safetensors.Tensor, error)
}

// TensorMap is an in-memory TensorSource.
type TensorMap map[string]safetensors.Tensor

// Tensor returns the named tensor or an error naming it.
func (m TensorMap) Tensor(name string) (safetensors.Tensor, error) {
	t, ok := m[name]
	if !ok {
		return safetensors.Tensor{}, fmt.Errorf("tensor %q not found", name)
	}
	return t, nil
}

// Weight dtypes a checkpoint can be written in (cpmla model init
// --weight-dtype).
const (
	WeightF32  = "f32"
	WeightBF16 = "bf16"
	WeightFP8  = "fp8"
)

// WithWeightDType returns a copy of cfg whose checkpoint stores its weights
// as dtype: f32, bf16, or fp8 — Linear weights as F8_E4M3 with 128×128
// block scales and the quantization_config the family publishes (DeepSeek:
// power-of-two scales, scale_fmt ue8m0; GLM: float32 scales and the modules
// kept in bf16 listed), everything else bf16.
func WithWeightDType(cfg *config.Model, dtype string) (*config.Model, error) {
	c := cfg.Clone()
	c.Quantization = nil
	switch dtype {
	case WeightF32:
		c.TorchDtype = "float32"
	case WeightBF16:
		c.TorchDtype = "bfloat16"
	case WeightFP8:
		c.TorchDtype = "bfloat16"
		c.Quantization = FP8Quantization(c)
	default:
		return nil, fmt.Errorf("weight dtype %q is not one of %s, %s, %s", dtype, WeightF32, WeightBF16, WeightFP8)
	}
	return c, nil
}

// FP8Quantization is the quantization_config an fp8 checkpoint of cfg's
// family publishes: DeepSeek-V3.2's (ue8m0 scales, no exclusion list: its
// bf16 tensors are known by the model code) or GLM-5-FP8's (float32 scales,
// the modules kept in bf16 listed under the names its config uses).
func FP8Quantization(cfg *config.Model) *config.Quantization {
	q := &config.Quantization{QuantMethod: "fp8", Fmt: "e4m3", ActivationScheme: "dynamic",
		WeightBlockSize: []int{config.FP8BlockSize, config.FP8BlockSize}}
	if cfg.Architecture == "glm_moe_dsa" {
		q.ModulesToNotConvert = []string{"lm_head", "model.embed_tokens", "mlp.gate", "self_attn.indexers_proj", "eh_proj", "shared_head.head"}
	} else {
		q.ScaleFmt = "ue8m0"
	}
	return q
}

// embedName is the main embedding's tensor name.
const embedName = "model.embed_tokens.weight"

// RandomTensors returns deterministic random weights for cfg under HF names,
// in the layout real checkpoints use. Each tensor draws from its own PCG
// stream keyed by (seed, name), so the values do not depend on the order or
// the set of other tensors. Tensors are stored as bf16 when cfg.TorchDtype
// is "bfloat16", else as f32; with an fp8 cfg.Quantization the quantizable
// Linear weights are F8_E4M3 with a weight_scale_inv beside them; tensors
// real checkpoints keep in float32 (the router's bias) are F32 in every
// case. An MTP layer's copy of the embedding (DeepSeek-V3.2) holds the main
// embedding's values, as published checkpoints do (the MTP layer shares the
// embedding of the main model).
func RandomTensors(cfg *config.Model, seed uint64) TensorMap {
	out := make(TensorMap)
	bf16 := cfg.TorchDtype == "bfloat16"
	fp8 := cfg.Quantization != nil
	var embed []float32
	for _, s := range TensorSpecs(cfg) {
		vals := embed
		switch {
		case !sharesEmbedding(cfg, s.Name):
			vals = randomValues(s, seed)
		case embed == nil:
			embed = randomValues(TensorSpec{Name: embedName, Shape: s.Shape, Kind: InitEmbedding}, seed)
			vals = embed
		}
		switch {
		case s.F32:
			out[s.Name] = safetensors.FromF32(s.Name, s.Shape, vals)
		case fp8 && s.Quantizable() && !cfg.Quantization.NotConverted(ModuleOf(s.Name)):
			codes, scales, err := quantizeBlocks(vals, s.Shape[0], s.Shape[1], cfg.Quantization.ScaleFmt == "ue8m0")
			if err != nil {
				panic(fmt.Sprintf("model: random weights are finite, yet %s: %v", s.Name, err))
			}
			out[s.Name] = safetensors.FromF8E4M3(s.Name, s.Shape, codes)
			sn := s.Name + ScaleSuffix
			out[sn] = safetensors.FromF32(sn, []int{ceilDiv(s.Shape[0], config.FP8BlockSize), ceilDiv(s.Shape[1], config.FP8BlockSize)}, scales)
		case bf16:
			h := make([]uint16, len(vals))
			numfmt.F32sToBF16(h, vals)
			out[s.Name] = safetensors.FromBF16(s.Name, s.Shape, h)
		default:
			out[s.Name] = safetensors.FromF32(s.Name, s.Shape, vals)
		}
	}
	return out
}

// sharesEmbedding reports whether tensor name holds the main embedding's
// values: the embedding itself or an MTP layer's copy of it.
func sharesEmbedding(cfg *config.Model, name string) bool {
	if name == embedName {
		return true
	}
	for k := 0; k < cfg.NumNextNPredict; k++ {
		if name == LayerPrefix(cfg.NumLayers+k)+"embed_tokens.weight" {
			return true
		}
	}
	return false
}

func randomValues(s TensorSpec, seed uint64) []float32 {
	h := fnv.New64a()
	h.Write([]byte(s.Name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	n := Elems(s.Shape)
	v := make([]float32, n)
	var mean, std float64
	switch s.Kind {
	case InitLinear:
		std = 1 / math.Sqrt(float64(s.Shape[len(s.Shape)-1]))
	case InitEmbedding:
		std = 1
	case InitNormWeight:
		mean, std = 1, 0.1
	case InitBias:
		std = 0.1
	}
	for i := range v {
		v[i] = float32(mean + std*rng.NormFloat64())
	}
	return v
}

// WriteCheckpoint writes cfg as config.json and the tensors as safetensors
// (sharded at maxShardBytes, with model.safetensors.index.json) into dir:
// every tensor of TensorSpecs(cfg) and, after each fp8 weight, its
// weight_scale_inv.
func WriteCheckpoint(dir string, cfg *config.Model, tensors TensorMap, maxShardBytes int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create checkpoint dir: %w", err)
	}
	js, err := cfg.MarshalHF()
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		return fmt.Errorf("write config.json: %w", err)
	}
	list := make([]safetensors.Tensor, 0, len(tensors))
	for _, s := range TensorSpecs(cfg) {
		t, err := tensors.Tensor(s.Name)
		if err != nil {
			return err
		}
		list = append(list, t)
		if sc, ok := tensors[s.Name+ScaleSuffix]; ok {
			list = append(list, sc)
		}
	}
	meta := map[string]string{"format": "pt"}
	if err := safetensors.WriteSharded(dir, list, maxShardBytes, meta); err != nil {
		return fmt.Errorf("write checkpoint tensors: %w", err)
	}
	return nil
}

// OracleWeights adapts a TensorSource to the views the oracle reads: float32
// values of unquantized tensors, and the raw codes and block scales of fp8
// weights (which the oracle dequantizes itself, from the formula).
type OracleWeights struct{ Src TensorSource }

// Tensor returns the named tensor widened to float32 with its shape. It
// refuses an fp8 tensor: its values need its block scales (see FP8).
func (o OracleWeights) Tensor(name string) ([]float32, []int, error) {
	t, err := o.Src.Tensor(name)
	if err != nil {
		return nil, nil, err
	}
	v, err := t.ToF32(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return v, t.Shape, nil
}

// FP8 returns the e4m3 codes of an F8_E4M3 weight and its weight_scale_inv
// ([⌈rows/128⌉, ⌈cols/128⌉] float32), with ok false when the tensor is not
// stored in fp8.
func (o OracleWeights) FP8(name string) (codes []byte, scales []float32, shape []int, ok bool, err error) {
	t, err := o.Src.Tensor(name)
	if err != nil {
		return nil, nil, nil, false, err
	}
	if t.DType != safetensors.F8E4M3 {
		return nil, nil, nil, false, nil
	}
	st, err := o.Src.Tensor(name + ScaleSuffix)
	if err != nil {
		return nil, nil, nil, false, fmt.Errorf("tensor %s is F8_E4M3 without its block scales: %w", name, err)
	}
	s, err := st.ToF32(nil)
	if err != nil {
		return nil, nil, nil, false, fmt.Errorf("tensor %s: %w", st.Name, err)
	}
	return t.U8(), s, t.Shape, true, nil
}
