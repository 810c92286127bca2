package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// useAMX switches to avx512-amx for the test, or skips it where this
// machine (or its kernel) has no AMX tiles.
func useAMX(t *testing.T) {
	t.Helper()
	if err := enableAMX(); err != nil {
		t.Skip(err)
	}
	prev, err := SetImpl("avx512-amx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { SetImpl(prev) })
}

// TestAMXProducts: AMX products of interleaved and row-major matrices
// (odd shapes padded), for every slab size and prompts of several slabs and
// chunks, blocks of groups and blocks of columns, agree with the float64
// oracle, and have the same bits row by row
// (MatVecT), on two threads and in either layout.
func TestAMXProducts(t *testing.T) {
	useAMX(t)
	defer SetThreads(SetThreads(1))
	for _, sh := range []struct{ rows, cols int }{{8, 32}, {24, 96}, {40, 544}, {13, 100}, {5, 7}, {17, 300}, {328, 64}, {264, 2112}, {20, 2500}} {
		r := newRand(uint64(300 + sh.rows))
		w := &Matrix{Rows: sh.rows, Cols: sh.cols, BF16: make([]uint16, sh.rows*sh.cols)}
		for i, v := range randSlice(r, sh.rows*sh.cols, 1) {
			w.BF16[i] = toBF16(v)
		}
		ilv := *w
		interleaved := ilv.InterleaveBF16()
		for _, n := range []int{1, 2, 5, 6, 8, 9, 16, 70, 140} {
			name := fmt.Sprintf("[%d, %d] n=%d", sh.rows, sh.cols, n)
			x := randSlice(r, n*sh.cols, 1)
			SetThreads(1)
			want := make([]float32, n*sh.rows)
			MatMulT(want, x, n, w)
			checkOracle(t, name, want, x, n, w.Dequantize())
			got := make([]float32, n*sh.rows)
			for i := range n {
				MatVecT(got[i*sh.rows:(i+1)*sh.rows], x[i*sh.cols:(i+1)*sh.cols], w)
			}
			if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
				t.Fatalf("%s: MatVecT row by row differs (-batch +alone):\n%s", name, d)
			}
			SetThreads(2)
			MatMulT(got, x, n, w)
			if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
				t.Fatalf("%s: two threads differ (-one +two):\n%s", name, d)
			}
			if interleaved {
				MatMulT(got, x, n, &ilv)
				if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
					t.Fatalf("%s: interleaved differs (-row-major +interleaved):\n%s", name, d)
				}
			}
		}
	}
}

// TestBF16Pieces: the three pieces add up to x exactly, and an infinite or
// NaN x is its hi piece alone.
func TestBF16Pieces(t *testing.T) {
	r := newRand(310)
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -1, math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32 * (1 << 23), 1 + 1.0/(1<<23), 3.1415927, -2.7182817e-20}
	for range 1000 {
		vals = append(vals, randSlice(r, 1, float32(math.Pow(10, float64(r.IntN(60)-30))))...)
	}
	for _, v := range vals {
		hi, mid, lo := bf16Pieces(v)
		sum := float64(bf16ToF32(hi)) + float64(bf16ToF32(mid)) + float64(bf16ToF32(lo))
		if sum != float64(v) {
			t.Fatalf("pieces of %g (%#x, %#x, %#x) add up to %g", v, hi, mid, lo, sum)
		}
	}
	for _, c := range []struct {
		x  float32
		hi uint16
	}{
		{float32(math.Inf(1)), 0x7f80},
		{float32(math.Inf(-1)), 0xff80},
		{math.Float32frombits(0x7f800001), 0x7fc0}, // a NaN whose payload bf16 would drop
		{math.Float32frombits(0xffc00000), 0xffc0},
	} {
		hi, mid, lo := bf16Pieces(c.x)
		if hi != c.hi || mid != 0 || lo != 0 {
			t.Errorf("pieces of %#x = (%#x, %#x, %#x), want (%#x, 0, 0)", math.Float32bits(c.x), hi, mid, lo, c.hi)
		}
	}
}

// TestAMXNonFinite: an infinite or NaN activation, or a NaN weight, gives
// the outputs the reference gives them as infinite or NaN.
func TestAMXNonFinite(t *testing.T) {
	useAMX(t)
	const rows, cols, n = 16, 64, 3
	r := newRand(311)
	w := &Matrix{Rows: rows, Cols: cols, BF16: make([]uint16, rows*cols)}
	for i, v := range randSlice(r, rows*cols, 1) {
		w.BF16[i] = toBF16(v)
	}
	w.BF16[5*cols+40] = 0x7fc0
	x := randSlice(r, n*cols, 1)
	x[0*cols+3] = float32(math.Inf(1))
	x[1*cols+50] = float32(math.NaN())
	got := make([]float32, n*rows)
	MatMulT(got, x, n, w)
	want := make([]float32, n*rows)
	matMulTRef(want, x, n, w)
	for i := range want {
		g, wv := float64(got[i]), float64(want[i])
		if math.IsNaN(g) != math.IsNaN(wv) || math.IsInf(g, 1) != math.IsInf(wv, 1) || math.IsInf(g, -1) != math.IsInf(wv, -1) {
			t.Errorf("output %d = %v, reference %v", i, g, wv)
		}
	}
}

// TestAMXPiecesAssembly: amxPiecesRowAVX512 writes the words the Go
// loop writes, for every slab size, with infinities, NaNs (one whose
// payload sits in the low bits), zeros of both signs and denormals among
// the values, and a padded last chunk.
func TestAMXPiecesAssembly(t *testing.T) {
	if !supported(levelAVX512) {
		t.Skip("no AVX-512")
	}
	r := newRand(312)
	for _, in := range []int{32, 96, 100} {
		for n := 1; n <= amxSlabRows; n++ {
			x := randSlice(r, n*in, 3)
			specials := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
				math.Float32frombits(0xff800001), 0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -1e-40}
			for i, v := range specials {
				x[(i*37)%len(x)] = v
			}
			got := make([]uint16, amxPieceWords(n, in))
			want := make([]uint16, amxPieceWords(n, in))
			for i := range got {
				got[i], want[i] = 0xdead, 0xbeef
			}
			prev, _ := SetImpl("avx512")
			amxPieces(got, x, in, n, in)
			SetImpl("ref")
			amxPieces(want, x, in, n, in)
			SetImpl(prev)
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("in=%d n=%d (-Go +assembly):\n%s", in, n, d)
			}
		}
	}
}

// exactGatherer gathers keys in place and vouches that they are exact in
// bf16 (BF16KeyGatherer).
type exactGatherer struct{ keys [][]float32 }

func (g *exactGatherer) GatherKeys(dst [][]float32, _ []float32, j0, j1 int) {
	copy(dst, g.keys[j0:j1])
}

func (g *exactGatherer) KeysExactInBF16() bool { return true }

// TestScoreGatheredKeysExactBF16: keys exact in bf16 (and NaN values), which
// avx512-amx scores on AMX tiles, agree with the float64 formula under every
// implementation; a key's score has the same bits alone, in any gather
// space, on several threads and for every query of a block; the other
// implementations give ScoreKeys's bits.
func TestScoreGatheredKeysExactBF16(t *testing.T) {
	for _, tc := range []struct{ heads, dim, n int }{{32, 128, 301}, {64, 64, 70}, {20, 256, 40}, {32, 96, 33}} {
		r := newRand(uint64(330 + tc.dim))
		keys := make([][]float32, tc.n)
		for j := range keys {
			keys[j] = randSlice(r, tc.dim, 1)
			for c, v := range keys[j] {
				keys[j][c] = math.Float32frombits(math.Float32bits(v) &^ 0xffff)
			}
		}
		keys[3][5] = float32(math.NaN()) // a NaN value: that head's dot products are NaN, which ReLU drops
		const nq = 3
		q := randSlice(r, nq*tc.heads*tc.dim, 1)
		w := randSlice(r, nq*tc.heads, 1)
		ends := []int32{int32(tc.n), 17, int32(tc.n - 1)}
		want := make([]float64, nq*tc.n)
		for i := range nq {
			copy(want[i*tc.n:], reluScores64(q[i*tc.heads*tc.dim:(i+1)*tc.heads*tc.dim], w[i*tc.heads:(i+1)*tc.heads], tc.heads, keys[:ends[i]]))
		}
		name := fmt.Sprintf("heads=%d dim=%d keys=%d", tc.heads, tc.dim, tc.n)
		forEachImpl(t, func(t *testing.T) {
			defer SetThreads(SetThreads(1))
			qs := make([]ScoreQuery, nq)
			byKeys := make([]float32, nq*tc.n)
			for i := range qs {
				qs[i].Prepare(q[i*tc.heads*tc.dim:(i+1)*tc.heads*tc.dim], w[i*tc.heads:(i+1)*tc.heads], tc.heads)
				ScoreKeys(byKeys[i*tc.n:i*tc.n+int(ends[i])], &qs[i], keys[:ends[i]])
			}
			if Impl() == "avx512-amx" && !qs[0].amxScores() {
				t.Fatalf("%s: the query is not scored on the tiles", name)
			}
			got := make([]float32, nq*tc.n)
			ScoreGatheredKeys(got, tc.n, qs, ends, &exactGatherer{keys}, make([][]float32, 64), make([]float32, 64*tc.dim))
			if d := cmp.Diff(want, to64(got), cmpopts.EquateApprox(1e-5, 1e-5)); d != "" {
				t.Errorf("%s (-float64 +gathered):\n%s", name, d)
			}
			if Impl() != "avx512-amx" {
				if d := cmp.Diff(bitsOf(byKeys), bitsOf(got)); d != "" {
					t.Errorf("%s: not ScoreKeys's bits (-ScoreKeys +gathered):\n%s", name, d)
				}
			}
			for _, threads := range []int{1, 3} {
				for _, space := range []int{5, 40, 1024} {
					SetThreads(threads)
					other := make([]float32, nq*tc.n)
					ScoreGatheredKeys(other, tc.n, qs, ends, &exactGatherer{keys}, make([][]float32, space), make([]float32, space*tc.dim))
					SetThreads(1)
					if d := cmp.Diff(bitsOf(got), bitsOf(other)); d != "" {
						t.Errorf("%s: %d threads, %d keys of space differ (-1 thread, 64 +other):\n%s", name, threads, space, d)
					}
				}
			}
			for j := range tc.n {
				one := make([]float32, 1)
				ScoreGatheredKeys(one, 1, qs[:1], []int32{1}, &exactGatherer{keys[j : j+1]}, make([][]float32, 8), make([]float32, 8*tc.dim))
				if math.Float32bits(one[0]) != math.Float32bits(got[j]) {
					t.Fatalf("%s key %d: alone %v, with the others %v", name, j, one[0], got[j])
				}
			}
		})
	}
}
