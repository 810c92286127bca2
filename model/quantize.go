package model

import (
	"fmt"
	"slices"
	"sync"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/numfmt"
	"github.com/cpmla/cpmla/safetensors"
)

// Quantize applies a load-time quantization method (vLLM's --quantization)
// to a model's config and tensors: "" changes nothing; "fp8" block-quantizes
// the Linear weights of an unquantized checkpoint to e4m3 with 128×128 block
// scales as they are read, so the engine runs them exactly as it runs a
// published fp8 checkpoint (an fp8 checkpoint is left as it is). Any other
// method is refused by name.
func Quantize(cfg *config.Model, src TensorSource, method string) (*config.Model, TensorSource, error) {
	switch method {
	case "":
		return cfg, src, nil
	case WeightFP8:
	default:
		return nil, nil, fmt.Errorf("--quantization %q is not implemented; use fp8 (128×128 block-scaled e4m3 weights) or leave it unset", method)
	}
	if cfg.Quantization != nil {
		if cfg.Quantization.QuantMethod == "fp8" {
			return cfg, src, nil
		}
		return nil, nil, fmt.Errorf("--quantization fp8: the checkpoint is already quantized with %q", cfg.Quantization.QuantMethod)
	}
	q := cfg.Clone()
	q.Quantization = FP8Quantization(q)
	return q, &quantizingSource{cfg: q, src: src, specs: specMap(q), done: map[string]safetensors.Tensor{}}, nil
}

func specMap(cfg *config.Model) map[string]TensorSpec {
	m := map[string]TensorSpec{}
	for _, s := range TensorSpecs(cfg) {
		m[s.Name] = s
	}
	return m
}

// quantizingSource serves an unquantized checkpoint as an fp8 one: each
// quantizable weight is quantized once, on first read, and its scales are
// served under its weight_scale_inv name; every other tensor passes through.
// It is safe for concurrent use (in-process ranks read it at once).
type quantizingSource struct {
	cfg   *config.Model
	src   TensorSource
	specs map[string]TensorSpec
	mu    sync.Mutex
	done  map[string]safetensors.Tensor
}

// quantized reports whether name is a weight the source quantizes.
func (q *quantizingSource) quantized(name string) bool {
	s, ok := q.specs[name]
	return ok && s.Quantizable() && !q.cfg.Quantization.NotConverted(ModuleOf(name))
}

func (q *quantizingSource) Tensor(name string) (safetensors.Tensor, error) {
	weight, isScale := name, false
	if base, ok := trimSuffix(name, ScaleSuffix); ok {
		weight, isScale = base, true
	}
	if !q.quantized(weight) {
		return q.src.Tensor(name)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if t, ok := q.done[name]; ok {
		return t, nil
	}
	t, err := q.src.Tensor(weight)
	if err != nil {
		return t, err
	}
	if t.DType == safetensors.F8E4M3 {
		return safetensors.Tensor{}, fmt.Errorf("tensor %s is already F8_E4M3 but config.json has no quantization_config", weight)
	}
	if len(t.Shape) != 2 {
		return safetensors.Tensor{}, fmt.Errorf("tensor %s: shape %v, want [out, in]", weight, t.Shape)
	}
	v, err := t.ToF32(nil)
	if err != nil {
		return safetensors.Tensor{}, fmt.Errorf("tensor %s: %w", weight, err)
	}
	rows, cols := t.Shape[0], t.Shape[1]
	codes, scales, err := quantizeBlocks(v, rows, cols, q.cfg.Quantization.ScaleFmt == "ue8m0")
	if err != nil {
		return safetensors.Tensor{}, fmt.Errorf("--quantization fp8: tensor %s: %w", weight, err)
	}
	q.done[weight] = safetensors.FromF8E4M3(weight, t.Shape, codes)
	sn := weight + ScaleSuffix
	q.done[sn] = safetensors.FromF32(sn, []int{ceilDiv(rows, config.FP8BlockSize), ceilDiv(cols, config.FP8BlockSize)}, scales)
	if isScale {
		return q.done[sn], nil
	}
	return q.done[weight], nil
}

// Names lists the source's tensors and the scales of the quantized weights.
func (q *quantizingSource) Names() []string {
	n, ok := q.src.(TensorNamer)
	if !ok {
		return nil
	}
	names := n.Names()
	for _, name := range n.Names() {
		if q.quantized(name) {
			names = append(names, name+ScaleSuffix)
		}
	}
	slices.Sort(names)
	return names
}

// Close closes the underlying source.
func (q *quantizingSource) Close() error {
	if c, ok := q.src.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

func trimSuffix(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

// quantizeBlocks block-quantizes a [rows, cols] weight to e4m3 codes and one
// float32 scale per 128×128 block as fp8 checkpoints are made
// (numfmt.QuantizeE4M3Blocks; with ue8m0, power-of-two scales).
func quantizeBlocks(w []float32, rows, cols int, ue8m0 bool) ([]byte, []float32, error) {
	br, bc := numfmt.WeightScaleBlocks(rows, cols)
	codes, scales := make([]byte, rows*cols), make([]float32, br*bc)
	quantize := numfmt.QuantizeE4M3Blocks
	if ue8m0 {
		quantize = numfmt.QuantizeE4M3BlocksUE8M0
	}
	if err := quantize(codes, scales, w, rows, cols); err != nil {
		return nil, nil, err
	}
	return codes, scales, nil
}
