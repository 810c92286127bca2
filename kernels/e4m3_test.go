package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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

// DecodeE4M3Records gives every record exactly what DecodeE4M3Scaled gives
// its codes and scale, on every implementation, for ranges of a slot list
// with repeated slots, slots at the ends of the store, ranges whose
// prefetch window runs past the list, and record sizes with and without
// padding.
func TestDecodeE4M3Records(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 2))
	for _, tc := range []struct{ recBytes, codes, nrec int }{{132, 128, 300}, {36, 32, 40}, {20, 16, 3}} {
		base := make([]byte, tc.nrec*tc.recBytes)
		for s := range tc.nrec {
			rec := base[s*tc.recBytes:]
			for i := range tc.codes {
				rec[i] = byte(r.IntN(256)) // NaN codes included
			}
			scale := float32(math.Ldexp(1, r.IntN(40)-20))
			if s%7 == 3 {
				scale = r.Float32() * 3 // not a power of two
			}
			binary.LittleEndian.PutUint32(rec[tc.codes:], math.Float32bits(scale))
		}
		slots := make([]int32, 2*tc.nrec)
		for j := range slots {
			slots[j] = int32(r.IntN(tc.nrec))
		}
		slots[0], slots[len(slots)-1] = 0, int32(tc.nrec-1)
		want := make([]float32, len(slots)*tc.codes)
		for j, s := range slots {
			rec := base[int(s)*tc.recBytes:]
			DecodeE4M3Scaled(want[j*tc.codes:(j+1)*tc.codes], rec[:tc.codes], math.Float32frombits(binary.LittleEndian.Uint32(rec[tc.codes:])))
		}
		forEachImpl(t, func(t *testing.T) {
			for _, rg := range [][2]int{{0, len(slots)}, {0, 1}, {5, 5}, {len(slots) - 3, len(slots)}, {1, len(slots) / 2}} {
				j0, j1 := rg[0], rg[1]
				got := make([]float32, (j1-j0)*tc.codes)
				DecodeE4M3Records(got, base, tc.recBytes, tc.codes, slots, j0, j1)
				if d := cmp.Diff(bitsOf(want[j0*tc.codes:j1*tc.codes]), bitsOf(got)); d != "" {
					t.Errorf("%d-byte records, slots[%d:%d] (-DecodeE4M3Scaled +DecodeE4M3Records):\n%s", tc.recBytes, j0, j1, d)
				}
			}
		})
	}
}

// A slot outside the store, or a record too short for its codes and scale,
// is refused with the sizes, never read.
func TestDecodeE4M3RecordsRefusals(t *testing.T) {
	base := make([]byte, 4*132)
	dst := make([]float32, 4*128)
	for _, tc := range []struct {
		name  string
		slots []int32
		rec   int
		want  string
	}{
		{"slot past the store", []int32{1, 4}, 132, "slot 4 (entry 1) is outside a store of 4 records"},
		{"negative slot", []int32{-1}, 132, "slot -1 (entry 0)"},
		{"no room for the scale", []int32{0}, 130, "records of 130 bytes holding 128 codes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, tc.want) {
					t.Errorf("panic %q, want it to contain %q", msg, tc.want)
				}
			}()
			DecodeE4M3Records(dst, base, tc.rec, 128, tc.slots, 0, len(tc.slots))
		})
	}
}
