package kernels

import "math"

// ExpShifted sets dst[i] = math.Exp((float64(x[i]) − shift)·scale) for every
// i < len(x) (dst at least as long), with exactly the bits of that Go
// expression: a sampler's unnormalised probabilities (shift the largest
// logit, scale the inverse temperature) and the terms of a log-sum-exp. Under
// AVX-512 the groups of eight whose arguments lie within ±708 or below −746
// go eight lanes at a time through math.Exp's own operations on a CPU with
// FMA (which every AVX-512 CPU has); a group holding any other argument (a
// NaN, +Inf, the edges of the range, where math.Exp's other branches apply)
// is computed here by math.Exp.
func ExpShifted(dst []float64, x []float32, shift, scale float64) {
	dst = dst[:len(x)]
	i := 0
	if activeLevel() == levelAVX512 {
		nv := len(x) &^ 7
		for i < nv {
			i += expShifted(dst[i:nv], x[i:nv], shift, scale)
			for e := min(i+8, nv); i < e; i++ {
				dst[i] = math.Exp((float64(x[i]) - shift) * scale)
			}
		}
	}
	for ; i < len(x); i++ {
		dst[i] = math.Exp((float64(x[i]) - shift) * scale)
	}
}
