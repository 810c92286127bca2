package kernels

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/cpmla/cpmla/numfmt"
	"github.com/google/go-cmp/cmp"
)

// ilvFP8Matrices returns a row-major fp8 matrix [rows, cols] of random
// codes holding no NaN code (with power-of-two block scales when pow2 is
// set, as DeepSeek's ue8m0 checkpoints have them), its blocks of columns
// starting colOff columns before its first (the columns of a wider weight
// from colOff on, as the absorbed W_UKᵀ heads are cut), and its
// interleaved copy (made under AVX-512), or skips the test where this
// machine has no AVX-512.
func ilvFP8Matrices(t *testing.T, seed uint64, rows, cols, colOff int, pow2 bool) (rm, ilv *Matrix) {
	t.Helper()
	if !supported(levelAVX512) {
		t.Skip("InterleaveFP8 acts under the AVX-512 implementation only; this machine has none")
	}
	r := newRand(seed)
	if pow2 {
		wide, err := quantizeFP8(rows, colOff+cols, randSlice(r, rows*(colOff+cols), 1), numfmt.QuantizeE4M3BlocksUE8M0)
		if err != nil {
			t.Fatal(err)
		}
		rm = wide.SliceCols(colOff, cols)
	} else {
		rm = finiteFP8(randFP8(r, rows, cols, 0, colOff))
	}
	if rm.Scales.ColOff != colOff {
		t.Fatalf("built a matrix at column offset %d, want %d", rm.Scales.ColOff, colOff)
	}
	return rm, interleavedCopy(t, rm, "InterleaveFP8", (*Matrix).InterleaveFP8)
}

// finiteFP8 replaces every NaN code of m (0x7F, 0xFF) by its neighbour
// below and marks the codes checked, as NewFP8Matrix would, so that the
// tiles that take checked codes (and InterleaveFP8) accept m.
func finiteFP8(m *Matrix) *Matrix {
	for i, q := range m.FP8 {
		if q&0x7F == 0x7F {
			m.FP8[i] = q ^ 1
		}
	}
	m.CheckFP8Codes()
	return m
}

// TestInterleavedFP8Layout pins the layout InterleaveFP8 documents, that it
// copies rather than rewrites the storage it was given, and the matrices it
// leaves alone.
func TestInterleavedFP8Layout(t *testing.T) {
	rm, ilv := ilvFP8Matrices(t, 90, 16, 96, 0, false)
	orig := slices.Clone(rm.FP8)
	for j := range 16 {
		for k := range 96 {
			at := (j/8)*8*96 + (k/16)*128 + (j%8)*16 + k%16
			if ilv.FP8[at] != rm.FP8[j*96+k] {
				t.Fatalf("code (%d, %d) is not at %d of the interleaved storage", j, k, at)
			}
		}
	}
	if !cmp.Equal(rm.FP8, orig) || &rm.FP8[0] == &ilv.FP8[0] {
		t.Error("InterleaveFP8 changed or reused the storage it was given")
	}
	if !ilv.InterleaveFP8() || !ilv.Interleaved() || rm.Interleaved() {
		t.Error("a second InterleaveFP8 must keep the layout, and the source stays row-major")
	}
	prev, _ := SetImpl(levelAVX512.String())
	defer SetImpl(prev)
	big := finiteFP8(randFP8(newRand(92), 8, 128, 0, 0))
	big.Scales.S[0] = 0x1p9 // beyond the tiles' in-register decoding
	unchecked := randFP8(newRand(93), 8, 128, 0, 0)
	for name, m := range map[string]*Matrix{
		"rows not a multiple of 8":       finiteFP8(randFP8(newRand(94), 12, 128, 0, 0)),
		"cols not a multiple of 16":      finiteFP8(randFP8(newRand(95), 8, 120, 0, 0)),
		"column offset of 8":             finiteFP8(randFP8(newRand(96), 8, 128, 0, 8)),
		"row offset not a multiple of 8": finiteFP8(randFP8(newRand(97), 8, 128, 4, 0)),
		"scale of 2^9":                   big,
		"codes not checked":              unchecked,
		"bf16":                           {Rows: 8, Cols: 32, BF16: make([]uint16, 8*32)},
	} {
		if m.InterleaveFP8() || m.Interleaved() {
			t.Errorf("%s: InterleaveFP8 interleaved it; want it left as it is", name)
		}
	}
	if m := finiteFP8(randFP8(newRand(98), 16, 128, 8, 0)); !m.InterleaveFP8() {
		t.Error("a row offset that is a multiple of 8 keeps each group in one block of rows; want it interleaved")
	}
	if m := finiteFP8(randFP8(newRand(91), 16, 128, 0, 64)); !m.InterleaveFP8() {
		t.Error("a column offset that is a multiple of 16 keeps each step of 16 columns in one block; want it interleaved")
	}
	for _, name := range impls() {
		if name == levelAVX512.String() || name == "avx512-amx" {
			continue
		}
		SetImpl(name)
		if m := finiteFP8(randFP8(newRand(99), 8, 128, 0, 0)); m.InterleaveFP8() {
			t.Errorf("InterleaveFP8 under %s interleaved; only AVX-512 reads the layout", name)
		}
	}
	SetImpl(levelAVX512.String())
	bad := finiteFP8(randFP8(newRand(100), 12, 128, 0, 0))
	bad.fp8Ilv = true
	if err := bad.Validate(); err == nil {
		t.Error("Validate accepted an interleaved fp8 matrix of 12 rows")
	}
}

// TestInterleavedFP8Products checks that every product of an interleaved
// fp8 matrix has the bits of the same product of the row-major matrix,
// under every implementation, on one to three threads, for one activation
// row (the pair tile, with and without prescaled activations, and an odd
// group), two to eight (the eight-, four- and three-row tiles), up to 64
// (the decoded path) and more (the prompt groups), with reductions of one
// block, several and a short last block, and rows over several blocks of
// scales.
func TestInterleavedFP8Products(t *testing.T) {
	shapes := []struct {
		rows, cols, colOff int
		pow2               bool
	}{
		{8, 16, 0, false}, {24, 64, 0, false}, {64, 1056, 0, false}, {136, 2080, 0, false},
		{16, 3072, 0, true}, {40, 4096, 0, true}, {256, 2048, 0, false},
		// Blocks of columns that start before the matrix: W_UKᵀ's odd heads.
		{512, 192, 64, false}, {24, 192, 64, true}, {16, 2080, 16, false}, {40, 272, 112, true},
	}
	ns := []int{1, 2, 3, 4, 5, 6, 7, 8, 13, 40, 65, 130}
	for si, sh := range shapes {
		rm, ilv := ilvFP8Matrices(t, uint64(100+si), sh.rows, sh.cols, sh.colOff, sh.pow2)
		forEachImpl(t, func(t *testing.T) {
			for _, threads := range []int{1, 2, 3} {
				SetThreads(threads)
				for _, n := range ns {
					x := randSlice(newRand(uint64(200+n)), n*sh.cols, 1)
					want := make([]float32, n*sh.rows)
					got := make([]float32, n*sh.rows)
					MatMulT(want, x, n, rm)
					MatMulT(got, x, n, ilv)
					if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
						t.Fatalf("[%d, %d] at column offset %d, n=%d, %d threads: interleaved product differs from row-major (-want +got):\n%s", sh.rows, sh.cols, sh.colOff, n, threads, d)
					}
					if n == 1 {
						clear(got)
						MatVecT(got, x, ilv)
						if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
							t.Fatalf("[%d, %d] at column offset %d, %d threads: MatVecT differs (-want +got):\n%s", sh.rows, sh.cols, sh.colOff, threads, d)
						}
					}
				}
			}
			SetThreads(1)
		})
	}
}

// TestInterleavedFP8RowsAndSlices checks Row, Dequantize and the slices of
// an interleaved fp8 matrix against the row-major one: a slice of whole
// groups of eight rows stays an interleaved view, any other a row-major
// copy, with the same block scales.
func TestInterleavedFP8RowsAndSlices(t *testing.T) {
	rm, ilv := ilvFP8Matrices(t, 92, 144, 272, 0, false)
	if d := cmp.Diff(bitsOf(rm.Dequantize().F32), bitsOf(ilv.Dequantize().F32)); d != "" {
		t.Fatalf("Dequantize differs (-row-major +interleaved):\n%s", d)
	}
	rmo, ilvo := ilvFP8Matrices(t, 93, 16, 192, 64, false)
	if d := cmp.Diff(bitsOf(rmo.Dequantize().F32), bitsOf(ilvo.Dequantize().F32)); d != "" {
		t.Fatalf("at column offset 64, Dequantize differs (-row-major +interleaved):\n%s", d)
	}
	rows := []struct {
		lo, n    int
		wantView bool
	}{{0, 8, true}, {8, 16, true}, {128, 16, true}, {4, 8, false}, {8, 5, false}, {3, 129, false}}
	for _, tc := range rows {
		t.Run(fmt.Sprintf("rows %d+%d", tc.lo, tc.n), func(t *testing.T) {
			s := ilv.SliceRows(tc.lo, tc.n)
			if s.Interleaved() != tc.wantView {
				t.Errorf("Interleaved() = %v, want %v", s.Interleaved(), tc.wantView)
			}
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			if tc.wantView && &s.FP8[0] != &ilv.FP8[tc.lo*ilv.Cols] {
				t.Error("a slice of whole groups copied its codes; want a view")
			}
			want := rm.SliceRows(tc.lo, tc.n)
			if d := cmp.Diff(bitsOf(want.Dequantize().F32), bitsOf(s.Dequantize().F32)); d != "" {
				t.Errorf("values differ (-want +got):\n%s", d)
			}
			x := randSlice(newRand(7), 2*ilv.Cols, 1)
			wp, gp := make([]float32, 2*tc.n), make([]float32, 2*tc.n)
			MatMulT(wp, x, 2, want)
			MatMulT(gp, x, 2, s)
			if d := cmp.Diff(bitsOf(wp), bitsOf(gp)); d != "" {
				t.Errorf("products differ (-want +got):\n%s", d)
			}
		})
	}
	for _, c := range []struct{ lo, n int }{{0, 16}, {16, 128}, {5, 40}, {271, 1}} {
		s := ilv.SliceCols(c.lo, c.n)
		want := rm.SliceCols(c.lo, c.n).Dequantize().F32
		if s.Interleaved() || s.Validate() != nil {
			t.Errorf("cols %d+%d: want a valid row-major copy", c.lo, c.n)
		}
		if d := cmp.Diff(bitsOf(want), bitsOf(s.Dequantize().F32)); d != "" {
			t.Errorf("cols %d+%d: values differ (-want +got):\n%s", c.lo, c.n, d)
		}
	}
}

// TestInterleavedFP8Heads checks MatMulTHeads over interleaved fp8 heads
// (one row: the walk over all heads' groups in pairs) against row-major
// ones.
func TestInterleavedFP8Heads(t *testing.T) {
	// Every other head's blocks of columns start 64 columns before it, as
	// W_UKᵀ's do in GLM-5 (448 kv_b rows a head): pairs of groups of two
	// heads at one offset go through the pair tile, the others alone.
	const heads, rows, cols = 3, 24, 192
	var rms, ilvs []Matrix
	for h := range heads {
		rm, ilv := ilvFP8Matrices(t, uint64(300+h), rows, cols, 64*(h%2), h == 1)
		rms, ilvs = append(rms, *rm), append(ilvs, *ilv)
	}
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{1, 2, 5} {
			x := randSlice(newRand(301), n*heads*cols, 1)
			want := make([]float32, n*heads*rows)
			got := make([]float32, n*heads*rows)
			scratch := make([]float32, MatMulTHeadsScratch(n, rms))
			MatMulTHeads(want, heads*rows, rows, x, heads*cols, cols, n, rms, scratch)
			MatMulTHeads(got, heads*rows, rows, x, heads*cols, cols, n, ilvs, scratch)
			if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
				t.Fatalf("n=%d: interleaved heads differ (-want +got):\n%s", n, d)
			}
		}
	})
}

// TestInterleaveFP8Each checks that InterleaveFP8Each interleaves a list of
// matrices into one allocation, one after another, each with the bits of
// InterleaveFP8 (one already interleaved kept as it is), and leaves every
// one of a list as it is when one cannot take the layout.
func TestInterleaveFP8Each(t *testing.T) {
	var rms, each []Matrix
	for h := range 4 {
		rm, _ := ilvFP8Matrices(t, uint64(400+h), 16, 192, 64*(h%2), false)
		rms, each = append(rms, *rm), append(each, *rm)
	}
	prev, _ := SetImpl(levelAVX512.String())
	defer SetImpl(prev)
	each[2].InterleaveFP8()
	if !InterleaveFP8Each(each) {
		t.Fatal("InterleaveFP8Each refused four matrices that each take the layout")
	}
	for h := range each {
		one := rms[h]
		one.InterleaveFP8()
		if !each[h].Interleaved() || !cmp.Equal(each[h].FP8, one.FP8) {
			t.Errorf("matrix %d: codes differ from InterleaveFP8's", h)
		}
		if h > 0 && unsafe.Pointer(&each[h].FP8[0]) != unsafe.Add(unsafe.Pointer(&each[h-1].FP8[0]), len(each[h-1].FP8)) {
			t.Errorf("matrix %d does not follow matrix %d in memory", h, h-1)
		}
	}
	mixed := []Matrix{rms[0], *finiteFP8(randFP8(newRand(410), 12, 192, 0, 0)), rms[1]}
	orig := slices.Clone(mixed[0].FP8)
	if InterleaveFP8Each(mixed) {
		t.Error("InterleaveFP8Each interleaved a list holding a matrix of 12 rows")
	}
	for i := range mixed {
		if mixed[i].Interleaved() {
			t.Errorf("matrix %d of the refused list was interleaved", i)
		}
	}
	if !cmp.Equal(mixed[0].FP8, orig) {
		t.Error("the refused list's codes changed")
	}
}
