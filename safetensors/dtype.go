package safetensors

import (
	"fmt"
	"strings"
)

// DType is the element type of a tensor.
type DType uint8

// The dtypes this package reads and writes.
const (
	F32    DType = iota + 1 // IEEE float32
	F16                     // IEEE float16
	BF16                    // bfloat16
	I32                     // int32
	I64                     // int64
	U8                      // uint8
	F8E4M3                  // float8_e4m3fn, named "F8_E4M3" in headers
)

var dtypeNames = [...]string{
	F32:    "F32",
	F16:    "F16",
	BF16:   "BF16",
	I32:    "I32",
	I64:    "I64",
	U8:     "U8",
	F8E4M3: "F8_E4M3",
}

var dtypeSizes = [...]int{F32: 4, F16: 2, BF16: 2, I32: 4, I64: 8, U8: 1, F8E4M3: 1}

// String returns the dtype's name as written in safetensors headers.
func (d DType) String() string {
	if d.valid() {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size returns the size of one element in bytes (0 for an invalid DType).
func (d DType) Size() int {
	if d.valid() {
		return dtypeSizes[d]
	}
	return 0
}

func (d DType) valid() bool { return d >= F32 && d <= F8E4M3 }

// supportedDTypes lists the accepted header names, for error messages.
func supportedDTypes() string {
	return strings.Join(dtypeNames[F32:], ", ")
}

// ParseDType maps a header dtype name to a DType. Names are case-sensitive
// and unknown names are refused.
func ParseDType(name string) (DType, error) {
	for d := F32; d <= F8E4M3; d++ {
		if dtypeNames[d] == name {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown dtype %q (supported: %s)", name, supportedDTypes())
}
