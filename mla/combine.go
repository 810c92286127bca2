package mla

import (
	"math"

	"github.com/cpmla/cpmla/kernels"
)

// CombineLSE merges n partial attention results, each normalized over its own
// keys (one per DCP rank, or per key chunk), into the result over all keys:
//
//	out [n, t, h, d], lse [n, t, h]  →  dst [t, h, d], dstLSE [t, h]
//	LSE = ln Σ_r exp(lse_r),   dst = Σ_r exp(lse_r − LSE) · out_r
//
// NaN and +Inf partial LSEs mean "empty" and count as −Inf. Partials whose
// weight is 0 are skipped, so garbage (even NaN) in an empty partial's output
// never reaches dst. A row where every partial is empty gets 0 and −Inf,
// never NaN. The combine is linear in the outputs: it may run before or after
// a per-head linear map such as W_UV. It does not allocate.
func CombineLSE(dst, dstLSE, out, lse []float32, n, t, h, d int) {
	rowsN := t * h
	checkLen("CombineLSE", "dst", len(dst), rowsN*d)
	checkLen("CombineLSE", "dstLSE", len(dstLSE), rowsN)
	checkLen("CombineLSE", "out", len(out), n*rowsN*d)
	checkLen("CombineLSE", "lse", len(lse), n*rowsN)
	for k := range rowsN {
		m := math.Inf(-1)
		for r := range n {
			m = max(m, emptyAsNegInf(lse[r*rowsN+k]))
		}
		o := dst[k*d : (k+1)*d]
		clear(o)
		if math.IsInf(m, -1) {
			dstLSE[k] = float32(m)
			continue
		}
		var sum float64
		for r := range n {
			sum += math.Exp(emptyAsNegInf(lse[r*rowsN+k]) - m)
		}
		total := m + math.Log(sum)
		dstLSE[k] = float32(total)
		for r := range n {
			w := float32(math.Exp(emptyAsNegInf(lse[r*rowsN+k]) - total))
			if w == 0 {
				continue
			}
			kernels.Axpy(w, out[(r*rowsN+k)*d:(r*rowsN+k+1)*d], o)
		}
	}
}

// emptyAsNegInf widens a partial LSE, mapping the empty markers NaN and +Inf
// to −Inf.
func emptyAsNegInf(l float32) float64 {
	v := float64(l)
	if v != v || math.IsInf(v, 1) {
		return math.Inf(-1)
	}
	return v
}
