package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/cpmla/cpmla/numfmt"
)

// Matrix is a row-major weight [Rows, Cols] = [out, in], the layout HF
// checkpoints store Linear weights in. Exactly one storage is set (non-nil)
// and holds Rows·Cols elements: F32 values, BF16 raw bfloat16 bits, or FP8
// float8_e4m3fn codes with their block scales in Scales. An FP8 element's
// value is float32(numfmt.F32FromE4M3(code) · scale), one float32 rounding
// of the product, where scale is the Scales entry of the element's block; a
// NaN code is NaN whatever its scale. The codes are usually a read-only view
// of a checkpoint file and are never copied or dequantized as a whole by the
// kernels.
type Matrix struct {
	Rows, Cols int
	F32        []float32
	// BF16 is row-major, or after InterleaveBF16 in its interleaved layout.
	BF16 []uint16
	FP8  []uint8
	// Scales holds the block scales of FP8 (nil for the other storages).
	Scales *BlockScales
	// finite is set when the FP8 codes were checked to hold no NaN code
	// (NewFP8Matrix checks them once), so the fp8 tiles need not check
	// them on every product. A Matrix built as a literal leaves it unset
	// and is checked as it is read.
	finite bool
	// pow2Max is, when every block scale of FP8 is a power of two in
	// [pow2ScaleMin, pow2ScaleMax] (DeepSeek's scale_fmt ue8m0), the
	// largest of them, and 0 otherwise; set with finite. The one-row
	// products of such a matrix may prescale the activations instead of
	// multiplying every code by its scale (prescaleRows).
	pow2Max float32
	// interleaved is set when BF16 holds the layout of InterleaveBF16.
	interleaved bool
	// fp8Ilv is set when FP8 holds the layout of InterleaveFP8.
	fp8Ilv bool
}

// InterleaveBF16 stores a bf16 matrix in the layout the AVX-512 tiles read
// as one stream, front to back: the rows in groups of eight, each group's
// values in chunks of thirty-two columns, row after row, and inside a chunk
// value i and value i+16 (i < 16) side by side in one 32-bit word, the first
// in its low half. So element (j, k) is at
//
//	(j/8)·8·Cols + (k/32)·256 + (j%8)·32 + 2·(k%16) + (k%32)/16.
//
// A one-row product of a row-major matrix reads eight rows at once, eight
// short streams the hardware prefetchers follow less well than one (see
// docs/performance-log.md, "Interleaved bf16 rows"); the interleaved one-row
// product reads two long ones, the first half of its groups beside the
// second. The pairing lets a tile
// widen sixteen values to float32 with one shift or one mask of the words
// it loads, in element order, where row-major values need a widening
// shuffle and a shift. The values are copied into new storage, which on
// Linux is asked to sit on 2 MiB huge pages (toHugePages): a checkpoint's
// read-only view is left as it is. It reports whether the matrix is
// interleaved now; it does nothing unless the AVX-512 implementation is
// active, Rows is a positive multiple of 8 and Cols of 32. Products, Row, Dequantize and the slices give the same bits in either
// layout, under every implementation.
func (m *Matrix) InterleaveBF16() bool {
	if m.interleaved || m.BF16 == nil || activeLevel() != levelAVX512 || !ilvShape(m.Rows, m.Cols) {
		return m.interleaved
	}
	in := m.Cols
	v := make([]uint16, len(m.BF16))
	for j := range m.Rows {
		row := m.BF16[j*in : (j+1)*in]
		for k := 0; k < in; k += ilvCols {
			ilvPack(v[ilvAt(in, j, k):], row[k:k+ilvCols])
		}
	}
	_ = hugePages(v) // advice: ordinary pages give the same values
	m.BF16, m.interleaved = v, true
	return true
}

// hugePages is toHugePages; a test replaces it to see the kernel's answer.
var hugePages = toHugePages

// Interleaved reports whether m's BF16 values are in the layout of
// InterleaveBF16, or its FP8 codes in that of InterleaveFP8, rather than
// row-major.
func (m *Matrix) Interleaved() bool { return m.interleaved || m.fp8Ilv }

// The interleaved layout: groups of ilvRows rows whose values alternate in
// chunks of ilvCols, each chunk's values paired ilvCols/2 apart (ilvPack).
// The AVX-512 tiles that read it assume all three.
const ilvRows, ilvCols = 8, 32

// ilvPack writes the ilvCols values src of one row's chunk to dst in the
// chunk's interleaved order: value i at 2i and value i+ilvCols/2 at 2i+1.
func ilvPack(dst, src []uint16) {
	const half = ilvCols / 2
	dst, src = dst[:ilvCols], src[:ilvCols]
	for i := range half {
		dst[2*i], dst[2*i+1] = src[i], src[i+half]
	}
}

// ilvUnpack is the inverse of ilvPack: the chunk at src back in column
// order in dst.
func ilvUnpack(dst, src []uint16) {
	const half = ilvCols / 2
	dst, src = dst[:ilvCols], src[:ilvCols]
	for i := range half {
		dst[i], dst[i+half] = src[2*i], src[2*i+1]
	}
}

// ilvShape reports whether a [rows, cols] matrix can be interleaved.
func ilvShape(rows, cols int) bool {
	return rows > 0 && rows%ilvRows == 0 && cols > 0 && cols%ilvCols == 0
}

// ilvAt is where the chunk of values k…k+ilvCols-1 of row j (k a multiple
// of ilvCols) starts in the interleaved layout of a matrix of in columns.
func ilvAt(in, j, k int) int {
	return (j/ilvRows)*ilvRows*in + k*ilvRows + (j%ilvRows)*ilvCols
}

// ilvRowBits copies row j of an interleaved matrix into dst (Cols values).
func (m *Matrix) ilvRowBits(dst []uint16, j int) {
	for k := 0; k < m.Cols; k += ilvCols {
		ilvUnpack(dst[k:], m.BF16[ilvAt(m.Cols, j, k):])
	}
}

// widenIlv writes row j's values [k0, k0+len(dst)) of an interleaved
// matrix (k0 and len(dst) multiples of ilvCols) to dst as float32.
func (m *Matrix) widenIlv(dst []float32, j, k0 int) {
	var c [ilvCols]uint16
	for q := 0; q < len(dst); q += ilvCols {
		ilvUnpack(c[:], m.BF16[ilvAt(m.Cols, j, k0+q):])
		d := dst[q : q+ilvCols : q+ilvCols]
		for k, h := range c {
			d[k] = bf16ToF32(h)
		}
	}
}

// rowMajorBF16 returns rows [lo, lo+n) of an interleaved matrix in a new
// row-major slice.
func (m *Matrix) rowMajorBF16(lo, n int) []uint16 {
	v := make([]uint16, n*m.Cols)
	for r := range n {
		m.ilvRowBits(v[r*m.Cols:(r+1)*m.Cols], lo+r)
	}
	return v
}

// FP8Block is the side of the square blocks of an FP8 matrix that share one
// scale: 128, the weight_block_size of DeepSeek-V3 and GLM-5 checkpoints.
const FP8Block = 128

// BlockScales holds one float32 per FP8Block×FP8Block block of the tensor a
// matrix was cut from (the checkpoint's weight_scale_inv, row-major with
// Stride blocks per row; despite the name its entries are multiplied, not
// divided): element (i, j) of the matrix uses
//
//	S[((i+RowOff)/FP8Block)*Stride + (j+ColOff)/FP8Block].
//
// RowOff and ColOff place the matrix in that tensor, so a slice that cuts
// through a block (an expert of width 128 split over two ranks) keeps the
// scales of the block it came from. SliceRows and SliceCols keep both
// offsets below FP8Block by advancing S instead.
type BlockScales struct {
	S                      []float32
	Stride, RowOff, ColOff int
}

// NewFP8Matrix returns the FP8 matrix [rows, cols] of a checkpoint tensor:
// its e4m3 codes (row-major, rows·cols of them, not copied) and its
// weight_scale_inv, exactly ⌈rows/128⌉·⌈cols/128⌉ float32 block scales,
// row-major (not copied). It returns an error naming the sizes if they do
// not fit. It reads the codes once to learn whether they hold a NaN code,
// so that the products need not check them again: the codes must not change
// afterwards (a checkpoint's read-only mapping does not).
func NewFP8Matrix(rows, cols int, codes []uint8, scaleInv []float32) (*Matrix, error) {
	if rows < 0 || cols < 0 {
		return nil, fmt.Errorf("kernels: fp8 matrix shape [%d, %d] has a negative dimension", rows, cols)
	}
	br, bc := ceilDiv(rows, FP8Block), ceilDiv(cols, FP8Block)
	if br > 0 && bc > math.MaxInt/br {
		return nil, fmt.Errorf("kernels: fp8 matrix shape [%d, %d] overflows int", rows, cols)
	}
	if len(scaleInv) != br*bc {
		return nil, fmt.Errorf("kernels: fp8 matrix [%d, %d] needs [%d, %d] = %d block scales of %d×%d, has %d",
			rows, cols, br, bc, br*bc, FP8Block, FP8Block, len(scaleInv))
	}
	if codes == nil {
		codes = []uint8{}
	}
	m := &Matrix{Rows: rows, Cols: cols, FP8: codes, Scales: &BlockScales{S: scaleInv, Stride: bc}}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	m.finite = !hasNaNCode(codes)
	m.pow2Max = pow2ScalesMax(scaleInv)
	return m, nil
}

// CheckFP8Codes records whether m's fp8 codes hold a NaN code, as
// NewFP8Matrix does, for a matrix built as a literal (a transposed copy of
// a checkpoint's weight): the products of a matrix whose codes hold none
// then skip the check on every call and take the tiles that need checked
// codes. Call it once the codes are final. It does nothing for the other
// storages.
func (m *Matrix) CheckFP8Codes() {
	if m.FP8 != nil {
		m.finite = !hasNaNCode(m.FP8)
		m.pow2Max = 0
		if m.Scales != nil {
			m.pow2Max = pow2ScalesMax(m.Scales.S)
		}
	}
}

// The range of power-of-two block scales whose products prescaleRows
// takes: from pow2ScaleMin a code's dequantized value (at least 2^-9 times
// the scale) stays a normal float32, and up to pow2ScaleMax the largest
// (448 times the scale) stays far from overflow.
const (
	pow2ScaleMin = 0x1p-100
	pow2ScaleMax = 0x1p7
)

// pow2ScalesMax returns the largest of the block scales s when every one is
// a power of two in [pow2ScaleMin, pow2ScaleMax], and 0 otherwise (also for
// no scales).
func pow2ScalesMax(s []float32) float32 {
	var hi float32
	for _, v := range s {
		if v < pow2ScaleMin || v > pow2ScaleMax || math.Float32bits(v)&0x7FFFFF != 0 {
			return 0
		}
		hi = max(hi, v)
	}
	return hi
}

// FP8Checked reports whether m's fp8 codes were checked (NewFP8Matrix,
// CheckFP8Codes, or a slice of such a matrix) and hold no NaN code.
func (m *Matrix) FP8Checked() bool { return m.finite }

// hasNaNCode reports whether codes hold an e4m3 NaN code (0x7F or 0xFF),
// eight bytes at a time: a byte of v = word & 0x7F…7F ^ 0x7F…7F is zero
// exactly where the code is a NaN, and (v − 0x01…01) & ^v & 0x80…80 is
// nonzero exactly when some byte of v is zero.
func hasNaNCode(codes []uint8) bool {
	const ones, low7, high = 0x0101010101010101, 0x7F7F7F7F7F7F7F7F, 0x8080808080808080
	i := 0
	for ; i+8 <= len(codes); i += 8 {
		v := binary.LittleEndian.Uint64(codes[i:])&low7 ^ low7
		if (v-ones)&^v&high != 0 {
			return true
		}
	}
	for _, c := range codes[i:] {
		if c&0x7F == 0x7F {
			return true
		}
	}
	return false
}

// QuantizeFP8 returns the FP8 matrix [rows, cols] of the row-major float32
// values w, block-quantized as fp8 checkpoints are (numfmt.QuantizeE4M3Blocks:
// scale = amax/448 per 128×128 block). It allocates the codes and scales
// (rows·cols bytes and one float32 per block) and refuses NaN or infinite
// values and a length that does not fit the shape.
func QuantizeFP8(rows, cols int, w []float32) (*Matrix, error) {
	if rows < 0 || cols < 0 || (cols > 0 && rows > math.MaxInt/cols) || len(w) != rows*cols {
		return nil, fmt.Errorf("kernels: QuantizeFP8: %d values for a [%d, %d] matrix", len(w), rows, cols)
	}
	return quantizeFP8(rows, cols, w, numfmt.QuantizeE4M3Blocks)
}

// quantizeFP8 is QuantizeFP8 with the block quantizer quantize (the
// benchmarks also take numfmt.QuantizeE4M3BlocksUE8M0's power-of-two
// scales); rows, cols and w are checked by the caller.
func quantizeFP8(rows, cols int, w []float32, quantize func(codes []uint8, scales, w []float32, rows, cols int) error) (*Matrix, error) {
	br, bc := numfmt.WeightScaleBlocks(rows, cols)
	codes, scales := make([]uint8, rows*cols), make([]float32, br*bc)
	if err := quantize(codes, scales, w, rows, cols); err != nil {
		return nil, fmt.Errorf("kernels: QuantizeFP8: %w", err)
	}
	return NewFP8Matrix(rows, cols, codes, scales)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Validate reports whether m is a well-formed weight: non-negative shape,
// exactly one storage slice set, that slice holding Rows·Cols elements and,
// for FP8, Scales set with non-negative offsets, a stride that holds every
// block column the matrix touches, and a scale for every block it touches
// (Scales must be nil for the other storages).
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
	nset, have := 0, 0
	for _, st := range [...]struct {
		set bool
		n   int
	}{{m.F32 != nil, len(m.F32)}, {m.BF16 != nil, len(m.BF16)}, {m.FP8 != nil, len(m.FP8)}} {
		if st.set {
			nset++
			have = st.n
		}
	}
	switch {
	case nset > 1:
		var set []string
		for _, st := range []struct {
			name string
			set  bool
			n    int
		}{{"F32", m.F32 != nil, len(m.F32)}, {"BF16", m.BF16 != nil, len(m.BF16)}, {"FP8", m.FP8 != nil, len(m.FP8)}} {
			if st.set {
				set = append(set, fmt.Sprintf("%s (%d)", st.name, st.n))
			}
		}
		return fmt.Errorf("kernels: matrix [%d, %d] has %s storage set; set exactly one", m.Rows, m.Cols, strings.Join(set, " and "))
	case nset == 0:
		return fmt.Errorf("kernels: matrix [%d, %d] has no storage; set F32, BF16 or FP8 (with Scales)", m.Rows, m.Cols)
	case have != want:
		return fmt.Errorf("kernels: matrix [%d, %d] needs %d %s elements, has %d", m.Rows, m.Cols, want, strings.ToLower(m.DType()), have)
	case m.FP8 == nil && m.Scales != nil:
		return fmt.Errorf("kernels: %s matrix [%d, %d] has block scales; Scales is for FP8 storage only", strings.ToLower(m.DType()), m.Rows, m.Cols)
	case m.fp8Ilv && (m.FP8 == nil || !fp8IlvShape(m)):
		return fmt.Errorf("kernels: interleaved fp8 matrix [%d, %d] with %s storage: the layout holds fp8 codes of whole groups of eight rows in one block of rows and steps of sixteen columns", m.Rows, m.Cols, m.DType())
	case m.FP8 != nil:
		return m.Scales.validate(m.Rows, m.Cols)
	case m.interleaved && (m.BF16 == nil || !ilvShape(m.Rows, m.Cols)):
		return fmt.Errorf("kernels: interleaved matrix [%d, %d] with %s storage: the layout holds bf16 values of whole groups of eight rows and chunks of thirty-two columns", m.Rows, m.Cols, m.DType())
	}
	return nil
}

// validate checks that the scales cover every block of a [rows, cols] FP8
// matrix.
func (s *BlockScales) validate(rows, cols int) error {
	switch {
	case s == nil:
		return fmt.Errorf("kernels: fp8 matrix [%d, %d] has no block scales; set Scales", rows, cols)
	case s.RowOff < 0 || s.ColOff < 0 || s.Stride < 0:
		return fmt.Errorf("kernels: fp8 matrix [%d, %d]: block scales with stride %d and offsets (%d, %d): need them all ≥ 0",
			rows, cols, s.Stride, s.RowOff, s.ColOff)
	case rows == 0 || cols == 0:
		return nil
	case s.RowOff > math.MaxInt-rows || s.ColOff > math.MaxInt-cols:
		return fmt.Errorf("kernels: fp8 matrix [%d, %d]: block scale offsets (%d, %d) overflow int", rows, cols, s.RowOff, s.ColOff)
	}
	lastRow, lastCol := (s.RowOff+rows-1)/FP8Block, (s.ColOff+cols-1)/FP8Block
	if lastCol >= s.Stride {
		return fmt.Errorf("kernels: fp8 matrix [%d, %d] at column offset %d reaches block column %d, beyond a stride of %d blocks",
			rows, cols, s.ColOff, lastCol, s.Stride)
	}
	if lastRow > (math.MaxInt-lastCol)/s.Stride || lastRow*s.Stride+lastCol >= len(s.S) {
		return fmt.Errorf("kernels: fp8 matrix [%d, %d] at offsets (%d, %d) reaches block (%d, %d) of stride %d, needs more than the %d block scales given",
			rows, cols, s.RowOff, s.ColOff, lastRow, lastCol, s.Stride, len(s.S))
	}
	return nil
}

// DType names the storage of a matrix with exactly one storage set: F32,
// BF16 or FP8.
func (m *Matrix) DType() string {
	switch {
	case m.F32 != nil:
		return "F32"
	case m.BF16 != nil:
		return "BF16"
	}
	return "FP8"
}

// scaleRow returns the block scales of matrix row i: column j uses
// entry (j+ColOff)/FP8Block of the result.
func (s *BlockScales) scaleRow(i int) []float32 {
	return s.S[(i+s.RowOff)/FP8Block*s.Stride:]
}

// Row returns row i of m as float32 (bf16 widened exactly, fp8 codes times
// their block scales). It writes into dst when cap(dst) ≥ Cols and
// allocates otherwise. It panics if i is out of range.
func (m *Matrix) Row(i int, dst []float32) []float32 {
	if i < 0 || i >= m.Rows {
		panic(fmt.Sprintf("kernels: Matrix.Row(%d) out of range [0, %d)", i, m.Rows))
	}
	if cap(dst) >= m.Cols {
		dst = dst[:m.Cols]
	} else {
		dst = make([]float32, m.Cols)
	}
	switch {
	case m.F32 != nil:
		copy(dst, m.F32[i*m.Cols:(i+1)*m.Cols])
	case m.interleaved:
		m.widenIlv(dst, i, 0)
	case m.BF16 != nil:
		src := m.BF16[i*m.Cols : (i+1)*m.Cols]
		for k, h := range src {
			dst[k] = bf16ToF32(h)
		}
	case m.fp8Ilv:
		m.dequantIlvFP8(dst, i, 0)
	default:
		dequantizeRowFP8(dst, m.FP8[i*m.Cols:(i+1)*m.Cols], m.Scales.scaleRow(i), m.Scales.ColOff)
	}
	return dst
}

// dequantizeRowFP8 writes codes[k]·srow[(k+colOff)/FP8Block] to dst[k], a
// block segment at a time through DecodeE4M3Scaled (the same bits).
func dequantizeRowFP8(dst []float32, codes []uint8, srow []float32, colOff int) {
	for k := 0; k < len(codes); {
		b := (k + colOff) / FP8Block
		end := min(len(codes), (b+1)*FP8Block-colOff)
		DecodeE4M3Scaled(dst[k:end], codes[k:end], srow[b])
		k = end
	}
}

// Dequantize returns an F32 copy of m holding the values Row gives (an F32
// matrix is copied too). It is for oracles and tests: the kernels never
// dequantize a weight as a whole.
func (m *Matrix) Dequantize() *Matrix {
	d := &Matrix{Rows: m.Rows, Cols: m.Cols, F32: make([]float32, m.Rows*m.Cols)}
	for i := range m.Rows {
		m.Row(i, d.F32[i*m.Cols:(i+1)*m.Cols])
	}
	return d
}

// SliceRows returns rows [lo, lo+n) of m as a view sharing its storage (and
// its block scales, with the row offset moved), or m itself when that is all
// of it. It panics if the range is outside [0, Rows).
func (m *Matrix) SliceRows(lo, n int) *Matrix {
	if m.wholeSlice("SliceRows", lo, n, m.Rows) {
		return m
	}
	s := &Matrix{Rows: n, Cols: m.Cols}
	a, b := lo*m.Cols, (lo+n)*m.Cols
	switch {
	case m.F32 != nil:
		s.F32 = m.F32[a:b]
	case m.interleaved && lo%ilvRows == 0 && n%ilvRows == 0 && n > 0:
		// Whole groups: a view.
		s.BF16, s.interleaved = m.BF16[a:b], true
	case m.interleaved:
		s.BF16 = m.rowMajorBF16(lo, n)
	case m.BF16 != nil:
		s.BF16 = m.BF16[a:b]
	default:
		switch {
		case m.fp8Ilv && lo%fp8IlvRows == 0 && n%fp8IlvRows == 0 && n > 0:
			// Whole groups: a view.
			s.FP8, s.fp8Ilv = m.FP8[a:b], true
		case m.fp8Ilv:
			s.FP8 = m.rowMajorFP8(lo, n)
		default:
			s.FP8 = m.FP8[a:b]
		}
		s.Scales = m.Scales.shifted(lo, 0)
		s.finite, s.pow2Max = m.finite, m.pow2Max
	}
	return s
}

// SliceCols returns a copy of columns [lo, lo+n) of m in its own storage
// type (fp8 codes copied; the block scales shared, with the column offset
// moved), or m itself when that is all of it. It panics if the range is
// outside [0, Cols).
func (m *Matrix) SliceCols(lo, n int) *Matrix {
	if m.wholeSlice("SliceCols", lo, n, m.Cols) {
		return m
	}
	s := &Matrix{Rows: m.Rows, Cols: n}
	switch {
	case m.F32 != nil:
		s.F32 = copyCols(m.F32, m.Rows, m.Cols, lo, n)
	case m.interleaved:
		s.BF16 = copyCols(m.rowMajorBF16(0, m.Rows), m.Rows, m.Cols, lo, n)
	case m.BF16 != nil:
		s.BF16 = copyCols(m.BF16, m.Rows, m.Cols, lo, n)
	case m.fp8Ilv:
		s.FP8 = copyCols(m.rowMajorFP8(0, m.Rows), m.Rows, m.Cols, lo, n)
		s.Scales = m.Scales.shifted(0, lo)
		s.finite, s.pow2Max = m.finite, m.pow2Max
	default:
		s.FP8 = copyCols(m.FP8, m.Rows, m.Cols, lo, n)
		s.Scales = m.Scales.shifted(0, lo)
		s.finite, s.pow2Max = m.finite, m.pow2Max
	}
	return s
}

// wholeSlice panics unless [lo, lo+n) lies in [0, size) and reports whether
// it is all of it.
func (m *Matrix) wholeSlice(method string, lo, n, size int) bool {
	if lo < 0 || n < 0 || lo > size-n {
		panic(fmt.Sprintf("kernels: Matrix.%s(%d, %d) of a [%d, %d] matrix is out of range", method, lo, n, m.Rows, m.Cols))
	}
	return lo == 0 && n == size
}

// copyCols copies columns [lo, lo+n) of a row-major [rows, cols] slice.
func copyCols[T any](src []T, rows, cols, lo, n int) []T {
	dst := make([]T, rows*n)
	for r := range rows {
		copy(dst[r*n:(r+1)*n], src[r*cols+lo:r*cols+lo+n])
	}
	return dst
}

// shifted returns the scales of the part of a matrix that starts dr rows and
// dc columns into it, with both offsets reduced below FP8Block by advancing
// S to the first block the part uses.
func (s *BlockScales) shifted(dr, dc int) *BlockScales {
	r, c := s.RowOff+dr, s.ColOff+dc
	first := (r/FP8Block)*s.Stride + c/FP8Block
	t := &BlockScales{Stride: s.Stride, RowOff: r % FP8Block, ColOff: c % FP8Block}
	if first < len(s.S) {
		t.S = s.S[first:]
	} else {
		t.S = s.S[len(s.S):]
	}
	return t
}

// bf16ToF32 widens raw bfloat16 bits to float32; the conversion is exact.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// MatMulT computes dst[n, w.Rows] = x[n, w.Cols] · wᵀ, the Linear layer
// y = x Wᵀ. x and dst are row-major; dst must not overlap x. Under the
// reference implementation element (i, j) is exactly Dot(x row i, w row j)
// (bf16 rows widened, fp8 rows dequantized as Row gives them); under an assembly implementation it is a fused,
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
	matMulTRef(dst, x, n, w)
}

// matMulTRef is the reference MatMulT.
func matMulTRef(dst, x []float32, n int, w *Matrix) {
	if n == 0 {
		return
	}
	out, in := w.Rows, w.Cols
	// Blocks of weight rows small enough to stay in the L2 cache are reused by
	// every activation row; within a block each activation row stays in L1
	// while it meets every weight row of the block.
	jb := max(1, matMulBlockBytes/max(1, in*w.bytesPerWeight()))
	for j0 := 0; j0 < out; j0 += jb {
		j1 := min(j0+jb, out)
		for i := range n {
			xi := x[i*in : (i+1)*in]
			di := dst[i*out : (i+1)*out]
			for j := j0; j < j1; j++ {
				di[j] = w.dotRow(xi, j)
			}
		}
	}
}

// bytesPerWeight is the storage size of one element of m.
func (m *Matrix) bytesPerWeight() int {
	switch {
	case m.F32 != nil:
		return 4
	case m.BF16 != nil:
		return 2
	}
	return 1
}

// dotRow is Dot(x, row j of m) (the row widened or dequantized), the
// reference's output element.
func (m *Matrix) dotRow(x []float32, j int) float32 {
	in := m.Cols
	switch {
	case m.F32 != nil:
		return Dot(x, m.F32[j*in:(j+1)*in])
	case m.interleaved:
		return dotBF16Ilv(x, m.BF16, in, j)
	case m.BF16 != nil:
		return dotBF16(x, m.BF16[j*in:(j+1)*in])
	case m.fp8Ilv:
		return m.dotIlvFP8(x, j)
	}
	return dotFP8(x, m.FP8[j*in:(j+1)*in], m.Scales.scaleRow(j), m.Scales.ColOff)
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
	for j := range dst {
		dst[j] = w.dotRow(x, j)
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

// dotBF16Ilv is dotBF16 of x with row j of the interleaved values w of a
// matrix of in columns (len(x) = in): the same order, a chunk of ilvCols
// values (eight steps) at a time.
func dotBF16Ilv(x []float32, w []uint16, in, j int) float32 {
	var s0, s1, s2, s3 float32
	var c [ilvCols]uint16
	for q := 0; q < in; q += ilvCols {
		ilvUnpack(c[:], w[ilvAt(in, j, q):])
		p := x[q : q+ilvCols : q+ilvCols]
		for k := 0; k < ilvCols; k += 4 {
			s0 += float32(p[k] * bf16ToF32(c[k]))
			s1 += float32(p[k+1] * bf16ToF32(c[k+1]))
			s2 += float32(p[k+2] * bf16ToF32(c[k+2]))
			s3 += float32(p[k+3] * bf16ToF32(c[k+3]))
		}
	}
	return (s0 + s1) + (s2 + s3)
}

// dotFP8 is Dot(x, dequantized q) with the same summation order: element k
// is numfmt.F32FromE4M3(q[k])·srow[(k+colOff)/FP8Block], rounded once.
// Callers guarantee equal lengths and scales for every block.
func dotFP8(x []float32, q []uint8, srow []float32, colOff int) float32 {
	x = x[:len(q)]
	w := func(k int) float32 { return numfmt.F32FromE4M3(q[k]) * srow[(k+colOff)/FP8Block] }
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= len(q); k += 4 {
		p := x[k : k+4 : k+4]
		s0 += float32(p[0] * w(k))
		s1 += float32(p[1] * w(k+1))
		s2 += float32(p[2] * w(k+2))
		s3 += float32(p[3] * w(k+3))
	}
	for ; k < len(q); k++ {
		s0 += float32(x[k] * w(k))
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
