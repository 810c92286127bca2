package kernels

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ilvMatrices returns a row-major bf16 matrix [rows, cols] of random values
// and its interleaved copy (made under AVX-512), or skips the test where
// this machine has no AVX-512.
func ilvMatrices(t *testing.T, seed uint64, rows, cols int) (rm, ilv *Matrix) {
	t.Helper()
	if !supported(levelAVX512) {
		t.Skip("InterleaveBF16 acts under the AVX-512 implementation only; this machine has none")
	}
	r := newRand(seed)
	rm = &Matrix{Rows: rows, Cols: cols, BF16: make([]uint16, rows*cols)}
	for i, v := range randSlice(r, rows*cols, 1) {
		rm.BF16[i] = toBF16(v)
	}
	return rm, interleavedCopy(t, rm, "InterleaveBF16", (*Matrix).InterleaveBF16)
}

// interleavedCopy returns a copy of rm moved into an interleaved layout by
// interleave (InterleaveBF16 or InterleaveFP8, named name) under the
// AVX-512 implementation, failing the test unless it acted and the result
// validates.
func interleavedCopy(t *testing.T, rm *Matrix, name string, interleave func(*Matrix) bool) *Matrix {
	t.Helper()
	c := *rm
	prev, err := SetImpl(levelAVX512.String())
	if err != nil {
		t.Fatal(err)
	}
	defer SetImpl(prev)
	if !interleave(&c) {
		t.Fatalf("%s of a [%d, %d] %s matrix under AVX-512 did nothing", name, rm.Rows, rm.Cols, strings.ToLower(rm.DType()))
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestInterleavedLayout pins the layout InterleaveBF16 documents, that it
// copies rather than rewrites the storage it was given, and the shapes and
// storages it leaves alone.
func TestInterleavedLayout(t *testing.T) {
	rm, ilv := ilvMatrices(t, 90, 16, 96)
	orig := slices.Clone(rm.BF16)
	for j := range 16 {
		for k := range 96 {
			at := (j/8)*8*96 + (k/32)*256 + (j%8)*32 + 2*(k%16) + (k%32)/16
			if ilv.BF16[at] != rm.BF16[j*96+k] {
				t.Fatalf("element (%d, %d) is not at %d of the interleaved storage", j, k, at)
			}
		}
	}
	if !cmp.Equal(rm.BF16, orig) || &rm.BF16[0] == &ilv.BF16[0] {
		t.Error("InterleaveBF16 changed or reused the storage it was given")
	}
	if !ilv.InterleaveBF16() || !ilv.Interleaved() || rm.Interleaved() {
		t.Error("a second InterleaveBF16 must keep the layout, and the source stays row-major")
	}
	prev, _ := SetImpl(levelAVX512.String())
	defer SetImpl(prev)
	for _, m := range []*Matrix{
		{Rows: 12, Cols: 32, BF16: make([]uint16, 12*32)},
		{Rows: 16, Cols: 40, BF16: make([]uint16, 16*40)},
		{Rows: 8, Cols: 48, BF16: make([]uint16, 8*48)},
		{Rows: 0, Cols: 32, BF16: []uint16{}},
		{Rows: 8, Cols: 32, F32: make([]float32, 8*32)},
		randFP8(newRand(91), 8, 128, 0, 0),
	} {
		if m.InterleaveBF16() || m.Interleaved() {
			t.Errorf("InterleaveBF16 of a [%d, %d] %s matrix interleaved it; want it left as it is", m.Rows, m.Cols, m.DType())
		}
	}
	for _, name := range impls() {
		if strings.HasPrefix(name, levelAVX512.String()) {
			continue // avx512 and avx512-amx read the layout
		}
		SetImpl(name)
		m := &Matrix{Rows: 8, Cols: 32, BF16: make([]uint16, 8*32)}
		if m.InterleaveBF16() {
			t.Errorf("InterleaveBF16 under %s interleaved; only AVX-512 reads the layout", name)
		}
	}
	for _, bad := range []*Matrix{
		{Rows: 8, Cols: 32, F32: make([]float32, 8*32), interleaved: true},
		{Rows: 8, Cols: 48, BF16: make([]uint16, 8*48), interleaved: true},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate accepted an interleaved [%d, %d] %s matrix", bad.Rows, bad.Cols, bad.DType())
		}
	}
}

// TestInterleavedProducts checks that every product of an interleaved
// matrix has the bits of the same product of the row-major matrix, under
// every implementation, on one to three threads, for one activation row (the
// GEMV tile), a few (the strips' passes) and many (blocks of weight rows),
// with reductions of one block, several, and a short last block.
func TestInterleavedProducts(t *testing.T) {
	shapes := []struct{ rows, cols int }{{8, 32}, {24, 64}, {64, 1056}, {136, 2080}, {16, 3072}}
	ns := []int{1, 2, 3, 5, 8, 13, 16, 17, 40, 65, 130}
	byVendor := pairIlvRows
	defer func() { pairIlvRows = byVendor }()
	for si, sh := range shapes {
		rm, ilv := ilvMatrices(t, uint64(100+si), sh.rows, sh.cols)
		forEachImpl(t, func(t *testing.T) {
			for _, threads := range []int{1, 2, 3} {
				SetThreads(threads)
				for _, n := range ns {
					x := randSlice(newRand(uint64(200+n)), n*sh.cols, 1)
					want := make([]float32, n*sh.rows)
					got := make([]float32, n*sh.rows)
					MatMulT(want, x, n, rm)
					// Eight rows take either walk by the CPU's vendor
					// (pairIlvRows): both, whatever this CPU is.
					walks := []int{byVendor}
					if n == 8 {
						walks = []int{pairWalkRows("GenuineIntel"), pairWalkRows("AuthenticAMD")}
					}
					for _, rows := range walks {
						pairIlvRows = rows
						clear(got)
						MatMulT(got, x, n, ilv)
						if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
							t.Fatalf("[%d, %d], n=%d, %d threads, pair walk rows %d: interleaved product differs from row-major (-want +got):\n%s", sh.rows, sh.cols, n, threads, rows, d)
						}
					}
					if n == 1 {
						MatVecT(got, x, ilv)
						if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
							t.Fatalf("[%d, %d], %d threads: MatVecT differs (-want +got):\n%s", sh.rows, sh.cols, threads, d)
						}
					}
				}
			}
		})
	}
}

// TestPairWalkByVendor: the pair walk of eight decode rows is Intel's
// alone, and the vendor string reads as CPUID gives it.
func TestPairWalkByVendor(t *testing.T) {
	for vendor, want := range map[string]int{"GenuineIntel": 8, "AuthenticAMD": 0, "HygonGenuine": 0, "": 0} {
		if got := pairWalkRows(vendor); got != want {
			t.Errorf("pairWalkRows(%q) = %d, want %d", vendor, got, want)
		}
	}
	if runtime.GOARCH == "amd64" {
		if len(cpuVendor) != 12 || strings.ContainsFunc(cpuVendor, func(r rune) bool { return r < ' ' || r > '~' }) {
			t.Errorf("cpuVendor = %q, want twelve printable characters", cpuVendor)
		}
	}
}

// TestInterleavedRowsAndSlices checks Row, Dequantize and the slices of an
// interleaved matrix against the row-major one: a slice of whole groups of
// eight rows stays an interleaved view, any other a row-major copy.
func TestInterleavedRowsAndSlices(t *testing.T) {
	rm, ilv := ilvMatrices(t, 92, 32, 96)
	if d := cmp.Diff(bitsOf(rm.Dequantize().F32), bitsOf(ilv.Dequantize().F32)); d != "" {
		t.Fatalf("Dequantize differs (-row-major +interleaved):\n%s", d)
	}
	rows := []struct {
		lo, n    int
		wantView bool
	}{{0, 8, true}, {8, 16, true}, {16, 16, true}, {4, 8, false}, {8, 5, false}, {3, 29, false}}
	for _, tc := range rows {
		t.Run(fmt.Sprintf("rows %d+%d", tc.lo, tc.n), func(t *testing.T) {
			s := ilv.SliceRows(tc.lo, tc.n)
			if s.Interleaved() != tc.wantView {
				t.Errorf("Interleaved() = %v, want %v", s.Interleaved(), tc.wantView)
			}
			if tc.wantView && &s.BF16[0] != &ilv.BF16[tc.lo*ilv.Cols] {
				t.Error("a slice of whole groups copied its rows; want a view")
			}
			want := rm.SliceRows(tc.lo, tc.n).Dequantize().F32
			if d := cmp.Diff(bitsOf(want), bitsOf(s.Dequantize().F32)); d != "" {
				t.Errorf("values differ (-want +got):\n%s", d)
			}
		})
	}
	for _, c := range []struct{ lo, n int }{{0, 16}, {16, 32}, {5, 40}, {95, 1}} {
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

// TestInterleavedHeads checks MatMulTHeads over interleaved heads against
// row-major ones.
func TestInterleavedHeads(t *testing.T) {
	const heads, rows, cols, n = 3, 16, 64, 2
	var rms, ilvs []Matrix
	for h := range heads {
		rm, ilv := ilvMatrices(t, uint64(300+h), rows, cols)
		rms, ilvs = append(rms, *rm), append(ilvs, *ilv)
	}
	forEachImpl(t, func(t *testing.T) {
		x := randSlice(newRand(301), n*heads*cols, 1)
		want := make([]float32, n*heads*rows)
		got := make([]float32, n*heads*rows)
		scratch := make([]float32, MatMulTHeadsScratch(n, rms))
		MatMulTHeads(want, heads*rows, rows, x, heads*cols, cols, n, rms, scratch)
		MatMulTHeads(got, heads*rows, rows, x, heads*cols, cols, n, ilvs, scratch)
		if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
			t.Fatalf("interleaved heads differ (-want +got):\n%s", d)
		}
	})
}
