package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
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

// RandomTensors returns deterministic random weights for cfg under HF names.
// Each tensor draws from its own PCG stream keyed by (seed, name), so the
// values do not depend on the order or the set of other tensors. Tensors are
// stored as bf16 when cfg.TorchDtype is "bfloat16", else as f32.
func RandomTensors(cfg *config.Model, seed uint64) TensorMap {
	out := make(TensorMap)
	bf16 := cfg.TorchDtype == "bfloat16"
	for _, s := range TensorSpecs(cfg) {
		vals := randomValues(s, seed)
		if bf16 {
			h := make([]uint16, len(vals))
			numfmt.F32sToBF16(h, vals)
			out[s.Name] = safetensors.FromBF16(s.Name, s.Shape, h)
		} else {
			out[s.Name] = safetensors.FromF32(s.Name, s.Shape, vals)
		}
	}
	return out
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
// (sharded at maxShardBytes, with model.safetensors.index.json) into dir.
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
	}
	meta := map[string]string{"format": "pt"}
	if err := safetensors.WriteSharded(dir, list, maxShardBytes, meta); err != nil {
		return fmt.Errorf("write checkpoint tensors: %w", err)
	}
	return nil
}

// checkTensor verifies a tensor's shape against its spec.
func checkTensor(src TensorSource, s TensorSpec) (safetensors.Tensor, error) {
	t, err := src.Tensor(s.Name)
	if err != nil {
		return t, err
	}
	if len(t.Shape) != len(s.Shape) {
		return t, fmt.Errorf("tensor %s: shape %v, want %v", s.Name, t.Shape, s.Shape)
	}
	for i := range s.Shape {
		if t.Shape[i] != s.Shape[i] {
			return t, fmt.Errorf("tensor %s: shape %v, want %v", s.Name, t.Shape, s.Shape)
		}
	}
	return t, nil
}

// matrixOf views a 2-D tensor as a kernels.Matrix without copying when its
// dtype is F32 or BF16 and the data is aligned; anything else is widened to
// f32 (an unaligned BF16 view is widened too rather than copied twice).
func matrixOf(t safetensors.Tensor) (*kernels.Matrix, error) {
	m := &kernels.Matrix{Rows: t.Shape[0], Cols: t.Shape[1]}
	if v, err := t.BF16(); err == nil {
		m.BF16 = v
		return m, nil
	}
	if v, err := t.F32(); err == nil {
		m.F32 = v
		return m, nil
	}
	v, err := t.ToF32(nil)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	m.F32 = v
	return m, nil
}

// vectorOf copies a 1-D tensor to float32.
func vectorOf(t safetensors.Tensor) ([]float32, error) {
	v, err := t.ToF32(nil)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return v, nil
}

// OracleWeights adapts a TensorSource to the float32 view the oracle reads.
type OracleWeights struct{ Src TensorSource }

// Tensor returns the named tensor widened to float32 with its shape.
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
