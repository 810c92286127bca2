package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// expWant is ExpShifted by its definition, one math.Exp a value.
func expWant(x []float32, shift, scale float64) []uint64 {
	w := make([]uint64, len(x))
	for i, v := range x {
		w[i] = math.Float64bits(math.Exp((float64(v) - shift) * scale))
	}
	return w
}

func bits64(x []float64) []uint64 {
	b := make([]uint64, len(x))
	for i, v := range x {
		b[i] = math.Float64bits(v)
	}
	return b
}

// TestExpShiftedBits: every implementation's ExpShifted has the bits of
// math.Exp((float64(x) − shift)·scale) over logits spread across math.Exp's
// whole range and its edges (±708 and −746 and just past them, the underflow
// to subnormals and to zero, overflow, zero of both signs, infinities and
// NaN, alone and mixed into groups of eight with ordinary values), for the
// shifts and scales a sampler uses (temperatures from 0.01 to 2) and a
// log-sum-exp's (scale 1), with lengths that leave a tail.
func TestExpShiftedBits(t *testing.T) {
	r := newRand(21)
	const n = 1<<16 + 5
	x := make([]float32, n)
	for i := range x {
		switch i % 8 {
		case 0, 1, 2, 3:
			x[i] = float32(r.NormFloat64() * 8) // logits
		case 4:
			x[i] = float32(r.Float64()*2000 - 1000) // past every edge
		case 5:
			x[i] = math.Float32frombits(r.Uint32()) // any bits: NaN, Inf, huge, subnormal
		default:
			x[i] = float32(r.Float64()*20 - 10)
		}
	}
	edges := []float32{708, -708, math.Nextafter32(708, 709), math.Nextafter32(-708, -709), -746, math.Nextafter32(-746, -747),
		math.Nextafter32(-746, 0), -745.1, -745.2, -740, -720, 709.7, 709.8, 710, 0, float32(math.Copysign(0, -1)),
		math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	for k, e := range edges {
		x[8*k+2] = e // one edge in each of the first groups
		x[n-1-k] = e // and in the tail
	}
	// A run of whole groups of −Inf (a constraint's masked tokens).
	for i := 1024; i < 1024+64; i++ {
		x[i] = float32(math.Inf(-1))
	}
	for _, c := range []struct{ shift, scale float64 }{
		{0, 1}, {12.5, 1}, {12.5, 1 / 0.7}, {3, 100}, {-3, 0.5}, {float64(float32(5.25)), 1 / 0.01}, {0, -1},
	} {
		want := expWant(x, c.shift, c.scale)
		forEachImpl(t, func(t *testing.T) {
			for _, m := range []int{n, n - 5, 8, 13, 0} {
				got := make([]float64, m)
				ExpShifted(got, x[:m], c.shift, c.scale)
				if diff := cmp.Diff(want[:m], bits64(got)); diff != "" {
					t.Fatalf("shift %v, scale %v, %d values: ExpShifted vs math.Exp (-want +%s):\n%s", c.shift, c.scale, m, Impl(), diff)
				}
			}
		})
	}
}

// FuzzExpShifted: any values, shift and scale give math.Exp's bits.
func FuzzExpShifted(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3f, 0, 0, 0x80, 0xff, 0, 0, 0xc0, 0x7f}, 0.0, 1.0)
	f.Add(make([]byte, 4*19), 2.5, 1/0.7)
	f.Add([]byte{0, 0x80, 0x3a, 0xc4, 0, 0, 0x31, 0x44}, 1.0, 1.0)
	f.Fuzz(func(t *testing.T, raw []byte, shift, scale float64) {
		x := make([]float32, len(raw)/4)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		want := expWant(x, shift, scale)
		got := make([]float64, len(x))
		ExpShifted(got, x, shift, scale)
		if diff := cmp.Diff(want, bits64(got)); diff != "" {
			t.Fatalf("ExpShifted(%v, %v, %v) vs math.Exp (-want +got):\n%s", x, shift, scale, diff)
		}
	})
}

// BenchmarkExpShifted times a sampler's exponentials over GLM-5's and
// DeepSeek-V3's vocabularies (logits within ±16, temperature 0.7) on one
// thread, against math.Exp one value at a time.
func BenchmarkExpShifted(b *testing.B) {
	for _, n := range []int{129280, 154880} {
		x := randSlice(newRand(22), n, 16)
		dst := make([]float64, n)
		b.Run(fmt.Sprintf("n=%d/ExpShifted", n), func(b *testing.B) {
			for b.Loop() {
				ExpShifted(dst, x, 16, 1/0.7)
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/float64(n)*1e9, "ns/value")
		})
		b.Run(fmt.Sprintf("n=%d/math.Exp", n), func(b *testing.B) {
			for b.Loop() {
				for i, v := range x {
					dst[i] = math.Exp((float64(v) - 16) * (1 / 0.7))
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/float64(n)*1e9, "ns/value")
		})
	}
}
