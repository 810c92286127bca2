package kernels

import "math"

// Softmax replaces x by softmax(x) in place: exp(x − max) / Σ exp(x − max),
// with the exponentials taken and summed in float64 (each output is within
// two float32 roundings of the exact value). Subtracting the max means no
// input magnitude overflows. Special rows:
//   - empty: nothing to do;
//   - every entry −Inf (a fully masked row): every output is 0, never NaN;
//   - some entries +Inf: those share the mass equally, the rest get 0;
//   - any NaN entry: every output is NaN.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	m, hasNaN := maxOf(x)
	switch {
	case hasNaN:
		nan := float32(math.NaN())
		for i := range x {
			x[i] = nan
		}
		return
	case math.IsInf(float64(m), -1):
		clear(x)
		return
	case math.IsInf(float64(m), 1):
		c := 0
		for _, v := range x {
			if v == m {
				c++
			}
		}
		share := float32(1 / float64(c))
		for i, v := range x {
			if v == m {
				x[i] = share
			} else {
				x[i] = 0
			}
		}
		return
	}
	// One exponential per entry: the float64 sum takes the exact values and x
	// keeps them rounded to float32 until the final scaling.
	mf := float64(m)
	var s float64
	for i, v := range x {
		e := math.Exp(float64(v) - mf)
		s += e
		x[i] = float32(e)
	}
	inv := 1 / s
	for i, v := range x {
		x[i] = float32(float64(v) * inv)
	}
}

// LogSumExp returns ln Σ exp(x[i]) (natural log), computed as
// max + ln Σ exp(x − max) in float64 and rounded once. An empty row or a row of
// only −Inf gives −Inf; a +Inf entry gives +Inf; a NaN entry gives NaN.
func LogSumExp(x []float32) float32 {
	if len(x) == 0 {
		return float32(math.Inf(-1))
	}
	m, hasNaN := maxOf(x)
	if hasNaN {
		return float32(math.NaN())
	}
	if math.IsInf(float64(m), 0) {
		return m
	}
	mf := float64(m)
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mf)
	}
	return float32(mf + math.Log(s))
}

// maxOf returns the largest non-NaN entry of a non-empty x (−Inf if there is
// none) and whether x holds a NaN.
func maxOf(x []float32) (float32, bool) {
	m := float32(math.Inf(-1))
	hasNaN := false
	for _, v := range x {
		if v > m {
			m = v
		} else if v != v {
			hasNaN = true
		}
	}
	return m, hasNaN
}
