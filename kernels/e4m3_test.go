package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cpmla/cpmla/numfmt"
)

// Every code, at scales across the range (powers of two as fp8_ds_mla uses,
// and arbitrary ones), on every implementation, equals the scalar definition
// bit for bit (NaN codes give NaN).
func TestDecodeE4M3ScaledMatchesDefinition(t *testing.T) {
	src := make([]byte, 256+13) // all codes plus a tail that is not a multiple of 16
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]float32, len(src))
	forEachImpl(t, func(t *testing.T) {
		impl := Impl()
		for _, scale := range []float32{1, 0.5, float32(math.Ldexp(1, -13)), float32(math.Ldexp(1, 20)), 0.3, 3.7e-3} {
			DecodeE4M3Scaled(dst, src, scale)
			for i, b := range src {
				want := numfmt.F32FromE4M3(b) * scale
				got := dst[i]
				if math.IsNaN(float64(want)) {
					if !math.IsNaN(float64(got)) {
						t.Fatalf("%s scale %g code %#02x: got %v, want NaN", impl, scale, b, got)
					}
					continue
				}
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%s scale %g code %#02x: got %v (%#x), want %v (%#x)", impl, scale, b, got, math.Float32bits(got), want, math.Float32bits(want))
				}
			}
		}
	})
}

func TestDecodeE4M3ScaledAllocatesNothing(t *testing.T) {
	src := make([]byte, 512)
	dst := make([]float32, 512)
	if n := testing.AllocsPerRun(20, func() { DecodeE4M3Scaled(dst, src, 2) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func BenchmarkDecodeE4M3Scaled(b *testing.B) {
	src := make([]byte, 512)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.IntN(256))
	}
	dst := make([]float32, 512)
	for b.Loop() {
		DecodeE4M3Scaled(dst, src, 0.25)
	}
	b.ReportMetric(float64(len(src)*5)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// TestWidenBF16MatchesDefinition: every bf16 code, with a tail that is not a
// multiple of 16, widens to numfmt.F32FromBF16 bit for bit on every
// implementation.
func TestWidenBF16MatchesDefinition(t *testing.T) {
	const n = 1<<16 + 5
	src := make([]byte, 2*n)
	for i := range n {
		c := uint16(i)
		src[2*i], src[2*i+1] = byte(c), byte(c>>8)
	}
	dst := make([]float32, n)
	forEachImpl(t, func(t *testing.T) {
		WidenBF16(dst, src)
		for i := range n {
			c := uint16(src[2*i]) | uint16(src[2*i+1])<<8
			if got, want := math.Float32bits(dst[i]), math.Float32bits(numfmt.F32FromBF16(c)); got != want {
				t.Fatalf("%s code %#04x: got %#08x, want %#08x", Impl(), c, got, want)
			}
		}
	})
}
