package conformance

import (
	"encoding/binary"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cpmla/cpmla/safetensors"
)

// fuzzCases are the committed cases the fuzzers start from: one or two per
// kernel, the small ones.
var fuzzCases = []string{
	prefillCase,
	decodeCase,
	indexerCase,
	combineCase,
	localizeCase,
	seqLensCase,
	dequantCase,
	"fp8_ds_mla_quantize/random64",
	"lse_combine/n3_t4_h4_d64",
	"dcp_localize_indices/n3_r2_i4_b16_in_place",
}

// checkRunError fails the test unless a Run error is a single line.
func checkRunError(t *testing.T, err error) {
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Fatalf("error spans several lines: %q", err)
	}
}

// maxFileSeedBytes keeps large case files out of the byte-level corpus:
// mutating a few hundred kilobytes per execution slows the fuzzer to a
// crawl, and FuzzRunCase covers the large cases structurally.
const maxFileSeedBytes = 64 << 10

// FuzzRunFile feeds arbitrary bytes through the same path as
// `cpmla kernel run`: Open, then Run. Neither may panic, and Run's errors
// are one line.
func FuzzRunFile(f *testing.F) {
	for _, rel := range fuzzCases {
		b, err := os.ReadFile(filepath.Join(caseDir, rel+".in.safetensors"))
		if err != nil {
			f.Fatal(err)
		}
		if len(b) <= maxFileSeedBytes {
			f.Add(b)
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		tmp, err := os.CreateTemp(dir, "case*.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		path := tmp.Name()
		defer os.Remove(path)
		if _, err := tmp.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := tmp.Close(); err != nil {
			t.Fatal(err)
		}
		file, err := safetensors.Open(path)
		if err != nil {
			return
		}
		defer file.Close()
		_, err = Run(file)
		checkRunError(t, err)
	})
}

// maxFuzzBytes bounds the tensors a structured mutation may create.
const maxFuzzBytes = 4 << 20

// FuzzRunCase applies one structured mutation to a committed case (a
// metadata value, a dropped tensor, a new dimension, dtype or rank, a
// truncated buffer, an overwritten element) and runs it. RunCase must not
// panic and its errors are one line.
func FuzzRunCase(f *testing.F) {
	bases := make([]Case, len(fuzzCases))
	for i, rel := range fuzzCases {
		bases[i] = loadCase(f, rel)
	}
	f.Add(uint8(0), uint8(0), uint8(0), uint8(0), int64(7), "sm_scale", "0")
	f.Add(uint8(1), uint8(1), uint8(4), uint8(1), int64(-5), "page_size", "2")
	f.Add(uint8(2), uint8(3), uint8(2), uint8(1), int64(0), "topk", "0")
	f.Add(uint8(3), uint8(0), uint8(7), uint8(0), int64(1), "kernel", "lse_combine")
	f.Add(uint8(4), uint8(0), uint8(4), uint8(1), int64(math.MaxInt32), "interleave", "64")
	f.Add(uint8(5), uint8(0), uint8(4), uint8(0), int64(math.MinInt32), "dcp_size", "65536")
	f.Add(uint8(6), uint8(0), uint8(5), uint8(3), int64(100), "", "")
	f.Add(uint8(7), uint8(0), uint8(6), uint8(2), int64(3), "kernel", "fp8_ds_mla_dequantize")
	f.Fuzz(func(t *testing.T, which, tensor, op, dim uint8, val int64, key, value string) {
		c := bases[int(which)%len(bases)].clone()
		names := slices.Sorted(maps.Keys(c.Tensors))
		name := names[int(tensor)%len(names)]
		x := c.Tensors[name]
		switch op % 8 {
		case 0: // set a metadata value
			c.Metadata[key] = value
		case 1: // drop a metadata key
			delete(c.Metadata, key)
		case 2: // drop a tensor
			delete(c.Tensors, name)
		case 3: // change one dimension, with data to match
			if len(x.Shape) == 0 {
				return
			}
			shape := slices.Clone(x.Shape)
			shape[int(dim)%len(shape)] = int(val % 1024)
			if !resize(&x, shape) {
				return
			}
		case 4: // overwrite one element's bytes with a 32-bit value
			if n := len(x.Data) / 4; n > 0 {
				i := int(uint64(dim) * uint64(val&0xFFFF) % uint64(n))
				binary.LittleEndian.PutUint32(x.Data[4*i:], uint32(val))
			} else if len(x.Data) > 0 {
				x.Data[int(dim)%len(x.Data)] = byte(val)
			}
		case 5: // truncate the data
			if len(x.Data) > 0 {
				x.Data = x.Data[:int(uint64(val)%uint64(len(x.Data)))]
			}
		case 6: // change the dtype
			x.DType = safetensors.DType(dim % 9)
		case 7: // add or remove a dimension of size 1
			if dim%2 == 0 {
				x.Shape = append(slices.Clone(x.Shape), 1)
			} else if len(x.Shape) > 0 {
				x.Shape = x.Shape[:len(x.Shape)-1]
			}
		}
		if op%8 >= 3 {
			c.Tensors[name] = x
		}
		_, err := RunCase(c)
		checkRunError(t, err)
	})
}

// resize gives x a new shape and zero-extends or truncates its data to
// match; false if the result would exceed maxFuzzBytes or a dimension is
// negative.
func resize(x *safetensors.Tensor, shape []int) bool {
	n := x.DType.Size()
	for _, d := range shape {
		if d < 0 {
			x.Shape = shape // a negative dimension must be refused, not sized
			return true
		}
		n *= d
		if n > maxFuzzBytes {
			return false
		}
	}
	data := make([]byte, n)
	copy(data, x.Data)
	x.Shape, x.Data = shape, data
	return true
}
