package kernels

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestMatrixValidate(t *testing.T) {
	okScales := func(n, stride int) *BlockScales { return &BlockScales{S: make([]float32, n), Stride: stride} }
	tests := []struct {
		name    string
		m       *Matrix
		wantErr string // substring; "" means valid
	}{
		{"f32", &Matrix{Rows: 2, Cols: 3, F32: make([]float32, 6)}, ""},
		{"bf16", &Matrix{Rows: 3, Cols: 2, BF16: make([]uint16, 6)}, ""},
		{"empty f32", &Matrix{Rows: 0, Cols: 4, F32: []float32{}}, ""},
		{"nil", nil, "nil matrix"},
		{"both", &Matrix{Rows: 1, Cols: 1, F32: []float32{1}, BF16: []uint16{1}}, "F32 (1) and BF16 (1) storage set; set exactly one"},
		{"none", &Matrix{Rows: 1, Cols: 1}, "no storage"},
		{"short f32", &Matrix{Rows: 2, Cols: 3, F32: make([]float32, 5)}, "needs 6 f32 elements, has 5"},
		{"long bf16", &Matrix{Rows: 2, Cols: 3, BF16: make([]uint16, 7)}, "needs 6 bf16 elements, has 7"},
		{"negative", &Matrix{Rows: -1, Cols: 3, F32: []float32{}}, "negative dimension"},
		{"overflow", &Matrix{Rows: math.MaxInt / 2, Cols: 3, F32: []float32{}}, "overflows"},
		{"fp8 one block", &Matrix{Rows: 3, Cols: 5, FP8: make([]uint8, 15), Scales: okScales(1, 1)}, ""},
		{"fp8 edge blocks", &Matrix{Rows: 129, Cols: 257, FP8: make([]uint8, 129*257), Scales: okScales(6, 3)}, ""},
		{"fp8 empty", &Matrix{Rows: 0, Cols: 7, FP8: []uint8{}, Scales: okScales(0, 0)}, ""},
		{"fp8 offsets inside the grid", &Matrix{Rows: 64, Cols: 64, FP8: make([]uint8, 64*64),
			Scales: &BlockScales{S: make([]float32, 4), Stride: 2, RowOff: 192, ColOff: 64}}, ""},
		{"fp8 without scales", &Matrix{Rows: 2, Cols: 2, FP8: make([]uint8, 4)}, "has no block scales; set Scales"},
		{"scales on f32", &Matrix{Rows: 1, Cols: 1, F32: []float32{1}, Scales: okScales(1, 1)}, "f32 matrix [1, 1] has block scales"},
		{"fp8 and bf16", &Matrix{Rows: 1, Cols: 1, BF16: []uint16{1}, FP8: []uint8{1}, Scales: okScales(1, 1)}, "BF16 (1) and FP8 (1) storage set; set exactly one"},
		{"short fp8", &Matrix{Rows: 2, Cols: 3, FP8: make([]uint8, 5), Scales: okScales(1, 1)}, "needs 6 fp8 elements, has 5"},
		{"negative row offset", &Matrix{Rows: 1, Cols: 1, FP8: []uint8{0}, Scales: &BlockScales{S: []float32{1}, Stride: 1, RowOff: -1}}, "offsets (-1, 0): need them all ≥ 0"},
		{"negative column offset", &Matrix{Rows: 1, Cols: 1, FP8: []uint8{0}, Scales: &BlockScales{S: []float32{1}, Stride: 1, ColOff: -3}}, "offsets (0, -3)"},
		{"stride too small", &Matrix{Rows: 1, Cols: 129, FP8: make([]uint8, 129), Scales: okScales(4, 1)}, "reaches block column 1, beyond a stride of 1 blocks"},
		{"offset past the stride", &Matrix{Rows: 1, Cols: 1, FP8: []uint8{0}, Scales: &BlockScales{S: make([]float32, 4), Stride: 2, ColOff: 256}}, "at column offset 256 reaches block column 2"},
		{"scales short of the last row block", &Matrix{Rows: 129, Cols: 1, FP8: make([]uint8, 129), Scales: okScales(1, 1)}, "reaches block (1, 0) of stride 1, needs more than the 1 block scales given"},
		{"row offset past the scales", &Matrix{Rows: 1, Cols: 1, FP8: []uint8{0}, Scales: &BlockScales{S: make([]float32, 2), Stride: 1, RowOff: 256}}, "reaches block (2, 0)"},
		{"zero stride", &Matrix{Rows: 1, Cols: 1, FP8: []uint8{0}, Scales: okScales(1, 0)}, "beyond a stride of 0 blocks"},
		{"offset overflow", &Matrix{Rows: 1, Cols: 1, FP8: []uint8{0}, Scales: &BlockScales{S: []float32{1}, Stride: 1, RowOff: math.MaxInt}}, "overflow int"},
		{"none", &Matrix{Rows: 1, Cols: 1}, "set F32, BF16 or FP8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestMatrixRow(t *testing.T) {
	r := newRand(1)
	f := randSlice(r, 3*5, 2)
	b := make([]uint16, len(f))
	wide := make([]float32, len(f))
	for i, v := range f {
		b[i] = toBF16(v)
		wide[i] = math.Float32frombits(uint32(b[i]) << 16)
	}
	mf := &Matrix{Rows: 3, Cols: 5, F32: f}
	mb := &Matrix{Rows: 3, Cols: 5, BF16: b}
	for i := range 3 {
		if diff := cmp.Diff(f[i*5:(i+1)*5], mf.Row(i, nil)); diff != "" {
			t.Errorf("f32 Row(%d) (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(wide[i*5:(i+1)*5], mb.Row(i, nil)); diff != "" {
			t.Errorf("bf16 Row(%d) (-want +got):\n%s", i, diff)
		}
	}
	buf := make([]float32, 0, 8)
	got := mb.Row(2, buf)
	if &got[0] != &buf[:1][0] {
		t.Errorf("Row did not reuse a dst with enough capacity")
	}
	expectPanic(t, "Row(3)", func() { mf.Row(3, nil) })
	expectPanic(t, "Row(-1)", func() { mf.Row(-1, nil) })
}

// matMulT64 is the float64 oracle: dst[i, j] = Σ_k x[i, k]·w[j, k].
func matMulT64(x []float32, n int, w []float64, rows, cols int) []float64 {
	dst := make([]float64, n*rows)
	for i := range n {
		for j := range rows {
			var s float64
			for k := range cols {
				s += float64(x[i*cols+k]) * w[j*cols+k]
			}
			dst[i*rows+j] = s
		}
	}
	return dst
}

func TestMatMulT(t *testing.T) {
	shapes := []struct{ n, rows, cols int }{
		{0, 3, 5}, {1, 1, 1}, {1, 7, 13}, {2, 5, 3}, {3, 17, 31}, {4, 9, 4},
		{5, 33, 64}, {7, 9, 257}, {6, 1, 1000}, {16, 64, 576}, {9, 130, 7},
		// Larger than one MatMulT weight block in both dtypes (uneven split).
		{3, 100, 1500},
	}
	r := newRand(2)
	for _, sh := range shapes {
		x := randSlice(r, sh.n*sh.cols, 1)
		wf := randSlice(r, sh.rows*sh.cols, 1)
		wb := make([]uint16, len(wf))
		w64f := to64(wf)
		w64b := make([]float64, len(wf))
		for i, v := range wf {
			wb[i] = toBF16(v)
			w64b[i] = float64(math.Float32frombits(uint32(wb[i]) << 16))
		}
		// float32 accumulation of cols products of magnitude ≤ 1: a generous
		// absolute bound far below any indexing or layout error.
		opt := cmpopts.EquateApprox(1e-5, 2e-7*float64(sh.cols))
		for _, tc := range []struct {
			dtype string
			w     *Matrix
			w64   []float64
		}{
			{"f32", &Matrix{Rows: sh.rows, Cols: sh.cols, F32: wf}, w64f},
			{"bf16", &Matrix{Rows: sh.rows, Cols: sh.cols, BF16: wb}, w64b},
		} {
			dst := make([]float32, sh.n*sh.rows)
			MatMulT(dst, x, sh.n, tc.w)
			want := matMulT64(x, sh.n, tc.w64, sh.rows, sh.cols)
			if diff := cmp.Diff(want, to64(dst), opt); diff != "" {
				t.Errorf("%s n=%d w=[%d,%d]: MatMulT vs float64 (-want +got):\n%s", tc.dtype, sh.n, sh.rows, sh.cols, diff)
			}
			// Batch invariance: every row has exactly the bits of MatVecT on
			// that row alone and, under the reference, of Dot with the
			// widened weight row.
			row := make([]float32, sh.rows)
			var wrow []float32
			for i := range sh.n {
				xi := x[i*sh.cols : (i+1)*sh.cols]
				MatVecT(row, xi, tc.w)
				if diff := cmp.Diff(row, dst[i*sh.rows:(i+1)*sh.rows]); diff != "" {
					t.Errorf("%s n=%d w=[%d,%d] row %d: MatMulT vs MatVecT bits (-vec +mat):\n%s", tc.dtype, sh.n, sh.rows, sh.cols, i, diff)
				}
				if Accelerated() {
					continue // the fused assembly dot product is not Dot's order
				}
				for j := range sh.rows {
					wrow = tc.w.Row(j, wrow)
					if d := Dot(xi, wrow); d != dst[i*sh.rows+j] {
						t.Errorf("%s n=%d w=[%d,%d] (%d,%d): MatMulT=%v, Dot=%v", tc.dtype, sh.n, sh.rows, sh.cols, i, j, dst[i*sh.rows+j], d)
					}
				}
			}
		}
	}
}

func TestMatMulTPanics(t *testing.T) {
	w := &Matrix{Rows: 3, Cols: 4, F32: make([]float32, 12)}
	tests := []struct {
		name string
		f    func()
	}{
		{"short x", func() { MatMulT(make([]float32, 6), make([]float32, 7), 2, w) }},
		{"long dst", func() { MatMulT(make([]float32, 7), make([]float32, 8), 2, w) }},
		{"negative n", func() { MatMulT(nil, nil, -1, w) }},
		{"bad matrix", func() { MatMulT(make([]float32, 3), make([]float32, 4), 1, &Matrix{Rows: 3, Cols: 4}) }},
		{"vec short x", func() { MatVecT(make([]float32, 3), make([]float32, 3), w) }},
		{"vec short dst", func() { MatVecT(make([]float32, 2), make([]float32, 4), w) }},
		{"dot", func() { Dot(make([]float32, 2), make([]float32, 3)) }},
		{"axpy", func() { Axpy(1, make([]float32, 2), make([]float32, 3)) }},
	}
	for _, tc := range tests {
		expectPanic(t, tc.name, tc.f)
	}
}

func TestDotAxpy(t *testing.T) {
	r := newRand(3)
	for _, n := range []int{0, 1, 3, 4, 5, 8, 127, 4096} {
		a := randSlice(r, n, 3)
		b := randSlice(r, n, 3)
		var want float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
		}
		if diff := cmp.Diff(want, float64(Dot(a, b)), cmpopts.EquateApprox(1e-5, 1e-6*float64(n+1))); diff != "" {
			t.Errorf("Dot n=%d (-want +got):\n%s", n, diff)
		}

		y := randSlice(r, n, 3)
		wantY := make([]float64, n)
		for i := range y {
			wantY[i] = float64(y[i]) + 0.75*float64(a[i])
		}
		Axpy(0.75, a, y)
		if diff := cmp.Diff(wantY, to64(y), cmpopts.EquateApprox(1e-6, 1e-6)); diff != "" {
			t.Errorf("Axpy n=%d (-want +got):\n%s", n, diff)
		}
	}
}
