package numfmt

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const rowDim = DSMLALatentDim + DSMLARopeDim

func randomRow(r *rand.Rand, n int, amp float64) []float32 {
	row := make([]float32, n)
	for i := range row {
		row[i] = float32(r.NormFloat64() * amp)
	}
	return row
}

// refTileScale is the fp8_ds_mla tile scale from its definition, in float64.
func refTileScale(tile []float32) float64 {
	var amax float64
	for _, x := range tile {
		if a := math.Abs(float64(x)); a > amax && !math.IsInf(a, 0) {
			amax = a
		}
	}
	return refPow2Ceil(math.Max(amax/448, 1e-4))
}

// checkQuantBound checks |x − q| ≤ half an e4m3 ulp (at x/s) × s for every
// finite x of a tile quantised with scale s.
func checkQuantBound(t *testing.T, what string, x, q []float32, s float64) {
	t.Helper()
	for i := range x {
		xi := float64(x[i])
		if math.IsNaN(xi) || math.IsInf(xi, 0) {
			continue
		}
		// Values clamp to the largest e4m3 value whose product with s is
		// finite (448, or 240 for the scale 2^120), then round.
		lim := 448.0
		if lim*s > math.MaxFloat32 {
			lim = 240
		}
		y := math.Min(math.Abs(xi)/s, lim)
		bound := (math.Abs(xi)/s-y)*s + e4m3HalfULP(y)*s
		if err := math.Abs(xi - float64(q[i])); err > bound {
			t.Errorf("%s[%d]: |%g − %g| = %g > %g (scale %g)", what, i, xi, q[i], err, bound, s)
		}
	}
}

func dsmlaCases() map[string][]float32 {
	r := rand.New(rand.NewPCG(1, 2))
	cases := map[string][]float32{}
	cases["zeros"] = make([]float32, rowDim)

	exact := make([]float32, rowDim)
	for j := range 4 {
		k := []int{-13, 0, 5, 20}[j]
		tile := exact[j*DSMLATile : (j+1)*DSMLATile]
		for i := range tile {
			tile[i] = float32(math.Ldexp(float64(i%9)-4, k)) // multiples of 2^k: exact codes
		}
		tile[j*7] = float32(math.Ldexp(448, k)) // tile max exactly 448·2^k
	}
	copy(exact[DSMLALatentDim:], randomRow(r, DSMLARopeDim, 1))
	cases["tile max 448·2^k"] = exact

	outlier := randomRow(r, rowDim, 0.05)
	for j := range 4 {
		outlier[j*DSMLATile+11*j+3] = float32(1000 * (j + 1))
	}
	cases["one outlier per tile"] = outlier

	tiny := make([]float32, rowDim)
	for i := range tiny {
		tiny[i] = 1e-6 * float32(1+i%3)
	}
	cases["tiny 1e-6"] = tiny

	for i, amp := range []float64{1, 1e-3, 300, 1e6} {
		cases[fmt.Sprintf("random %d amp %g", i, amp)] = randomRow(r, rowDim, amp)
	}
	special := randomRow(r, rowDim, 2)
	special[5] = float32(math.NaN())
	special[130] = float32(math.Inf(1))
	special[260] = float32(math.Inf(-1))
	special[400] = float32(math.Copysign(0, -1))
	special[520] = float32(math.NaN())
	cases["nan inf -0"] = special
	return cases
}

func sameBits(a, b []float32) string {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(math.IsNaN(float64(a[i])) && math.IsNaN(float64(b[i]))) {
			return fmt.Sprintf("first difference at %d: %g vs %g", i, a[i], b[i])
		}
	}
	return ""
}

func TestDSMLARecord(t *testing.T) {
	for name, row := range dsmlaCases() {
		t.Run(name, func(t *testing.T) {
			in := append([]float32(nil), row...)
			rec := make([]byte, DSMLARecordBytes)
			EncodeDSMLA(rec, row)
			if diff := cmp.Diff(in, row, cmp.Comparer(bitEqual)); diff != "" {
				t.Fatalf("EncodeDSMLA modified its input:\n%s", diff)
			}
			got := make([]float32, rowDim)
			DecodeDSMLA(got, rec)

			for j := range 4 {
				tile := row[j*DSMLATile : (j+1)*DSMLATile]
				s := math.Float32frombits(binary.LittleEndian.Uint32(rec[512+4*j:]))
				if want := refTileScale(tile); float64(s) != want {
					t.Errorf("tile %d: scale %g, want %g", j, s, want)
				}
				checkQuantBound(t, "latent", tile, got[j*DSMLATile:(j+1)*DSMLATile], float64(s))
				for i, c := range rec[j*DSMLATile : (j+1)*DSMLATile] {
					x := tile[i]
					if want := refEncodeE4M3(float64(x) / float64(s)); c != want {
						t.Errorf("tile %d dim %d: code %#02x, want %#02x", j, i, c, want)
					}
				}
			}
			for i := range DSMLARopeDim {
				h := binary.LittleEndian.Uint16(rec[528+2*i:])
				if want := BF16FromF32(row[512+i]); h != want {
					t.Errorf("rope %d: bytes %#04x, want %#04x", i, h, want)
				}
			}

			rounded := append([]float32(nil), row...)
			RoundDSMLA(rounded)
			if d := sameBits(got, rounded); d != "" {
				t.Errorf("RoundDSMLA differs from decode(encode): %s", d)
			}
			again := append([]float32(nil), rounded...)
			RoundDSMLA(again)
			if d := sameBits(rounded, again); d != "" {
				t.Errorf("RoundDSMLA is not idempotent: %s", d)
			}
		})
	}
}

func bitEqual(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

func TestDSMLAKnownValues(t *testing.T) {
	// All-zero row: scale floor 1e-4 → 2^-13, every code 0.
	rec := make([]byte, DSMLARecordBytes)
	EncodeDSMLA(rec, make([]float32, rowDim))
	for j := range 4 {
		if s := math.Float32frombits(binary.LittleEndian.Uint32(rec[512+4*j:])); s != float32(math.Ldexp(1, -13)) {
			t.Errorf("zero tile %d: scale %g, want 2^-13", j, s)
		}
	}
	// 448·2^k decodes exactly with code 0x7E and scale 2^k.
	row := make([]float32, rowDim)
	row[0] = float32(math.Ldexp(448, 3))
	row[128] = -448
	EncodeDSMLA(rec, row)
	if rec[0] != 0x7E || rec[128] != 0xFE {
		t.Errorf("max codes %#02x %#02x, want 0x7e 0xfe", rec[0], rec[128])
	}
	got := make([]float32, rowDim)
	DecodeDSMLA(got, rec)
	if got[0] != row[0] || got[128] != row[128] {
		t.Errorf("decoded maxima %v %v, want %v %v", got[0], got[128], row[0], row[128])
	}
	// Near math.MaxFloat32 the scale is 2^120 and values clamp to 240·2^120
	// so that decoding stays finite (256·2^120 = 2^128 would be +Inf).
	row = make([]float32, rowDim)
	row[0] = math.MaxFloat32
	row[1] = -math.MaxFloat32
	row[2] = 1
	RoundDSMLA(row)
	if want := float32(math.Ldexp(240, 120)); row[0] != want || row[1] != -want || row[2] != 0 {
		t.Errorf("RoundDSMLA near MaxFloat32 = %g %g %g, want %g %g 0", row[0], row[1], row[2], want, -want)
	}
	// Tiny values: 1e-6 / 2^-13 = 0.008192 = 4.19 · 2^-9 → code 4 → 4·2^-22.
	row = make([]float32, rowDim)
	row[0] = 1e-6
	RoundDSMLA(row)
	if want := float32(math.Ldexp(4, -22)); row[0] != want {
		t.Errorf("RoundDSMLA(1e-6) = %g, want %g", row[0], want)
	}
}

func TestIndexerKeyRecord(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := map[string][]float32{
		"zeros":   make([]float32, IndexerKeyDim),
		"random":  randomRow(r, IndexerKeyDim, 1),
		"large":   randomRow(r, IndexerKeyDim, 1e5),
		"tiny":    randomRow(r, IndexerKeyDim, 1e-7),
		"outlier": randomRow(r, IndexerKeyDim, 0.01),
	}
	cases["outlier"][17] = -250
	exact := make([]float32, IndexerKeyDim)
	exact[3] = 448 * 4
	exact[4] = 2
	cases["max 448·4"] = exact

	for name, k := range cases {
		t.Run(name, func(t *testing.T) {
			rec := make([]byte, IndexerKeyBytes)
			EncodeIndexerKey(rec, k)
			s := math.Float32frombits(binary.LittleEndian.Uint32(rec[128:]))
			var amax float64
			for _, x := range k {
				amax = math.Max(amax, math.Abs(float64(x)))
			}
			if want := refPow2Ceil(math.Max(amax, 1e-4) / 448); float64(s) != want {
				t.Errorf("scale %g, want %g", s, want)
			}
			got := make([]float32, IndexerKeyDim)
			DecodeIndexerKey(got, rec)
			checkQuantBound(t, "key", k, got, float64(s))
			rounded := append([]float32(nil), k...)
			RoundIndexerKey(rounded)
			if d := sameBits(got, rounded); d != "" {
				t.Errorf("RoundIndexerKey differs from decode(encode): %s", d)
			}
		})
	}
	if got := IndexerKeyScale(0); got != float32(math.Ldexp(1, -22)) {
		t.Errorf("IndexerKeyScale(0) = %g, want 2^-22 (1e-4/448 rounded up)", got)
	}
	if got := IndexerKeyScale(448 * 4); got != 4 {
		t.Errorf("IndexerKeyScale(1792) = %g, want 4", got)
	}
}

func TestRecordLengthPanics(t *testing.T) {
	tests := []struct {
		name string
		call func()
		want string
	}{
		{"short record", func() { EncodeDSMLA(make([]byte, 655), make([]float32, 576)) }, "656"},
		{"short row", func() { EncodeDSMLA(make([]byte, 656), make([]float32, 575)) }, "576"},
		{"short decode dst", func() { DecodeDSMLA(make([]float32, 512), make([]byte, 656)) }, "576"},
		{"short round", func() { RoundDSMLA(make([]float32, 100)) }, "576"},
		{"short key record", func() { EncodeIndexerKey(make([]byte, 128), make([]float32, 128)) }, "132"},
		{"short key", func() { DecodeIndexerKey(make([]float32, 64), make([]byte, 132)) }, "128"},
		{"short bf16 dst", func() { BF16ToF32s(make([]float32, 1), make([]uint16, 2)) }, "need at least 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, tc.want) {
					t.Errorf("panic %q, want it to mention %q", msg, tc.want)
				}
			}()
			tc.call()
		})
	}
}

func floatsFromBytes(data []byte, n int) []float32 {
	out := make([]float32, n)
	if len(data) == 0 {
		return out
	}
	for i := range out {
		var w [4]byte
		for j := range w {
			w[j] = data[(4*i+j)%len(data)]
		}
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(w[:]))
	}
	return out
}

func FuzzDSMLARoundTrip(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3F})
	f.Add([]byte{0xFF, 0xFF, 0x7F, 0x7F, 1, 0, 0, 0})
	f.Add([]byte{0, 0, 0xC0, 0x7F, 0, 0, 0x80, 0xFF, 0x12, 0x34})
	f.Fuzz(func(t *testing.T, data []byte) {
		row := floatsFromBytes(data, rowDim)
		rec := make([]byte, DSMLARecordBytes)
		EncodeDSMLA(rec, row)
		got := make([]float32, rowDim)
		DecodeDSMLA(got, rec)
		for j := range 4 {
			s := math.Float32frombits(binary.LittleEndian.Uint32(rec[512+4*j:]))
			if s <= 0 || math.IsInf(float64(s), 0) || math.Float32bits(s)&0x7FFFFF != 0 {
				t.Fatalf("tile %d: scale %g is not a finite power of two", j, s)
			}
			checkQuantBound(t, "latent", row[j*DSMLATile:(j+1)*DSMLATile], got[j*DSMLATile:(j+1)*DSMLATile], float64(s))
		}
		for i, x := range row {
			if math.IsNaN(float64(x)) != math.IsNaN(float64(got[i])) {
				t.Fatalf("dim %d: NaN-ness changed: %g -> %g", i, x, got[i])
			}
		}
		rounded := append([]float32(nil), row...)
		RoundDSMLA(rounded)
		if d := sameBits(got, rounded); d != "" {
			t.Fatalf("RoundDSMLA differs from decode(encode): %s", d)
		}
		again := append([]float32(nil), rounded...)
		RoundDSMLA(again)
		if d := sameBits(rounded, again); d != "" {
			t.Fatalf("RoundDSMLA not idempotent: %s", d)
		}
	})
}

func FuzzIndexerKeyRoundTrip(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3F})
	f.Add([]byte{0xFF, 0xFF, 0x7F, 0x7F, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		k := floatsFromBytes(data, IndexerKeyDim)
		rec := make([]byte, IndexerKeyBytes)
		EncodeIndexerKey(rec, k)
		got := make([]float32, IndexerKeyDim)
		DecodeIndexerKey(got, rec)
		s := math.Float32frombits(binary.LittleEndian.Uint32(rec[IndexerKeyDim:]))
		checkQuantBound(t, "key", k, got, float64(s))
		rounded := append([]float32(nil), k...)
		RoundIndexerKey(rounded)
		if d := sameBits(got, rounded); d != "" {
			t.Fatalf("RoundIndexerKey differs from decode(encode): %s", d)
		}
		again := append([]float32(nil), rounded...)
		RoundIndexerKey(again)
		if d := sameBits(rounded, again); d != "" {
			t.Fatalf("RoundIndexerKey not idempotent: %s", d)
		}
	})
}
