package kernels

import (
	"errors"
	"fmt"
	"math"
)

// Matrix is a row-major weight [Rows, Cols] = [out, in], the layout HF
// checkpoints store Linear weights in. Exactly one of F32 and BF16 is set
// (non-nil) and holds Rows·Cols elements; BF16 elements are raw bfloat16 bits.
type Matrix struct {
	Rows, Cols int
	F32        []float32
	BF16       []uint16
}

// Validate reports whether m is a well-formed weight: non-negative shape,
// exactly one storage slice set, and that slice holding Rows·Cols elements.
func (m *Matrix) Validate() error {
	if m == nil {
		return errors.New("kernels: nil matrix")
	}
	if m.Rows < 0 || m.Cols < 0 {
		return fmt.Errorf("kernels: matrix shape [%d, %d] has a negative dimension", m.Rows, m.Cols)
	}
	if m.Cols > 0 && m.Rows > math.MaxInt/m.Cols {
		return fmt.Errorf("kernels: matrix shape [%d, %d] overflows int", m.Rows, m.Cols)
	}
	want := m.Rows * m.Cols
	switch {
	case m.F32 != nil && m.BF16 != nil:
		return fmt.Errorf("kernels: matrix [%d, %d] has both F32 (%d) and BF16 (%d) storage set; set exactly one", m.Rows, m.Cols, len(m.F32), len(m.BF16))
	case m.F32 != nil:
		if len(m.F32) != want {
			return fmt.Errorf("kernels: matrix [%d, %d] needs %d f32 elements, has %d", m.Rows, m.Cols, want, len(m.F32))
		}
	case m.BF16 != nil:
		if len(m.BF16) != want {
			return fmt.Errorf("kernels: matrix [%d, %d] needs %d bf16 elements, has %d", m.Rows, m.Cols, want, len(m.BF16))
		}
	default:
		return fmt.Errorf("kernels: matrix [%d, %d] has no storage; set F32 or BF16", m.Rows, m.Cols)
	}
	return nil
}

// Row returns row i of m as float32 (bf16 widened exactly). It writes into
// dst when cap(dst) ≥ Cols and allocates otherwise. It panics if i is out of
// range.
func (m *Matrix) Row(i int, dst []float32) []float32 {
	if i < 0 || i >= m.Rows {
		panic(fmt.Sprintf("kernels: Matrix.Row(%d) out of range [0, %d)", i, m.Rows))
	}
	if cap(dst) >= m.Cols {
		dst = dst[:m.Cols]
	} else {
		dst = make([]float32, m.Cols)
	}
	if m.F32 != nil {
		copy(dst, m.F32[i*m.Cols:(i+1)*m.Cols])
		return dst
	}
	src := m.BF16[i*m.Cols : (i+1)*m.Cols]
	for k, h := range src {
		dst[k] = bf16ToF32(h)
	}
	return dst
}

// bf16ToF32 widens raw bfloat16 bits to float32; the conversion is exact.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// MatMulT computes dst[n, w.Rows] = x[n, w.Cols] · wᵀ, the Linear layer
// y = x Wᵀ. x and dst are row-major; dst must not overlap x. Under the
// reference implementation element (i, j) is exactly Dot(x row i, w row j)
// (bf16 rows widened); under an assembly implementation it is a fused,
// vectorized dot product in an order fixed by w.Cols alone (see gemm.go).
// Either way a row's result never depends on n or on SetThreads.
// It panics if w is malformed, n < 0, len(x) != n·w.Cols or
// len(dst) != n·w.Rows.
func MatMulT(dst, x []float32, n int, w *Matrix) {
	if err := w.Validate(); err != nil {
		panic(fmt.Sprintf("kernels: MatMulT: %v", err))
	}
	if n < 0 || len(x) != n*w.Cols || len(dst) != n*w.Rows {
		panic(fmt.Sprintf("kernels: MatMulT: n=%d, w [%d, %d] needs len(x)=%d and len(dst)=%d, got %d and %d",
			n, w.Rows, w.Cols, n*w.Cols, n*w.Rows, len(x), len(dst)))
	}
	if matMulTFast(dst, x, n, w) {
		return
	}
	if n == 0 {
		return
	}
	out, in := w.Rows, w.Cols
	// Blocks of weight rows small enough to stay in the L2 cache are reused by
	// every activation row; within a block each activation row stays in L1
	// while it meets every weight row of the block.
	bytesPerWeight := 4
	if w.F32 == nil {
		bytesPerWeight = 2
	}
	jb := max(1, matMulBlockBytes/max(1, in*bytesPerWeight))
	for j0 := 0; j0 < out; j0 += jb {
		j1 := min(j0+jb, out)
		for i := range n {
			xi := x[i*in : (i+1)*in]
			di := dst[i*out : (i+1)*out]
			if w.F32 != nil {
				for j := j0; j < j1; j++ {
					di[j] = Dot(xi, w.F32[j*in:(j+1)*in])
				}
				continue
			}
			for j := j0; j < j1; j++ {
				di[j] = dotBF16(xi, w.BF16[j*in:(j+1)*in])
			}
		}
	}
}

// matMulBlockBytes is the size of the weight block MatMulT keeps hot while
// all activation rows pass over it (a fraction of a 1 MiB L2 cache).
const matMulBlockBytes = 256 << 10

// MatVecT computes dst[w.Rows] = w · x for one activation row x[w.Cols]
// (MatMulT with n = 1, with the same bits). It panics on malformed w or mismatched lengths.
func MatVecT(dst, x []float32, w *Matrix) {
	if err := w.Validate(); err != nil {
		panic(fmt.Sprintf("kernels: MatVecT: %v", err))
	}
	if len(x) != w.Cols || len(dst) != w.Rows {
		panic(fmt.Sprintf("kernels: MatVecT: w [%d, %d] needs len(x)=%d and len(dst)=%d, got %d and %d",
			w.Rows, w.Cols, w.Cols, w.Rows, len(x), len(dst)))
	}
	if matMulTFast(dst, x, 1, w) {
		return
	}
	in := w.Cols
	if w.F32 != nil {
		for j := range dst {
			dst[j] = Dot(x, w.F32[j*in:(j+1)*in])
		}
		return
	}
	for j := range dst {
		dst[j] = dotBF16(x, w.BF16[j*in:(j+1)*in])
	}
}

// Dot returns Σ a[k]·b[k] in the package's fixed summation order (see the
// package documentation). It panics if the lengths differ.
func Dot(a, b []float32) float32 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("kernels: Dot: lengths differ: %d and %d", len(a), len(b)))
	}
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(a); k += 4 {
		a4 := a[k : k+4 : k+4]
		b4 := b[k : k+4 : k+4]
		s0 += float32(a4[0] * b4[0])
		s1 += float32(a4[1] * b4[1])
		s2 += float32(a4[2] * b4[2])
		s3 += float32(a4[3] * b4[3])
	}
	for ; k < len(a); k++ {
		s0 += float32(a[k] * b[k])
	}
	return (s0 + s1) + (s2 + s3)
}

// dotBF16 is Dot(x, widen(w)) with the same summation order. Callers
// guarantee equal lengths.
func dotBF16(x []float32, w []uint16) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(w); k += 4 {
		w4 := w[k : k+4 : k+4]
		p := x[k : k+4 : k+4]
		s0 += float32(p[0] * bf16ToF32(w4[0]))
		s1 += float32(p[1] * bf16ToF32(w4[1]))
		s2 += float32(p[2] * bf16ToF32(w4[2]))
		s3 += float32(p[3] * bf16ToF32(w4[3]))
	}
	for ; k < len(w); k++ {
		s0 += float32(x[k] * bf16ToF32(w[k]))
	}
	return (s0 + s1) + (s2 + s3)
}

// Axpy computes y += alpha·x element-wise (each product rounded to float32
// before the add). The assembly implementations multiply and add in vectors
// without fusing, so every element has the reference's bits (NaN results
// stay NaN). It panics if the lengths differ.
func Axpy(alpha float32, x, y []float32) {
	if len(x) != len(y) {
		panic(fmt.Sprintf("kernels: Axpy: lengths differ: len(x)=%d, len(y)=%d", len(x), len(y)))
	}
	y = y[:len(x)]
	if axpyFast(alpha, x, y) {
		return
	}
	for k, v := range x {
		y[k] += float32(alpha * v)
	}
}
