package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/numfmt"
)

// randCodes returns n e4m3 codes drawn from every finite code (no NaN).
func randCodes(r *rand.Rand, n int) []uint8 {
	q := make([]uint8, n)
	for i := range q {
		for {
			q[i] = uint8(r.UintN(256))
			if q[i]&0x7F != 0x7F {
				break
			}
		}
	}
	return q
}

// randScales returns n block scales of assorted magnitudes, as
// amax/448 gives them for weights of magnitude 2^-8…2^4.
func randScales(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(math.Ldexp(1+r.Float64(), -17+r.IntN(12)))
	}
	return s
}

// randFP8 returns an fp8 matrix [rows, cols] cut at (rowOff, colOff) out of
// a random tensor [rowOff+rows+extraRows, colOff+cols+extraCols] with its
// own scale grid: the offsets stay as given (not normalised), so the
// general indexing is exercised.
func randFP8(r *rand.Rand, rows, cols, rowOff, colOff int) *Matrix {
	tr, tc := rowOff+rows+r.IntN(3), colOff+cols+r.IntN(3)
	stride := ceilDiv(tc, FP8Block)
	return &Matrix{Rows: rows, Cols: cols, FP8: randCodes(r, rows*cols),
		Scales: &BlockScales{S: randScales(r, ceilDiv(tr, FP8Block)*stride), Stride: stride, RowOff: rowOff, ColOff: colOff}}
}

// fp8Value is the definition of element (i, j) of an fp8 matrix, written
// out from the BlockScales documentation.
func fp8Value(m *Matrix, i, j int) float32 {
	s := m.Scales
	scale := s.S[((i+s.RowOff)/FP8Block)*s.Stride+(j+s.ColOff)/FP8Block]
	return numfmt.F32FromE4M3(m.FP8[i*m.Cols+j]) * scale
}

func TestNewFP8Matrix(t *testing.T) {
	tests := []struct {
		rows, cols, codes, scales int
		wantErr                   string
	}{
		{128, 128, 128 * 128, 1, ""},
		{129, 300, 129 * 300, 2 * 3, ""},
		{1, 1, 1, 1, ""},
		{0, 5, 0, 0, ""},
		{2048, 6144, 2048 * 6144, 16 * 48, ""},
		{129, 300, 129 * 300, 5, "needs [2, 3] = 6 block scales of 128×128, has 5"},
		{128, 128, 128*128 - 1, 1, "needs 16384 fp8 elements, has 16383"},
		{-1, 4, 0, 0, "negative dimension"},
	}
	for _, tc := range tests {
		name := fmt.Sprintf("[%d,%d] %d codes %d scales", tc.rows, tc.cols, tc.codes, tc.scales)
		m, err := NewFP8Matrix(tc.rows, tc.cols, make([]uint8, tc.codes), make([]float32, tc.scales))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.wantErr)
		case err == nil && (m.Rows != tc.rows || m.Cols != tc.cols || m.Scales.Stride != ceilDiv(tc.cols, FP8Block) || m.Scales.RowOff != 0 || m.Scales.ColOff != 0):
			t.Errorf("%s: got %+v with scales %+v", name, m, *m.Scales)
		}
	}
}

// TestMatrixRowFP8: Row and Dequantize give every element's defined value
// (including NaN codes, negative, zero and subnormal scales) at any offsets.
func TestMatrixRowFP8(t *testing.T) {
	r := newRand(50)
	for _, sh := range []struct{ rows, cols, rowOff, colOff int }{
		{1, 1, 0, 0}, {3, 130, 0, 0}, {130, 3, 0, 0}, {5, 200, 127, 100}, {64, 64, 64, 64}, {7, 300, 300, 256},
	} {
		m := randFP8(r, sh.rows, sh.cols, sh.rowOff, sh.colOff)
		m.FP8[0], m.FP8[len(m.FP8)-1] = 0x7F, 0xFF
		copy(m.Scales.S, []float32{-0.5, 0, math.Float32frombits(3)})
		d := m.Dequantize()
		if err := d.Validate(); err != nil || d.F32 == nil {
			t.Fatalf("%+v: Dequantize gave %+v: %v", sh, d, err)
		}
		var row []float32
		for i := range sh.rows {
			want := make([]float32, sh.cols)
			for j := range want {
				want[j] = fp8Value(m, i, j)
			}
			row = m.Row(i, row)
			if diff := cmp.Diff(bitsOf(want), bitsOf(row)); diff != "" {
				t.Errorf("%+v Row(%d) (-want +got):\n%s", sh, i, diff)
			}
			if diff := cmp.Diff(bitsOf(want), bitsOf(d.F32[i*sh.cols:(i+1)*sh.cols])); diff != "" {
				t.Errorf("%+v Dequantize row %d (-want +got):\n%s", sh, i, diff)
			}
		}
		if v := m.Row(0, nil)[0]; v == v {
			t.Errorf("%+v: NaN code 0x7F gave %v", sh, v)
		}
	}
}

// sliceCase is one matrix of each storage type with the same shape.
func sliceMatrices(r *rand.Rand, rows, cols int) map[string]*Matrix {
	f := randSlice(r, rows*cols, 1)
	b := make([]uint16, len(f))
	for i, v := range f {
		b[i] = toBF16(v)
	}
	q, err := NewFP8Matrix(rows, cols, randCodes(r, rows*cols), randScales(r, ceilDiv(rows, FP8Block)*ceilDiv(cols, FP8Block)))
	if err != nil {
		panic(err)
	}
	return map[string]*Matrix{"f32": {Rows: rows, Cols: cols, F32: f}, "bf16": {Rows: rows, Cols: cols, BF16: b}, "fp8": q}
}

// TestMatrixSlices: SliceRows is a view and SliceCols a copy in the same
// storage type; both give the elements of the part they cut, also through
// fp8 blocks (experts of width 128 split over 2 and 8 ranks, GLM-5's
// o_proj split over 8), and slices of slices compose.
func TestMatrixSlices(t *testing.T) {
	r := newRand(51)
	for _, sh := range []struct {
		rows, cols, parts int
	}{{128, 256, 2}, {256, 128, 8}, {300, 260, 3}, {64, 48, 4}, {12, 6144 / 16, 8}} {
		for dtype, m := range sliceMatrices(r, sh.rows, sh.cols) {
			full := m.Dequantize()
			for p := range sh.parts {
				for _, byRows := range []bool{true, false} {
					var s *Matrix
					var lo, n int
					if byRows {
						n = sh.rows / sh.parts
						lo = p * n
						s = m.SliceRows(lo, n)
					} else {
						n = sh.cols / sh.parts
						lo = p * n
						s = m.SliceCols(lo, n)
					}
					name := fmt.Sprintf("%s [%d,%d] part %d/%d rows=%v", dtype, sh.rows, sh.cols, p, sh.parts, byRows)
					if err := s.Validate(); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if s.DType() != m.DType() {
						t.Errorf("%s: slice is %s", name, s.DType())
					}
					if s.Scales != nil && (s.Scales.RowOff >= FP8Block || s.Scales.ColOff >= FP8Block) {
						t.Errorf("%s: offsets (%d, %d) not reduced below %d", name, s.Scales.RowOff, s.Scales.ColOff, FP8Block)
					}
					got := s.Dequantize().F32
					var want []float32
					if byRows {
						want = full.F32[lo*sh.cols : (lo+n)*sh.cols]
					} else {
						want = full.SliceCols(lo, n).F32
					}
					if diff := cmp.Diff(bitsOf(want), bitsOf(got)); diff != "" {
						t.Errorf("%s: elements (-want +got):\n%s", name, diff)
					}
					// A slice of the slice: its second half of rows, then columns.
					if s.Rows >= 2 && s.Cols >= 2 {
						ss := s.SliceRows(s.Rows/2, s.Rows-s.Rows/2).SliceCols(1, s.Cols-1)
						want2 := s.Dequantize().SliceRows(s.Rows/2, s.Rows-s.Rows/2).SliceCols(1, s.Cols-1).F32
						if diff := cmp.Diff(bitsOf(want2), bitsOf(ss.Dequantize().F32)); diff != "" {
							t.Errorf("%s: slice of the slice (-want +got):\n%s", name, diff)
						}
					}
				}
			}
			if m.SliceRows(0, m.Rows) != m || m.SliceCols(0, m.Cols) != m {
				t.Errorf("%s: a slice of the whole matrix is not the matrix itself", dtype)
			}
			// Row slices share storage; column slices do not.
			sr, sc := m.SliceRows(1, 2), m.SliceCols(1, 2)
			switch dtype {
			case "f32":
				if &sr.F32[0] != &m.F32[m.Cols] || &sc.F32[0] == &m.F32[1] {
					t.Errorf("f32: SliceRows must be a view and SliceCols a copy")
				}
			case "bf16":
				if &sr.BF16[0] != &m.BF16[m.Cols] || &sc.BF16[0] == &m.BF16[1] {
					t.Errorf("bf16: SliceRows must be a view and SliceCols a copy")
				}
			case "fp8":
				if &sr.FP8[0] != &m.FP8[m.Cols] || &sc.FP8[0] == &m.FP8[1] || &sc.Scales.S[0] != &m.Scales.S[0] {
					t.Errorf("fp8: SliceRows must be a view, SliceCols a copy of the codes sharing the scales")
				}
			}
			for _, f := range []func(){
				func() { m.SliceRows(-1, 1) }, func() { m.SliceRows(0, m.Rows+1) }, func() { m.SliceRows(m.Rows, -1) },
				func() { m.SliceCols(1, m.Cols) }, func() { m.SliceCols(-2, 1) },
			} {
				expectPanic(t, dtype+" slice out of range", f)
			}
		}
	}
}

// TestFP8SliceOffsets pins the offsets of the tensor-parallel cuts of an
// expert of width 128: gate/up rows and down columns at 64 (TP 2) and 16
// (TP 8), in the first block.
func TestFP8SliceOffsets(t *testing.T) {
	r := newRand(52)
	gate := sliceMatrices(r, 128, 6144)["fp8"]
	down := sliceMatrices(r, 6144, 128)["fp8"]
	for _, tp := range []int{2, 8} {
		w := 128 / tp
		for rank := range tp {
			g := gate.SliceRows(rank*w, w).Scales
			d := down.SliceCols(rank*w, w).Scales
			if g.RowOff != rank*w || g.ColOff != 0 || &g.S[0] != &gate.Scales.S[0] {
				t.Errorf("TP %d rank %d gate: scales %+v", tp, rank, *g)
			}
			if d.ColOff != rank*w || d.RowOff != 0 || &d.S[0] != &down.Scales.S[0] {
				t.Errorf("TP %d rank %d down: scales %+v", tp, rank, *d)
			}
		}
	}
}

// TestQuantizeFP8: the matrix holds numfmt's codes and scales for the values
// (its elements are their dequantization), and bad input is refused.
func TestQuantizeFP8(t *testing.T) {
	r := newRand(53)
	const rows, cols = 130, 300
	w := randSlice(r, rows*cols, 3)
	m, err := QuantizeFP8(rows, cols, w)
	if err != nil {
		t.Fatal(err)
	}
	br, bc := numfmt.WeightScaleBlocks(rows, cols)
	codes, scales := make([]uint8, rows*cols), make([]float32, br*bc)
	if err := numfmt.QuantizeE4M3Blocks(codes, scales, w, rows, cols); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, rows*cols)
	if err := numfmt.DequantizeE4M3Blocks(want, codes, scales, rows, cols); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(codes, m.FP8); d != "" {
		t.Errorf("codes (-numfmt +matrix):\n%s", d)
	}
	if d := cmp.Diff(bitsOf(want), bitsOf(m.Dequantize().F32)); d != "" {
		t.Errorf("elements (-numfmt +matrix):\n%s", d)
	}
	for _, tc := range []struct {
		w          []float32
		rows, cols int
		wantErr    string
	}{
		{make([]float32, 5), 2, 3, "5 values for a [2, 3] matrix"},
		{[]float32{1, float32(math.Inf(1))}, 1, 2, "weight [0, 1] is +Inf"},
	} {
		if _, err := QuantizeFP8(tc.rows, tc.cols, tc.w); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("QuantizeFP8(%d, %d, %d values): %v, want an error containing %q", tc.rows, tc.cols, len(tc.w), err, tc.wantErr)
		}
	}
}

// TestFiniteCodesMark: NewFP8Matrix marks codes free of NaN codes as checked and
// codes holding one (0x7F or 0xFF, at any place of the eight-byte words the
// check reads, or in the tail) as not; slices keep the mark; a literal has
// none until CheckFP8Codes checks its codes.
func TestFiniteCodesMark(t *testing.T) {
	r := newRand(64)
	const rows, cols = 3, 43
	for pos := -1; pos < rows*cols; pos++ {
		for _, nan := range []uint8{0x7F, 0xFF} {
			codes := randCodes(r, rows*cols)
			if pos >= 0 {
				codes[pos] = nan
			}
			m, err := NewFP8Matrix(rows, cols, codes, randScales(r, 1))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := m.finite, pos < 0; got != want {
				t.Fatalf("NaN code %#x at %d: finite = %v, want %v", nan, pos, got, want)
			}
			if got := m.SliceRows(1, 2).finite; got != m.finite {
				t.Errorf("NaN code %#x at %d: SliceRows keeps finite = %v, want %v", nan, pos, got, m.finite)
			}
			if got := m.SliceCols(5, 20).finite; got != m.finite {
				t.Errorf("NaN code %#x at %d: SliceCols keeps finite = %v, want %v", nan, pos, got, m.finite)
			}
			lit := &Matrix{Rows: rows, Cols: cols, FP8: codes, Scales: m.Scales}
			if lit.FP8Checked() {
				t.Fatalf("NaN code %#x at %d: a literal reports its codes checked before CheckFP8Codes", nan, pos)
			}
			lit.CheckFP8Codes()
			if got, want := lit.FP8Checked(), pos < 0; got != want {
				t.Errorf("NaN code %#x at %d: CheckFP8Codes on a literal gives FP8Checked = %v, want %v", nan, pos, got, want)
			}
		}
	}
	if (&Matrix{Rows: 1, Cols: 1, FP8: []uint8{0}, Scales: &BlockScales{S: []float32{1}, Stride: 1}}).finite {
		t.Error("a literal Matrix reports its codes checked")
	}
	bf := &Matrix{Rows: 1, Cols: 1, BF16: []uint16{0}}
	bf.CheckFP8Codes()
	if bf.FP8Checked() {
		t.Error("CheckFP8Codes marks a bf16 matrix's codes checked")
	}
}

// FuzzHasNaNCode: the eight-bytes-at-a-time check agrees with a byte loop.
func FuzzHasNaNCode(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0x7E, 0xFE, 0x80, 0x7F})
	f.Add([]byte{0x7F, 0xFE, 0xFE, 0xFE, 0xFE, 0xFE, 0xFE, 0xFE, 0})
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0xFF})
	f.Fuzz(func(t *testing.T, codes []byte) {
		want := false
		for _, c := range codes {
			want = want || c&0x7F == 0x7F
		}
		if got := hasNaNCode(codes); got != want {
			t.Errorf("hasNaNCode(% x) = %v, want %v", codes, got, want)
		}
	})
}

// BenchmarkHasNaNCode times the check NewFP8Matrix makes once per matrix
// (GB/s of codes, 64 MiB streamed from memory).
func BenchmarkHasNaNCode(b *testing.B) {
	codes := randCodes(newRand(65), 64<<20)
	for b.Loop() {
		if hasNaNCode(codes) {
			b.Fatal("random codes without NaN codes reported as holding one")
		}
	}
	b.ReportMetric(float64(len(codes))/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GB/s")
}
