package numfmt

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestE4M3DecodeAllCodes(t *testing.T) {
	for c := range 256 {
		b := uint8(c)
		got, want := F32FromE4M3(b), refE4M3(b)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Errorf("code %#02x: got %v, want NaN", b, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Errorf("code %#02x: got %v, want %v", b, got, want)
		}
	}
	if got := F32FromE4M3(0x80); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("code 0x80: got %v, want -0", got)
	}
}

func TestE4M3RoundTripAllCodes(t *testing.T) {
	for c := range 256 {
		b := uint8(c)
		if b&0x7F == 0x7F {
			continue
		}
		if got := E4M3FromF32(F32FromE4M3(b)); got != b {
			t.Errorf("encode(decode(%#02x)) = %#02x", b, got)
		}
	}
}

func TestE4M3EncodeEdges(t *testing.T) {
	ldexp := func(m float64, e int) float32 { return float32(math.Ldexp(m, e)) }
	tests := []struct {
		in   float32
		want uint8
	}{
		{0, 0x00},
		{float32(math.Copysign(0, -1)), 0x80},
		{math.SmallestNonzeroFloat32, 0x00},
		{ldexp(1, -10), 0x00},                    // halfway 0 | 2^-9: even is 0
		{-ldexp(1, -10), 0x80},                   // keeps the sign
		{ldexp(1, -10) * 1.0001, 0x01},           // just above halfway
		{ldexp(1, -9), 0x01},                     // smallest subnormal
		{ldexp(3, -10), 0x02},                    // halfway 1 | 2 steps: even is 2
		{ldexp(5, -10), 0x02},                    // halfway 2 | 3 steps: even is 2
		{ldexp(7, -10), 0x04},                    // halfway 3 | 4 steps: even is 4
		{ldexp(15, -10), 0x08},                   // halfway largest subnormal | 2^-6
		{ldexp(1, -6), 0x08},                     // smallest normal
		{1, 0x38},                                // 2^0: exponent field 7
		{1 + 1.0/16, 0x38},                       // halfway 1 | 1.125: even is 1
		{1 + 3.0/16, 0x3A},                       // halfway 1.125 | 1.25: even is 1.25
		{1 + 15.0/16, 0x40},                      // halfway 1.875 | 2: carries into the exponent
		{-1.5, 0xBC},                             // sign bit
		{416, 0x7D},                              // 1.625·2^8
		{432, 0x7E},                              // halfway 416 | 448: even is 448
		{447, 0x7E},                              // nearest is 448
		{448, 0x7E},                              // max finite
		{464, 0x7E},                              // clamped (torch without clamp: 448 too)
		{465, 0x7E},                              // clamped (unclamped would round to NaN)
		{479.9, 0x7E},                            // clamped
		{480, 0x7E},                              // clamped (unclamped: NaN)
		{1e9, 0x7E},                              // clamped
		{-1e9, 0xFE},                             // clamped, negative
		{float32(math.Inf(1)), 0x7E},             // saturates
		{float32(math.Inf(-1)), 0xFE},            // saturates
		{float32(math.NaN()), 0x7F},              // NaN
		{math.Float32frombits(0xFFC00000), 0xFF}, // negative NaN keeps its sign
		{math.Float32frombits(0x7F800001), 0x7F}, // signalling NaN
	}
	for _, tc := range tests {
		got := E4M3FromF32(tc.in)
		if got != tc.want {
			t.Errorf("E4M3FromF32(%v [%#08x]) = %#02x, want %#02x", tc.in, math.Float32bits(tc.in), got, tc.want)
		}
		if f := float64(tc.in); !math.IsNaN(f) {
			if ref := refEncodeE4M3(f); ref != tc.want {
				t.Errorf("table row %v: reference encoder gives %#02x, table says %#02x", tc.in, ref, tc.want)
			}
		}
	}
}

// TestE4M3EncodeMatchesNearest compares the encoder with the nearest-value
// search over a strided sweep of all non-negative float32 bit patterns up
// to +Inf, and their negatives.
func TestE4M3EncodeMatchesNearest(t *testing.T) {
	const stride = 1009
	bad := 0
	for bits := uint32(0); bits <= 0x7F800000; bits += stride {
		for _, sign := range []uint32{0, 0x80000000} {
			f := math.Float32frombits(bits | sign)
			got, want := E4M3FromF32(f), refEncodeE4M3(float64(f))
			if got != want {
				bad++
				if bad < 10 {
					t.Errorf("E4M3FromF32(%g [%#08x]) = %#02x, want %#02x", f, bits|sign, got, want)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d mismatches", bad)
	}
}

// TestE4M3EncodeDenseAroundGrid checks every float32 within a few ulps of
// each grid point and of each halfway point between neighbours.
func TestE4M3EncodeDenseAroundGrid(t *testing.T) {
	var points []float64
	for i, v := range refE4M3Positive {
		points = append(points, v)
		if i+1 < len(refE4M3Positive) {
			points = append(points, (v+refE4M3Positive[i+1])/2)
		}
	}
	points = append(points, 464, 480)
	for _, p := range points {
		center := math.Float32bits(float32(p))
		for d := -3; d <= 3; d++ {
			if int64(center)+int64(d) < 0 {
				continue
			}
			bits := uint32(int64(center) + int64(d))
			for _, sign := range []uint32{0, 0x80000000} {
				f := math.Float32frombits(bits | sign)
				if got, want := E4M3FromF32(f), refEncodeE4M3(float64(f)); got != want {
					t.Errorf("E4M3FromF32(%g [%#08x]) = %#02x, want %#02x", f, bits|sign, got, want)
				}
			}
		}
	}
}

func TestE4M3EncodeMonotonic(t *testing.T) {
	prev := float32(math.Inf(-1))
	for i := -600000; i <= 600000; i++ {
		x := float32(i) / 1000 // -600 .. 600
		y := F32FromE4M3(E4M3FromF32(x))
		if y < prev {
			t.Fatalf("not monotonic at x=%v: decode(encode(x)) = %v < %v", x, y, prev)
		}
		prev = y
	}
}

func TestPow2Ceil(t *testing.T) {
	tests := []float32{1e-4, 2.2321428e-07, 1, 2, 3, 0.75, 0.5, 1.0000001, 448, 7.6e35, math.Float32frombits(0x00800000)}
	var got, want []float64
	for _, v := range tests {
		got = append(got, float64(pow2Ceil(v)))
		want = append(want, refPow2Ceil(float64(v)))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pow2Ceil mismatch (-want +got):\n%s", diff)
	}
}

func FuzzE4M3(f *testing.F) {
	for _, seed := range []uint32{0, 0x80000000, 0x3A800000, 0x43E00000, 0x43E80000, 0x43F00000, 0x7F800000, 0x7FC00000, 0x3F880000} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		x := math.Float32frombits(bits)
		c := E4M3FromF32(x)
		if math.IsNaN(float64(x)) {
			if c&0x7F != 0x7F {
				t.Fatalf("NaN encoded to %#02x", c)
			}
			return
		}
		if want := refEncodeE4M3(float64(x)); c != want {
			t.Fatalf("E4M3FromF32(%g) = %#02x, want %#02x", x, c, want)
		}
		if c&0x7F == 0x7F {
			t.Fatalf("finite %g encoded to NaN", x)
		}
		if back := E4M3FromF32(F32FromE4M3(c)); back != c {
			t.Fatalf("encode(decode(%#02x)) = %#02x", c, back)
		}
		if math.Signbit(float64(x)) != (c&0x80 != 0) {
			t.Fatalf("sign lost: %g -> %#02x", x, c)
		}
	})
}
