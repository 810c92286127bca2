package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// rawTensor builds a tensor of any dtype from little-endian element words.
func rawTensor(name string, dt DType, shape []int, words []uint64) Tensor {
	t := Tensor{Name: name, DType: dt, Shape: shape, Data: make([]byte, len(words)*dt.Size())}
	for i, w := range words {
		switch dt.Size() {
		case 1:
			t.Data[i] = byte(w)
		case 2:
			binary.LittleEndian.PutUint16(t.Data[2*i:], uint16(w))
		case 4:
			binary.LittleEndian.PutUint32(t.Data[4*i:], uint32(w))
		case 8:
			binary.LittleEndian.PutUint64(t.Data[8*i:], w)
		}
	}
	return t
}

// everyDType is one tensor of each dtype, plus a scalar and an empty tensor.
func everyDType() []Tensor {
	return []Tensor{
		FromF32("a.f32", []int{2, 3}, []float32{1, -2, 3.5, 0, float32(math.Inf(1)), 1e-40}),
		rawTensor("b.f16", F16, []int{7}, []uint64{0x3C00, 0xC000, 0x7BFF, 0x0001, 0x0400, 0x7C00, 0x3555}),
		FromBF16("c.bf16", []int{2, 2}, []uint16{0x3F80, 0xC040, 0x7F80, 0x0001}),
		FromI32("d.i32", []int{3}, []int32{-1, 0, math.MaxInt32}),
		rawTensor("e.i64", I64, []int{2}, []uint64{1 << 40, math.MaxUint64}),
		FromU8("f.u8", []int{5}, []byte{0, 1, 2, 254, 255}),
		rawTensor("g.f8", F8E4M3, []int{2, 3}, []uint64{0x38, 0x7E, 0x01, 0xB8, 0x08, 0x80}),
		FromF32("h.scalar", nil, []float32{42}),
		FromF32("i.empty", []int{4, 0}, nil),
		FromU8("j.odd", []int{3}, []byte{7, 8, 9}), // an odd size before nothing else
	}
}

// wantF32 holds each convertible tensor's float32 values, from the format
// definitions: f16 0x3C00=1, 0xC000=−2, 0x7BFF=65504, 0x0001=2^-24,
// 0x0400=2^-14, 0x7C00=+Inf, 0x3555=1+341/1024·2^-2; bf16 0x3F80=1,
// 0xC040=−3, 0x0001=2^-133. F8_E4M3 is not convertible on its own (see
// TestToF32RefusesFP8).
var wantF32 = map[string][]float32{
	"a.f32":    {1, -2, 3.5, 0, float32(math.Inf(1)), 1e-40},
	"b.f16":    {1, -2, 65504, float32(math.Ldexp(1, -24)), float32(math.Ldexp(1, -14)), float32(math.Inf(1)), float32(math.Ldexp(1+341.0/1024, -2))},
	"c.bf16":   {1, -3, float32(math.Inf(1)), float32(math.Ldexp(1, -133))},
	"h.scalar": {42},
	"i.empty":  {},
}

func TestRoundTripEveryDType(t *testing.T) {
	for _, mode := range []string{"mmap", "read"} {
		t.Run(mode, func(t *testing.T) {
			forceRead = mode == "read"
			defer func() { forceRead = false }()
			path := filepath.Join(t.TempDir(), "x.safetensors")
			in := everyDType()
			meta := map[string]string{"format": "pt", "note": "<&> ünïcode"}
			if err := Write(path, in, meta); err != nil {
				t.Fatal(err)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Mapped() != (mode == "mmap") {
				t.Errorf("Mapped() = %v in mode %s", f.Mapped(), mode)
			}
			var names []string
			for _, tt := range in {
				names = append(names, tt.Name)
			}
			if diff := cmp.Diff(names, f.Names()); diff != "" {
				t.Errorf("Names (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(meta, f.Metadata()); diff != "" {
				t.Errorf("Metadata (-want +got):\n%s", diff)
			}
			for _, want := range in {
				got, err := f.Tensor(want.Name)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("tensor %s (-want +got):\n%s", want.Name, diff)
				}
				if vals, ok := wantF32[want.Name]; ok {
					conv, err := got.ToF32(nil)
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(vals, conv, cmp.Comparer(sameFloat32Bits), cmpopts.EquateEmpty()); diff != "" {
						t.Errorf("ToF32 %s (-want +got):\n%s", want.Name, diff)
					}
				}
			}
			a, _ := f.Tensor("a.f32")
			view, err := a.F32()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantF32["a.f32"], view); diff != "" {
				t.Errorf("F32 view (-want +got):\n%s", diff)
			}
			d, _ := f.Tensor("d.i32")
			iv, err := d.I32()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]int32{-1, 0, math.MaxInt32}, iv); diff != "" {
				t.Errorf("I32 view (-want +got):\n%s", diff)
			}
			c, _ := f.Tensor("c.bf16")
			bv, err := c.BF16()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]uint16{0x3F80, 0xC040, 0x7F80, 0x0001}, bv); diff != "" {
				t.Errorf("BF16 view (-want +got):\n%s", diff)
			}
			u, _ := f.Tensor("f.u8")
			if diff := cmp.Diff([]byte{0, 1, 2, 254, 255}, u.U8()); diff != "" {
				t.Errorf("U8 (-want +got):\n%s", diff)
			}
			if a.U8() != nil {
				t.Error("U8() of an F32 tensor is not nil")
			}
		})
	}
}

func sameFloat32Bits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

// TestWriterLayout checks the properties of written files other readers
// rely on: header padded with spaces to 8 bytes, contiguous data covering
// the data section exactly, each tensor aligned to its element size.
func TestWriterLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := Write(path, everyDType(), nil); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	js := string(raw[8 : 8+n])
	if trimmed := strings.TrimRight(js, " "); len(js)-len(trimmed) >= 8 || !strings.HasSuffix(trimmed, "}") {
		t.Errorf("header padding is not 0..7 spaces after the object: %q", js[len(trimmed):])
	}
	if strings.Contains(js, metadataKey) {
		t.Errorf("empty metadata was written: %s", js)
	}
	var entries map[string]struct {
		DType       string   `json:"dtype"`
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(raw[8:8+n], &entries); err != nil {
		t.Fatal(err)
	}
	covered := map[int64]int64{} // begin → end
	for name, e := range entries {
		dt, err := ParseDType(e.DType)
		if err != nil {
			t.Fatal(err)
		}
		if e.DataOffsets[0]%int64(dt.Size()) != 0 {
			t.Errorf("%s (%s) starts at %d, not aligned", name, dt, e.DataOffsets[0])
		}
		if e.DataOffsets[1] > e.DataOffsets[0] {
			covered[e.DataOffsets[0]] = e.DataOffsets[1]
		}
	}
	var at int64
	for {
		end, ok := covered[at]
		if !ok {
			break
		}
		at = end
	}
	if want := int64(len(raw)) - 8 - int64(n); at != want {
		t.Errorf("contiguous data covers [0, %d), data section is %d bytes", at, want)
	}
}

func TestF16AllCodes(t *testing.T) {
	for c := range 1 << 16 {
		h := uint16(c)
		sign := 1.0
		if h&0x8000 != 0 {
			sign = -1
		}
		e := int(h>>10) & 0x1F
		m := float64(h & 0x3FF)
		var want float64
		switch {
		case e == 0x1F && m == 0:
			want = math.Inf(int(sign))
		case e == 0x1F:
			want = math.NaN()
		case e == 0:
			want = sign * math.Ldexp(m, -24)
		default:
			want = sign * math.Ldexp(1+m/1024, e-15)
		}
		got := float64(f32FromF16(h))
		if math.IsNaN(want) {
			if !math.IsNaN(got) {
				t.Errorf("f16 %#04x: got %v, want NaN", h, got)
			}
			continue
		}
		if got != want || math.Signbit(got) != math.Signbit(want) {
			t.Errorf("f16 %#04x: got %v, want %v", h, got, want)
		}
	}
}

// TestToF32RefusesFP8: the codes of an fp8 weight are not its values (they
// need the block scales of its weight_scale_inv), so the conversion that
// would run a model with every scale set to one is refused; U8 gives the
// codes.
func TestToF32RefusesFP8(t *testing.T) {
	codes := []byte{0x38, 0x7E, 0x01, 0xB8, 0x08, 0x80}
	w := FromF8E4M3("model.layers.0.mlp.down_proj.weight", []int{2, 3}, codes)
	if _, err := w.ToF32(nil); err == nil || !strings.Contains(err.Error(), "weight_scale_inv") || !strings.Contains(err.Error(), w.Name) {
		t.Errorf("ToF32 of an F8_E4M3 tensor = %v; want a refusal naming the tensor and its block scales", err)
	}
	if d := cmp.Diff(codes, w.U8()); d != "" {
		t.Error(d)
	}
}

func TestToF32ReusesDst(t *testing.T) {
	tt := FromBF16("w", []int{3}, []uint16{0x3F80, 0x4000, 0x4040})
	buf := make([]float32, 1, 8)
	got, err := tt.ToF32(buf)
	if err != nil {
		t.Fatal(err)
	}
	if &got[0] != &buf[:1][0] {
		t.Error("ToF32 allocated although dst had capacity")
	}
	if diff := cmp.Diff([]float32{1, 2, 3}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestTensorErrors(t *testing.T) {
	misaligned := make([]byte, 64)
	off := 1
	for uintptr(unsafeAddr(misaligned[off:]))%4 == 0 {
		off++
	}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"F32 of BF16", func() error { _, err := FromBF16("w", []int{1}, []uint16{1}).F32(); return err }, `tensor "w" is BF16, not F32`},
		{"I32 of F32", func() error { _, err := FromF32("w", []int{1}, []float32{1}).I32(); return err }, "is F32, not I32"},
		{"misaligned F32", func() error {
			_, err := Tensor{Name: "w", DType: F32, Shape: []int{1}, Data: misaligned[off : off+4]}.F32()
			return err
		}, "not 4-byte aligned"},
		{"short data", func() error {
			_, err := Tensor{Name: "w", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}.ToF32(nil)
			return err
		}, "4 data bytes, but F32 shape [2] needs 8"},
		{"ToF32 of I32", func() error { _, err := FromI32("w", []int{1}, []int32{1}).ToF32(nil); return err }, "cannot convert I32 to float32"},
		{"invalid dtype", func() error { _, err := Tensor{Name: "w", DType: 99}.ToF32(nil); return err }, "invalid dtype DType(99)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// Misaligned data still converts by copying.
	tt := Tensor{Name: "w", DType: F32, Shape: []int{1}, Data: misaligned[off : off+4]}
	binary.LittleEndian.PutUint32(tt.Data, math.Float32bits(2.5))
	if got, err := tt.ToF32(nil); err != nil || got[0] != 2.5 {
		t.Errorf("ToF32 of misaligned data = %v, %v; want [2.5]", got, err)
	}
	bf := Tensor{Name: "w", DType: BF16, Shape: []int{2}, Data: misaligned[off : off+4]}
	binary.LittleEndian.PutUint16(bf.Data, 0xC040)     // −3
	binary.LittleEndian.PutUint16(bf.Data[2:], 0x3F00) // 0.5
	if unsafeAddr(bf.Data)%2 == 1 {
		if _, err := bf.BF16(); err == nil {
			t.Error("BF16 view of odd-address data succeeded")
		}
	}
	if got, err := bf.ToF32(nil); err != nil || fmt.Sprint(got) != "[-3 0.5]" {
		t.Errorf("ToF32 of misaligned bf16 = %v, %v; want [-3 0.5]", got, err)
	}
}

func TestFromPanics(t *testing.T) {
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "shape [2 2] holds 4 elements, got 3 values") {
			t.Errorf("panic %q", msg)
		}
	}()
	FromF32("w", []int{2, 2}, []float32{1, 2, 3})
}

func TestFileLookupAndClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := Write(path, everyDType()[:2], nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Tensor("nope")
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing tensor error %v must name the file and the tensor", err)
	}
	if f.Metadata() != nil {
		t.Errorf("Metadata of a file without metadata = %v", f.Metadata())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Tensor("a.f32"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Tensor after Close: %v", err)
	}
}

func TestWriteRefusals(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"duplicate", []Tensor{FromU8("x", []int{1}, []byte{1}), FromU8("x", []int{1}, []byte{2})}, `tensor "x" appears twice`},
		{"reserved", []Tensor{FromU8(metadataKey, []int{1}, []byte{1})}, "reserved for metadata"},
		{"size", []Tensor{{Name: "x", DType: I64, Shape: []int{2}, Data: make([]byte, 8)}}, "8 data bytes, but I64 shape [2] needs 16"},
		{"negative", []Tensor{{Name: "x", DType: U8, Shape: []int{-1}}}, "negative dimension -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".safetensors")
			err := Write(path, tc.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write error %v, want %q", err, tc.want)
			}
			if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
				t.Errorf("refused write left a file: %v", statErr)
			}
		})
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("refused writes left files: %v", entries)
	}
}

func unsafeAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
