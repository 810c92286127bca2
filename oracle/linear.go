package oracle

import "math"

// matVec sets dst[r] = Σ_c w[r·cols + c]·x[c] for r < len(dst), where w is a
// row-major float32 matrix with cols = len(x). Products and sums are float64.
func matVec(dst []float64, w []float32, x []float64) {
	cols := len(x)
	for r := range dst {
		dst[r] = dot(w[r*cols:(r+1)*cols], x)
	}
}

// dot is Σ_i float64(w[i])·x[i], summed in four interleaved partial sums
// (i mod 4) so that the additions do not wait on each other.
func dot(w []float32, x []float64) float64 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(w); i += 4 {
		s0 += float64(w[i]) * x[i]
		s1 += float64(w[i+1]) * x[i+1]
		s2 += float64(w[i+2]) * x[i+2]
		s3 += float64(w[i+3]) * x[i+3]
	}
	for ; i < len(w); i++ {
		s0 += float64(w[i]) * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot64 is Σ_i a[i]·b[i].
func dot64(a, b []float64) float64 {
	b = b[:len(a)]
	var s float64
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

// rmsNorm sets dst = w ⊙ x / sqrt(mean(x²) + eps).
func rmsNorm(dst, x []float64, w []float32, eps float64) {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	for i, v := range x {
		dst[i] = float64(w[i]) * (v * inv)
	}
}

// layerNorm sets dst = w ⊙ (x − mean)/sqrt(var + eps) + b with the
// population variance.
func layerNorm(dst, x []float64, w, b []float32, eps float64) {
	n := float64(len(x))
	var mean float64
	for _, v := range x {
		mean += v
	}
	mean /= n
	var vr float64
	for _, v := range x {
		vr += (v - mean) * (v - mean)
	}
	inv := 1 / math.Sqrt(vr/n+eps)
	for i, v := range x {
		dst[i] = float64(w[i])*((v-mean)*inv) + float64(b[i])
	}
}

// silu is x·σ(x).
func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// logSoftmax replaces x by x − logsumexp(x).
func logSoftmax(x []float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - mx)
	}
	lse := mx + math.Log(s)
	for i := range x {
		x[i] -= lse
	}
}

// softmax replaces x by exp(x − max)/Σ exp(x − max).
func softmax(x []float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	var s float64
	for i, v := range x {
		x[i] = math.Exp(v - mx)
		s += x[i]
	}
	for i := range x {
		x[i] /= s
	}
}
