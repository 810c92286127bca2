package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/cpmla/cpmla/numfmt"
)

// Tensor is one named tensor. Data holds its little-endian bytes; for a
// tensor obtained from a File or Checkpoint it is a read-only view into the
// file's memory.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// hostLittleEndian reports whether zero-copy numeric views are possible.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Elems returns the number of elements (the product of Shape; 1 for a
// scalar).
func (t Tensor) Elems() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// check verifies that Data has exactly the size Shape and DType require.
func (t Tensor) check() error {
	if !t.DType.valid() {
		return fmt.Errorf("tensor %q: invalid dtype %v", t.Name, t.DType)
	}
	_, size, err := byteSize(t.Shape, t.DType)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if int64(len(t.Data)) != size {
		return fmt.Errorf("tensor %q: %d data bytes, but %s shape %v needs %d", t.Name, len(t.Data), t.DType, t.Shape, size)
	}
	return nil
}

// view returns a pointer to Data reinterpreted as elements of size bytes,
// or an error naming the reason a zero-copy view is impossible.
func (t Tensor) view(want DType) (unsafe.Pointer, int, error) {
	if t.DType != want {
		return nil, 0, fmt.Errorf("tensor %q is %s, not %s", t.Name, t.DType, want)
	}
	if err := t.check(); err != nil {
		return nil, 0, err
	}
	n := len(t.Data) / want.Size()
	if n == 0 {
		return nil, 0, nil
	}
	if !hostLittleEndian {
		return nil, 0, fmt.Errorf("tensor %q: zero-copy %s views need a little-endian host; use ToF32", t.Name, want)
	}
	p := unsafe.Pointer(unsafe.SliceData(t.Data))
	if uintptr(p)%uintptr(want.Size()) != 0 {
		return nil, 0, fmt.Errorf("tensor %q: data at address %#x is not %d-byte aligned for a zero-copy %s view; use ToF32 to copy", t.Name, uintptr(p), want.Size(), want)
	}
	return p, n, nil
}

// F32 returns a zero-copy []float32 view of an F32 tensor. It fails for
// other dtypes and for data that is not 4-byte aligned (possible in files
// whose header length is not a multiple of 4). The view is read-only.
func (t Tensor) F32() ([]float32, error) {
	p, n, err := t.view(F32)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return []float32{}, nil
	}
	return unsafe.Slice((*float32)(p), n), nil
}

// I32 returns a zero-copy []int32 view of an I32 tensor, under the same
// conditions as F32.
func (t Tensor) I32() ([]int32, error) {
	p, n, err := t.view(I32)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return []int32{}, nil
	}
	return unsafe.Slice((*int32)(p), n), nil
}

// BF16 returns a zero-copy []uint16 view of the bfloat16 bits of a BF16
// tensor, under the same conditions as F32.
func (t Tensor) BF16() ([]uint16, error) {
	p, n, err := t.view(BF16)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return []uint16{}, nil
	}
	return unsafe.Slice((*uint16)(p), n), nil
}

// U8 returns the raw bytes of a one-byte tensor (U8 or F8_E4M3 codes), and
// nil for every other dtype.
func (t Tensor) U8() []byte {
	if t.DType == U8 || t.DType == F8E4M3 {
		return t.Data
	}
	return nil
}

// ToF32 converts an F32, F16 or BF16 tensor to float32 values (exactly). It
// writes into dst when cap(dst) ≥ Elems() and allocates otherwise, and
// returns the filled slice of length Elems(). It refuses F8_E4M3: an fp8
// weight's values are its codes times block scales stored in another
// tensor, so a conversion of the codes alone would silently run a model
// with every scale set to one (read the codes with U8 and dequantize with
// the weight's weight_scale_inv).
func (t Tensor) ToF32(dst []float32) ([]float32, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	n := len(t.Data) / t.DType.Size()
	if cap(dst) >= n {
		dst = dst[:n]
	} else {
		dst = make([]float32, n)
	}
	b := t.Data
	switch t.DType {
	case F32:
		if v, err := t.F32(); err == nil {
			copy(dst, v)
			break
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case BF16:
		if v, err := t.BF16(); err == nil {
			numfmt.BF16ToF32s(dst, v)
			break
		}
		for i := range dst {
			dst[i] = numfmt.F32FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = f32FromF16(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case F8E4M3:
		return nil, fmt.Errorf("tensor %q is F8_E4M3: its values need the block scales of its weight_scale_inv; read the codes with U8", t.Name)
	default:
		return nil, fmt.Errorf("tensor %q: cannot convert %s to float32 (convertible: F32, F16, BF16)", t.Name, t.DType)
	}
	return dst, nil
}

// f32FromF16 widens an IEEE 754 binary16 value to float32 (exact, including
// subnormals, infinities and NaN payloads).
func f32FromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1F
	man := uint32(h) & 0x3FF
	switch exp {
	case 0: // zero or subnormal: man · 2^-24, exact in float32
		v := float32(man) * (1.0 / (1 << 24))
		return math.Float32frombits(math.Float32bits(v) | sign)
	case 0x1F: // infinity or NaN
		return math.Float32frombits(sign | 0x7F800000 | man<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	}
}

// FromF32 builds an F32 tensor holding a copy of v. It panics if len(v)
// differs from the product of shape.
func FromF32(name string, shape []int, v []float32) Tensor {
	t := newTensor(name, F32, shape, len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(f))
	}
	return t
}

// FromI32 builds an I32 tensor holding a copy of v. It panics if len(v)
// differs from the product of shape.
func FromI32(name string, shape []int, v []int32) Tensor {
	t := newTensor(name, I32, shape, len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(t.Data[4*i:], uint32(x))
	}
	return t
}

// FromBF16 builds a BF16 tensor from bfloat16 bit patterns (see
// numfmt.BF16FromF32). It panics if len(v) differs from the product of
// shape.
func FromBF16(name string, shape []int, v []uint16) Tensor {
	t := newTensor(name, BF16, shape, len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(t.Data[2*i:], x)
	}
	return t
}

// FromF8E4M3 builds an F8_E4M3 tensor holding a copy of the e4m3 codes v.
// It panics if len(v) differs from the product of shape.
func FromF8E4M3(name string, shape []int, v []byte) Tensor {
	t := newTensor(name, F8E4M3, shape, len(v))
	copy(t.Data, v)
	return t
}

// FromU8 builds a U8 tensor holding a copy of v. It panics if len(v)
// differs from the product of shape.
func FromU8(name string, shape []int, v []byte) Tensor {
	t := newTensor(name, U8, shape, len(v))
	copy(t.Data, v)
	return t
}

func newTensor(name string, dt DType, shape []int, n int) Tensor {
	elems, _, err := byteSize(shape, dt)
	if err != nil {
		panic(fmt.Sprintf("safetensors: tensor %q: %v", name, err))
	}
	if elems != n {
		panic(fmt.Sprintf("safetensors: tensor %q: shape %v holds %d elements, got %d values", name, shape, elems, n))
	}
	return Tensor{Name: name, DType: dt, Shape: append([]int(nil), shape...), Data: make([]byte, n*dt.Size())}
}
