package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// newRand returns a deterministic generator for one test.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6b65726e656c73)) }

// randSlice returns n values uniform in [-scale, scale).
func randSlice(r *rand.Rand, n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = (2*r.Float32() - 1) * scale
	}
	return s
}

// toBF16 rounds f to bfloat16 bits, round-to-nearest-even, from the format's
// definition (bf16 is the upper half of an f32; NaN stays a quiet NaN).
func toBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x0040
	}
	return uint16((b + 0x7FFF + ((b >> 16) & 1)) >> 16)
}

// expectPanic runs f and fails the test unless it panics.
func expectPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: expected a panic, got none", name)
		}
	}()
	f()
}

// to64 widens a float32 slice.
func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// reluScores64 is WeightedReLUScores's formula in float64: for each key,
// Σ_h w[h]·max(0, q_h·k) with q [heads, dim]; a head whose dot product is
// NaN adds nothing, as the kernels' ReLU drops it.
func reluScores64(q, w []float32, heads int, keys [][]float32) []float64 {
	dim := len(q) / heads
	out := make([]float64, len(keys))
	for j, k := range keys {
		for h := range heads {
			var d float64
			for c := range dim {
				d += float64(q[h*dim+c]) * float64(k[c])
			}
			if d > 0 {
				out[j] += float64(w[h]) * d
			}
		}
	}
	return out
}
