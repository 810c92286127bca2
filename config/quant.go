package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// FP8BlockSize is the only weight_block_size implemented: one float32 scale
// per 128×128 block of a weight.
const FP8BlockSize = 128

// Quantization is an fp8 quantization_config as DeepSeek-V3.x and GLM-5-FP8
// checkpoints publish it: F8_E4M3 weights with one float32
// weight_scale_inv per weight_block_size block (W = q · scale_inv).
type Quantization struct {
	QuantMethod      string `json:"quant_method"`
	Fmt              string `json:"fmt,omitempty"`
	ActivationScheme string `json:"activation_scheme,omitempty"`
	// ScaleFmt "ue8m0" says every scale is a power of two (DeepSeek-V3.1+);
	// the loader checks it.
	ScaleFmt        string `json:"scale_fmt,omitempty"`
	WeightBlockSize []int  `json:"weight_block_size"`
	// ModulesToNotConvert lists modules kept in their own dtype (vLLM also
	// reads them as ignored_layers). Entries match a module by whole dotted
	// components anywhere in its name: "mlp.gate" matches
	// "model.layers.3.mlp.gate".
	ModulesToNotConvert []string `json:"modules_to_not_convert,omitempty"`
	// IgnoredLayers is vLLM's name for the same list, kept apart so that a
	// config is written back with the key it used.
	IgnoredLayers []string `json:"ignored_layers,omitempty"`
}

// quantKeys are the keys a quantization_config may hold; any other key could
// change the format and is refused.
var quantKeys = []string{"quant_method", "fmt", "activation_scheme", "scale_fmt", "weight_block_size", "modules_to_not_convert", "ignored_layers"}

// parseQuantization reads a quantization_config object, refusing keys the
// engine does not know.
func parseQuantization(raw json.RawMessage) (*Quantization, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("quantization_config: %w", err)
	}
	var unknown []string
	for k := range keys {
		if !slices.Contains(quantKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("quantization_config key %q is not implemented (the fp8 format reads %s)", unknown[0], strings.Join(quantKeys, ", "))
	}
	q := &Quantization{}
	if err := json.Unmarshal(raw, q); err != nil {
		return nil, fmt.Errorf("quantization_config: %w", err)
	}
	return q, nil
}

// Validate refuses every format the engine does not implement, by name.
func (q *Quantization) Validate() error {
	var errs []error
	if q.QuantMethod != "fp8" {
		errs = append(errs, fmt.Errorf("quantization_config.quant_method %q is not implemented; the engine reads fp8 block-scaled checkpoints (quant_method \"fp8\") or unquantized bf16/f32 ones", q.QuantMethod))
	}
	if q.Fmt != "" && q.Fmt != "e4m3" {
		errs = append(errs, fmt.Errorf("quantization_config.fmt %q is not implemented; want \"e4m3\"", q.Fmt))
	}
	if q.ActivationScheme != "" && q.ActivationScheme != "dynamic" {
		errs = append(errs, fmt.Errorf("quantization_config.activation_scheme %q is not implemented; want \"dynamic\" (activations stay float32; weights are dequantized inside the matrix kernels)", q.ActivationScheme))
	}
	if q.ScaleFmt != "" && q.ScaleFmt != "ue8m0" {
		errs = append(errs, fmt.Errorf("quantization_config.scale_fmt %q is not implemented; want \"ue8m0\" or no scale_fmt (float32 scales)", q.ScaleFmt))
	}
	if len(q.WeightBlockSize) != 2 || q.WeightBlockSize[0] != FP8BlockSize || q.WeightBlockSize[1] != FP8BlockSize {
		errs = append(errs, fmt.Errorf("quantization_config.weight_block_size %v is not implemented; want [%d, %d]", q.WeightBlockSize, FP8BlockSize, FP8BlockSize))
	}
	return errors.Join(errs...)
}

// moduleAliases maps a name some published exclusion lists use to the module
// path checkpoints store: GLM-5-FP8 lists "indexers_proj" for the indexer's
// head-weight projection, which its checkpoints name indexer.weights_proj.
var moduleAliases = map[string]string{"indexers_proj": "indexer.weights_proj"}

// NotConverted reports whether module (a tensor name without its ".weight"
// suffix, e.g. "model.layers.3.mlp.gate") is listed as kept in its own dtype.
func (q *Quantization) NotConverted(module string) bool {
	if q == nil {
		return false
	}
	for _, list := range [][]string{q.ModulesToNotConvert, q.IgnoredLayers} {
		for _, e := range list {
			if componentsMatch(module, e) {
				return true
			}
			if a, ok := moduleAliases[lastComponent(e)]; ok && componentsMatch(module, a) {
				return true
			}
		}
	}
	return false
}

// componentsMatch reports whether entry is a run of whole dotted components
// of module.
func componentsMatch(module, entry string) bool {
	entry = strings.Trim(entry, ".")
	if entry == "" {
		return false
	}
	return module == entry || strings.HasPrefix(module, entry+".") || strings.HasSuffix(module, "."+entry) || strings.Contains(module, "."+entry+".")
}

func lastComponent(s string) string {
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		return s[i+1:]
	}
	return s
}
