package mla

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// randVec fills n values with FlashMLA's test distribution: randn/10 + U(−0.05, 0.05).
func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64()/10 + (rng.Float64()-0.5)/10)
	}
	return v
}

// refSparseRow is the float64 definition of one query row of SparseAttention
// over the rows at the given valid slots: logits = scale·q·row, softmax,
// out = Σ p·row[0:512]. No valid slot gives out 0, lse and max −Inf.
func refSparseRow(q []float32, heads int, kv DenseKV, valid []int32, scale float32) (out, lse, maxLogit []float64) {
	out = make([]float64, heads*LatentDim)
	lse = make([]float64, heads)
	maxLogit = make([]float64, heads)
	for h := range heads {
		qh := q[h*RowDim : (h+1)*RowDim]
		logits := make([]float64, len(valid))
		m := math.Inf(-1)
		for j, s := range valid {
			row := kv[int(s)*RowDim : (int(s)+1)*RowDim]
			var d float64
			for k := range RowDim {
				d += float64(qh[k]) * float64(row[k])
			}
			logits[j] = float64(scale) * d
			m = max(m, logits[j])
		}
		maxLogit[h] = m
		if len(valid) == 0 {
			lse[h] = m
			continue
		}
		var sum float64
		for _, l := range logits {
			sum += math.Exp(l - m)
		}
		lse[h] = m + math.Log(sum)
		for j, s := range valid {
			p := math.Exp(logits[j] - lse[h])
			row := kv[int(s)*RowDim : (int(s)+1)*RowDim]
			for k := range LatentDim {
				out[h*LatentDim+k] += p * float64(row[k])
			}
		}
	}
	return out, lse, maxLogit
}

func toF32(v []float64) []float32 {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return f
}

func filled(n int, v float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// approx compares float32 results to a float64 reference: within rel
// relative or abs absolute error, with ±Inf and NaN matching exactly.
func approx(rel, abs float64) cmp.Option {
	return cmp.Options{cmpopts.EquateApprox(rel, abs), cmpopts.EquateNaNs()}
}

func diffF32(t *testing.T, what string, want, got []float32, opt cmp.Option) {
	t.Helper()
	if d := cmp.Diff(want, got, opt); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

// countingKV records how often each slot is read, to prove invalid entries
// are never touched and rows are gathered once per query row.
type countingKV struct {
	kv    DenseKV
	reads map[int32]int
}

func (c *countingKV) Row(slot int32, scratch []float32) []float32 {
	c.reads[slot]++
	return c.kv.Row(slot, scratch)
}
