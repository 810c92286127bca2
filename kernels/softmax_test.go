package kernels

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// logAddExp64 folds ln(e^a + e^b) pairwise without ever forming e^x of a
// large x: an oracle independent of the max-subtraction used by the kernels.
func logAddExp64(x []float32) float64 {
	acc := math.Inf(-1)
	for _, v := range x {
		b := float64(v)
		hi, lo := max(acc, b), min(acc, b)
		if math.IsInf(hi, -1) {
			continue
		}
		acc = hi + math.Log1p(math.Exp(lo-hi))
	}
	return acc
}

// softmaxPairwise64 is p_i = 1 / Σ_j exp(x_j − x_i) in float64: exact in
// the ratios, no max or LSE involved, O(n²).
func softmaxPairwise64(x []float32) []float64 {
	p := make([]float64, len(x))
	for i, xi := range x {
		if math.IsInf(float64(xi), -1) {
			continue // a masked entry gets 0 whenever another entry is finite
		}
		var s float64
		for _, xj := range x {
			if math.IsInf(float64(xj), -1) {
				continue
			}
			s += math.Exp(float64(xj) - float64(xi))
		}
		p[i] = 1 / s
	}
	return p
}

func TestSoftmaxLogSumExp(t *testing.T) {
	inf := float32(math.Inf(1))
	r := newRand(6)
	tests := []struct {
		name string
		x    []float32
	}{
		{"single", []float32{3}},
		{"pair", []float32{0, 0}},
		{"random", randSlice(r, 1000, 5)},
		{"large positive", []float32{1000, 999, 998.5, 1001}},
		{"large negative", []float32{-1000, -999, -998.5, -1001}},
		{"near float32 max", []float32{3e38, 3e38, -3e38, 1e38}},
		{"wide spread", []float32{-80, 0, 80, 88, 89}},
		{"masked entries", []float32{-inf, 1, -inf, 2, -inf}},
		{"one unmasked", []float32{-inf, -inf, 7, -inf}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lse := logAddExp64(tc.x)
			want := softmaxPairwise64(tc.x)
			if diff := cmp.Diff(lse, float64(LogSumExp(tc.x)), cmpopts.EquateApprox(1e-7, 1e-6)); diff != "" {
				t.Errorf("LogSumExp (-want +got):\n%s", diff)
			}
			got := append([]float32(nil), tc.x...)
			Softmax(got)
			if diff := cmp.Diff(want, to64(got), cmpopts.EquateApprox(3e-7, 1e-30)); diff != "" {
				t.Errorf("Softmax (-want +got):\n%s", diff)
			}
			var s float64
			for _, p := range got {
				s += float64(p)
			}
			if math.Abs(s-1) > 1e-6 {
				t.Errorf("Softmax sums to %v, want 1", s)
			}
		})
	}
}

func TestSoftmaxSpecialRows(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	tests := []struct {
		name     string
		x        []float32
		want     []float32
		wantLSE  float32
		nanCheck bool // compare NaN as equal
	}{
		{"empty", []float32{}, []float32{}, -inf, false},
		{"all masked", []float32{-inf, -inf, -inf}, []float32{0, 0, 0}, -inf, false},
		{"plus inf", []float32{1, inf, -inf, inf}, []float32{0, 0.5, 0, 0.5}, inf, false},
		{"nan", []float32{1, nan, 2}, []float32{nan, nan, nan}, nan, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := cmp.Options{}
			if tc.nanCheck {
				opts = append(opts, cmpopts.EquateNaNs())
			}
			if diff := cmp.Diff(tc.wantLSE, LogSumExp(tc.x), opts); diff != "" {
				t.Errorf("LogSumExp (-want +got):\n%s", diff)
			}
			got := append([]float32{}, tc.x...)
			Softmax(got)
			if diff := cmp.Diff(tc.want, got, opts); diff != "" {
				t.Errorf("Softmax (-want +got):\n%s", diff)
			}
		})
	}
}
