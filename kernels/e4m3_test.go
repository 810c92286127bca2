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
// arbitrary ones, and the negative and zero scales a weight block may
// carry), on every implementation, equals the scalar definition
// bit for bit (NaN codes give NaN).
func TestDecodeE4M3ScaledMatchesDefinition(t *testing.T) {
	src := make([]byte, 256+13) // all codes plus a tail that is not a multiple of 16
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]float32, len(src))
	forEachImpl(t, func(t *testing.T) {
		impl := Impl()
		for _, scale := range []float32{1, 0.5, float32(math.Ldexp(1, -13)), float32(math.Ldexp(1, 20)), 0.3, 3.7e-3, -0.75, -2, 0, float32(math.Copysign(0, -1))} {
			DecodeE4M3Scaled(dst, src, scale)
			for i, b := range src {
				// A NaN code's product is the quiet NaN of its sign, as the
				// definition's multiply leaves it: bits compared too.
				want := numfmt.F32FromE4M3(b) * scale
				got := dst[i]
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%s scale %g code %#02x: got %v (%#x), want %v (%#x)", impl, scale, b, got, math.Float32bits(got), want, math.Float32bits(want))
				}
			}
		}
	})
}

func TestDecodersAllocateNothing(t *testing.T) {
	src := make([]byte, 656*4)
	dst := make([]float32, 576*4)
	slots := []int32{3, 0, 2, 1}
	lt := RecordLayout{656, 4, 128, 64}
	forEachImpl(t, func(t *testing.T) {
		if n := testing.AllocsPerRun(20, func() {
			DecodeE4M3Scaled(dst[:512], src[:512], 2)
			WidenBF16(dst[:64], src[:128])
			DecodeRecords(dst, src, lt, slots, 0, 4, 2)
		}); n != 0 {
			t.Errorf("%v allocations", n)
		}
	})
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

// DecodeRecords gives every record exactly what DecodeE4M3Scaled and
// WidenBF16 give its tiles and bf16 values, on every implementation, for
// the indexer-key and fp8_ds_mla layouts and small ones, codes with and
// without NaN codes, scales of every kind (powers of two, others, at and
// past 2^120, infinite, NaN, denormal, signed zero), ranges of a slot list
// with repeated slots and slots at the ends of the store, prefetch windows
// running past the list, and no prefetching.
func TestDecodeRecords(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 2))
	for _, lt := range []RecordLayout{{132, 1, 128, 0}, {656, 4, 128, 64}, {40, 2, 16, 0}, {56, 1, 16, 16}, {70, 1, 16, 16}} {
		const nrec = 90
		base := make([]byte, nrec*lt.Bytes)
		codes := lt.Tiles * lt.TileCodes
		for s := range nrec {
			rec := base[s*lt.Bytes : (s+1)*lt.Bytes]
			for i := range rec {
				rec[i] = byte(r.IntN(256)) // NaN codes and bf16 NaNs included
				if s%3 == 0 && i < codes && rec[i]&0x7F == 0x7F {
					rec[i]-- // a third of the records hold no NaN code
				}
			}
			for t := range lt.Tiles {
				scale := float32(math.Ldexp(1, r.IntN(40)-20))
				switch {
				case s%7 == 3:
					scale = r.Float32() * 3 // not a power of two
				case s%5 == 1:
					// magnitudes at and past 2^120, where scale·2^8 is not
					// exact, and the other special scales
					scale = []float32{float32(math.Ldexp(1, 120)), float32(-math.Ldexp(1.5, 121)), math.MaxFloat32,
						float32(math.Inf(1)), float32(math.NaN()), float32(math.Ldexp(1, -140)), float32(math.Copysign(0, -1)),
						float32(math.Ldexp(0x7FFFFF, -143))}[(s/5)%8]
				}
				binary.LittleEndian.PutUint32(rec[codes+4*t:], math.Float32bits(scale))
			}
		}
		slots := make([]int32, 2*nrec)
		for j := range slots {
			slots[j] = int32(r.IntN(nrec))
		}
		slots[0], slots[len(slots)-1] = 0, nrec-1
		v := lt.Values()
		want := make([]float32, len(slots)*v)
		for j, s := range slots {
			rec := base[int(s)*lt.Bytes:]
			out := want[j*v : (j+1)*v]
			for t := range lt.Tiles {
				DecodeE4M3Scaled(out[t*lt.TileCodes:(t+1)*lt.TileCodes], rec[t*lt.TileCodes:(t+1)*lt.TileCodes],
					math.Float32frombits(binary.LittleEndian.Uint32(rec[codes+4*t:])))
			}
			WidenBF16(out[codes:], rec[codes+4*lt.Tiles:codes+4*lt.Tiles+2*lt.Rope])
		}
		forEachImpl(t, func(t *testing.T) {
			for _, rg := range [][3]int{{0, len(slots), 16}, {0, 1, 8}, {5, 5, 8}, {len(slots) - 3, len(slots), 16}, {1, len(slots) / 2, 0}} {
				j0, j1, ahead := rg[0], rg[1], rg[2]
				got := make([]float32, (j1-j0)*v)
				DecodeRecords(got, base, lt, slots, j0, j1, ahead)
				if d := cmp.Diff(bitsOf(want[j0*v:j1*v]), bitsOf(got)); d != "" {
					t.Errorf("%+v, slots[%d:%d] (-per record +DecodeRecords):\n%s", lt, j0, j1, d)
				}
			}
		})
	}
}

// A slot outside the store, or a layout too large for its record, is
// refused with the sizes, never read.
func TestDecodeRecordsRefusals(t *testing.T) {
	base := make([]byte, 4*132)
	dst := make([]float32, 4*128)
	key := RecordLayout{132, 1, 128, 0}
	for _, tc := range []struct {
		name  string
		slots []int32
		lt    RecordLayout
		want  string
	}{
		{"slot past the store", []int32{1, 4}, key, "slot 4 (entry 1) is outside a store of 4 records"},
		{"negative slot", []int32{-1}, key, "slot -1 (entry 0)"},
		{"no room for the scale", []int32{0}, RecordLayout{130, 1, 128, 0}, "130-byte records holding 1 tiles of 128 codes"},
		{"no room for the bf16 values", []int32{0}, RecordLayout{120, 1, 112, 4}, "120-byte records holding 1 tiles of 112 codes, their scales and 4 bf16 values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, tc.want) {
					t.Errorf("panic %q, want it to contain %q", msg, tc.want)
				}
			}()
			DecodeRecords(dst, base, tc.lt, tc.slots, 0, len(tc.slots), 16)
		})
	}
}

// BenchmarkDecodeRecords decodes 2048 records chosen at random from a store
// larger than L2 as the cache's callers do: fp8_ds_mla rows a 128-row
// attention block per call and fp8 indexer keys a 1024-key gather chunk per
// call, into one reused buffer, with their prefetch distances; ns/record is
// the time per record. codes=quantized holds what the cache writes: normal
// values quantized a tile at a time with the scale amax/448, so that few
// codes are subnormal; codes=uniform holds every code but the NaN codes
// equally often, 5.5 % of them subnormal. impl= is the implementation
// (SetImpl), every one this machine runs. subnormal-% is the share of the
// store's codes that are subnormal.
func BenchmarkDecodeRecords(b *testing.B) {
	for _, bc := range []struct {
		name       string
		lt         RecordLayout
		ahead, blk int
	}{{"fp8_ds_mla", RecordLayout{656, 4, 128, 64}, 8, 128}, {"indexer_key", RecordLayout{132, 1, 128, 0}, 16, 1024}} {
		for _, codes := range []string{"quantized", "uniform"} {
			b.Run(bc.name+"/codes="+codes, func(b *testing.B) {
				const nrec, n = 16384, 2048
				r := rand.New(rand.NewPCG(5, 6))
				base := make([]byte, nrec*bc.lt.Bytes)
				vals := make([]float64, bc.lt.TileCodes)
				for s := range nrec {
					rec := base[s*bc.lt.Bytes:]
					for t := range bc.lt.Tiles {
						scale := float32(0.25)
						tile := rec[t*bc.lt.TileCodes : (t+1)*bc.lt.TileCodes]
						if codes == "uniform" {
							for i := range tile {
								tile[i] = byte(r.IntN(0x7f))
							}
						} else {
							amax := 0.0
							for i := range vals {
								vals[i] = r.NormFloat64()
								amax = max(amax, math.Abs(vals[i]))
							}
							scale = float32(amax / 448)
							for i, v := range vals {
								tile[i] = numfmt.E4M3FromF32(float32(v) / scale)
							}
						}
						binary.LittleEndian.PutUint32(rec[bc.lt.Tiles*bc.lt.TileCodes+4*t:], math.Float32bits(scale))
					}
				}
				var codeBytes []uint8
				for s := range nrec {
					codeBytes = append(codeBytes, base[s*bc.lt.Bytes:s*bc.lt.Bytes+bc.lt.Tiles*bc.lt.TileCodes]...)
				}
				sub := subnormalShare(codeBytes, 1)
				slots := make([]int32, n)
				for j := range slots {
					slots[j] = int32(r.IntN(nrec))
				}
				dst := make([]float32, bc.blk*bc.lt.Values())
				for _, impl := range impls() {
					b.Run("impl="+impl, func(b *testing.B) {
						prev, err := SetImpl(impl)
						if err != nil {
							b.Fatal(err)
						}
						defer SetImpl(prev)
						for b.Loop() {
							for j0 := 0; j0 < n; j0 += bc.blk {
								DecodeRecords(dst, base, bc.lt, slots, j0, j0+bc.blk, bc.ahead)
							}
						}
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
						b.ReportMetric(100*sub, "subnormal-%")
					})
				}
			})
		}
	}
}

// subnormalShare is the share of the groups of group consecutive codes (the
// last one may be short) that hold a subnormal e4m3 code (exponent bits 0,
// mantissa bits not).
func subnormalShare(codes []uint8, group int) float64 {
	if len(codes) == 0 {
		return 0
	}
	held, groups := 0, 0
	for i := 0; i < len(codes); i += group {
		groups++
		for _, c := range codes[i:min(i+group, len(codes))] {
			if c&0x78 == 0 && c&0x07 != 0 {
				held++
				break
			}
		}
	}
	return float64(held) / float64(groups)
}
