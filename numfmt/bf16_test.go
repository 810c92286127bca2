package numfmt

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestBF16FromF32(t *testing.T) {
	one := math.Float32bits(1)
	tests := []struct {
		name string
		in   uint32
		want uint16
	}{
		{"+0", 0, 0x0000},
		{"-0", 0x80000000, 0x8000},
		{"1", one, 0x3F80},
		{"1+2^-8 halfway, even below", one | 0x8000, 0x3F80},
		{"1+3·2^-8 halfway, even above", one | 0x18000, 0x3F82},
		{"just above halfway", one | 0x8001, 0x3F81},
		{"just below halfway", one | 0x7FFF, 0x3F80},
		{"-1.5 exact", 0xBFC00000, 0xBFC0},
		{"max float32 rounds to Inf", 0x7F7FFFFF, 0x7F80},
		{"largest value below the Inf halfway", 0x7F7F7FFF, 0x7F7F},
		{"+Inf", 0x7F800000, 0x7F80},
		{"-Inf", 0xFF800000, 0xFF80},
		{"smallest subnormal rounds to 0", 0x00000001, 0x0000},
		{"subnormal halfway, even above", 0x00018000, 0x0002},
		{"quiet NaN", 0x7FC00000, 0x7FC0},
		{"negative NaN keeps sign", 0xFFC00000, 0xFFC0},
		{"signalling NaN with low payload stays NaN", 0x7F800001, 0x7FC0},
		{"NaN payload in high bits", 0x7FA00000, 0x7FE0},
	}
	for _, tc := range tests {
		f := math.Float32frombits(tc.in)
		if got := BF16FromF32(f); got != tc.want {
			t.Errorf("%s: BF16FromF32(%#08x) = %#04x, want %#04x", tc.name, tc.in, got, tc.want)
		}
		if !math.IsNaN(float64(f)) {
			if ref := refBF16(f); ref != tc.want {
				t.Errorf("%s: reference gives %#04x, table says %#04x", tc.name, ref, tc.want)
			}
		}
	}
}

func TestBF16MatchesNearest(t *testing.T) {
	const stride = 7919
	for bits := uint64(0); bits <= 0xFFFFFFFF; bits += stride {
		f := math.Float32frombits(uint32(bits))
		if math.IsNaN(float64(f)) {
			if h := BF16FromF32(f); h&0x7F80 != 0x7F80 || h&0x7F == 0 {
				t.Fatalf("NaN %#08x -> %#04x is not NaN", bits, h)
			}
			continue
		}
		if got, want := BF16FromF32(f), refBF16(f); got != want {
			t.Fatalf("BF16FromF32(%g [%#08x]) = %#04x, want %#04x", f, bits, got, want)
		}
	}
}

func TestBF16RoundTripAllCodes(t *testing.T) {
	for c := range 1 << 16 {
		h := uint16(c)
		f := F32FromBF16(h)
		got := BF16FromF32(f)
		if math.IsNaN(float64(f)) {
			if got != h|0x0040 {
				t.Errorf("NaN %#04x -> %#04x, want %#04x", h, got, h|0x0040)
			}
			continue
		}
		if got != h {
			t.Errorf("BF16FromF32(F32FromBF16(%#04x)) = %#04x", h, got)
		}
	}
}

func TestBulkBF16(t *testing.T) {
	src := []float32{0, 1, -2.5, 3.14159, 1e-30, float32(math.Inf(1)), 65504.7}
	h := make([]uint16, len(src))
	F32sToBF16(h, src)
	back := make([]float32, len(src)+2) // longer dst is allowed
	BF16ToF32s(back, h)
	var want []float32
	for _, f := range src {
		want = append(want, RoundBF16(f))
	}
	if diff := cmp.Diff(want, back[:len(src)]); diff != "" {
		t.Errorf("bulk round trip (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(src, back[:len(src)], cmpEquateBF16()); diff != "" {
		t.Errorf("bulk round trip beyond bf16 precision (-src +got):\n%s", diff)
	}
	defer func() {
		if recover() == nil {
			t.Error("F32sToBF16 with a short dst did not panic")
		}
	}()
	F32sToBF16(h[:1], src)
}

func FuzzBF16(f *testing.F) {
	for _, seed := range []uint32{0, 0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7FC00000, 0x00018000} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		x := math.Float32frombits(bits)
		h := BF16FromF32(x)
		if math.IsNaN(float64(x)) {
			if !math.IsNaN(float64(F32FromBF16(h))) || (h>>15) != uint16(bits>>31) {
				t.Fatalf("NaN %#08x -> %#04x", bits, h)
			}
			return
		}
		if want := refBF16(x); h != want {
			t.Fatalf("BF16FromF32(%#08x) = %#04x, want %#04x", bits, h, want)
		}
		if back := BF16FromF32(F32FromBF16(h)); back != h {
			t.Fatalf("round trip of %#04x gives %#04x", h, back)
		}
	})
}

// cmpEquateBF16 treats float32 values as equal when they differ by at most
// half a bfloat16 ulp (relative 2^-8 bounds it from above).
func cmpEquateBF16() cmp.Option {
	return cmpopts.EquateApprox(1.0/256, 0)
}
