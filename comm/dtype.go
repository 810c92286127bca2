package comm

import (
	"fmt"
	"unsafe"
)

// DType names the element type of a collective's buffers.
type DType uint8

// Element types a collective can carry. DTypeNone is used by Barrier only.
const (
	DTypeNone DType = iota
	U8
	I32
	F32
	F64
)

// Size is the number of bytes per element (0 for DTypeNone or an unknown
// value).
func (d DType) Size() int {
	switch d {
	case U8:
		return 1
	case I32, F32:
		return 4
	case F64:
		return 8
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case DTypeNone:
		return "none"
	case U8:
		return "u8"
	case I32:
		return "i32"
	case F32:
		return "f32"
	case F64:
		return "f64"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Elem is the set of element types the typed collectives accept.
type Elem interface {
	uint8 | int32 | float32 | float64
}

// DTypeOf returns the DType of T.
func DTypeOf[T Elem]() DType {
	switch any((*T)(nil)).(type) {
	case *uint8:
		return U8
	case *int32:
		return I32
	case *float32:
		return F32
	case *float64:
		return F64
	}
	return DTypeNone
}

// Bytes returns the memory of s as a byte slice, without copying.
func Bytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// view reinterprets b (which came from a []T, so it is aligned for T) as a
// []T without copying.
func view[T Elem](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// AddInto adds src to dst element-wise (dst[i] += src[i]) with elements of
// type dt; integer types wrap around. Both slices must have the same length,
// a multiple of dt.Size(), and come from slices of that element type.
// Transports use it to reduce in group-rank order.
func AddInto(dt DType, dst, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("add %s: dst has %d bytes, src %d", dt, len(dst), len(src))
	}
	if es := dt.Size(); es == 0 || len(dst)%es != 0 {
		return fmt.Errorf("add %s: %d bytes is not a whole number of elements", dt, len(dst))
	}
	switch dt {
	case U8:
		addInto(dst, src)
	case I32:
		addInto(view[int32](dst), view[int32](src))
	case F32:
		addInto(view[float32](dst), view[float32](src))
	case F64:
		addInto(view[float64](dst), view[float64](src))
	}
	return nil
}

func addInto[T Elem](dst, src []T) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// overlaps reports whether two byte slices share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
	pb := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// SumRankOrder writes the element-wise sum of srcs into dst, adding in the
// order given: dst[i] = ((srcs[0][i] + srcs[1][i]) + srcs[2][i]) + ….
// Transports pass the members' contributions in group-rank order, so every
// member that computes an element gets the same bits. dst may be one of
// srcs only if it is srcs[0]. All slices have len(dst) bytes, a whole
// number of dt elements.
func SumRankOrder(dt DType, dst []byte, srcs [][]byte) error {
	es := dt.Size()
	if es == 0 || len(dst)%es != 0 {
		return fmt.Errorf("sum %s: %d bytes is not a whole number of elements", dt, len(dst))
	}
	if len(srcs) == 0 {
		return fmt.Errorf("sum %s: no sources", dt)
	}
	for j, s := range srcs {
		if len(s) != len(dst) {
			return fmt.Errorf("sum %s: source %d has %d bytes, dst %d", dt, j, len(s), len(dst))
		}
		if j > 0 && overlaps(s, dst) {
			return fmt.Errorf("sum %s: source %d overlaps dst; only the first source may", dt, j)
		}
	}
	switch dt {
	case U8:
		sumRankOrder(dst, srcs, view[uint8])
	case I32:
		sumRankOrder(view[int32](dst), srcs, view[int32])
	case F32:
		sumRankOrder(view[float32](dst), srcs, view[float32])
	case F64:
		sumRankOrder(view[float64](dst), srcs, view[float64])
	}
	return nil
}

// sumRankOrder adds up to four sources per pass over dst, keeping the
// left-to-right order of additions.
func sumRankOrder[T Elem](dst []T, srcs [][]byte, as func([]byte) []T) {
	n := len(dst)
	a := as(srcs[0])[:n]
	switch len(srcs) {
	case 1:
		copy(dst, a)
		return
	case 2:
		b := as(srcs[1])[:n]
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case 3:
		b, c := as(srcs[1])[:n], as(srcs[2])[:n]
		for i := range dst {
			dst[i] = a[i] + b[i] + c[i]
		}
	default:
		b, c, d := as(srcs[1])[:n], as(srcs[2])[:n], as(srcs[3])[:n]
		for i := range dst {
			dst[i] = a[i] + b[i] + c[i] + d[i]
		}
	}
	for j := 4; j < len(srcs); j++ {
		addInto(dst, as(srcs[j])[:n])
	}
}
