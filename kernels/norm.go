package kernels

import (
	"fmt"
	"math"
)

// RMSNorm normalizes one row: dst = w ⊙ x / sqrt(mean(x²) + eps), all in
// float32 (mean(x²) is Dot(x, x)/len(x); the reciprocal square root is taken
// in float64 and rounded once). Each output is w[i]·(x[i]·r), the order of the
// DeepSeek reference. dst may alias x. It panics unless len(dst) = len(x) =
// len(w); an empty row is left empty.
func RMSNorm(dst, x, w []float32, eps float32) {
	if len(dst) != len(x) || len(w) != len(x) {
		panic(fmt.Sprintf("kernels: RMSNorm: lengths differ: len(dst)=%d, len(x)=%d, len(w)=%d", len(dst), len(x), len(w)))
	}
	if len(x) == 0 {
		return
	}
	mean := Dot(x, x) / float32(len(x))
	r := float32(1 / math.Sqrt(float64(mean+eps)))
	dst = dst[:len(x)]
	w = w[:len(x)]
	for i, v := range x {
		dst[i] = w[i] * float32(v*r)
	}
}

// LayerNorm normalizes one row with weight and bias:
// dst = (x − mean)/sqrt(var + eps) ⊙ w + b, with mean and the (biased)
// variance computed in two float32 passes, the reciprocal square root taken in
// float64 and rounded once. dst may alias x. It panics unless all four slices
// have the same length; an empty row is left empty.
func LayerNorm(dst, x, w, b []float32, eps float32) {
	if len(dst) != len(x) || len(w) != len(x) || len(b) != len(x) {
		panic(fmt.Sprintf("kernels: LayerNorm: lengths differ: len(dst)=%d, len(x)=%d, len(w)=%d, len(b)=%d", len(dst), len(x), len(w), len(b)))
	}
	if len(x) == 0 {
		return
	}
	n := float32(len(x))
	mean := sum(x) / n
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(x); k += 4 {
		x4 := x[k : k+4 : k+4]
		d0, d1, d2, d3 := x4[0]-mean, x4[1]-mean, x4[2]-mean, x4[3]-mean
		s0 += float32(d0 * d0)
		s1 += float32(d1 * d1)
		s2 += float32(d2 * d2)
		s3 += float32(d3 * d3)
	}
	for ; k < len(x); k++ {
		d := x[k] - mean
		s0 += float32(d * d)
	}
	variance := ((s0 + s1) + (s2 + s3)) / n
	r := float32(1 / math.Sqrt(float64(variance+eps)))
	dst = dst[:len(x)]
	w = w[:len(x)]
	b = b[:len(x)]
	for i, v := range x {
		dst[i] = float32(float32((v-mean)*r)*w[i]) + b[i]
	}
}

// sum returns Σ x[k] in Dot's four-lane order.
func sum(x []float32) float32 {
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(x); k += 4 {
		x4 := x[k : k+4 : k+4]
		s0 += x4[0]
		s1 += x4[1]
		s2 += x4[2]
		s3 += x4[3]
	}
	for ; k < len(x); k++ {
		s0 += x[k]
	}
	return (s0 + s1) + (s2 + s3)
}
