package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fewRows are the batch sizes of the few-row tests: 1 to 20, and both
// sides of fp8DecodedMaxRows.
var fewRows = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, fp8DecodedMaxRows, fp8DecodedMaxRows + 1}

// skinnyCase is an fp8 weight for the few-row product tests: a matrix made
// by make, and whether the AVX2 decoded path (gemmFP8Decoded) must take it.
type skinnyCase struct {
	name     string
	make     func() *Matrix
	register bool
}

// skinnyFP8Cases are the weights of TestMatMulTFP8FewRows: whole and
// partial groups of four and of eight rows (a group of eight across two
// blocks of scales, and groups paired across blocks of 128 rows, among
// them), columns not a multiple of 8 (a scalar tail
// in the last reduction block) or of 16, several reduction blocks, row and
// column slices of a bigger matrix (block-splitting row offsets; column
// offsets the tiles take, a multiple of 16, and ones they do not), NaN codes
// in the vectors and in the tail, and scales of every kind including ones
// the in-register decoding refuses (magnitude 2^8 and more).
func skinnyFP8Cases() []skinnyCase {
	r := newRand(90)
	plain := func(rows, cols, rowOff, colOff int) func() *Matrix {
		return func() *Matrix { return randFP8(r, rows, cols, rowOff, colOff) }
	}
	big := randFP8(r, 70, 2*FP8Block+300, 0, 0)
	withNaN := func(rows, cols int, at [][2]int) func() *Matrix {
		return func() *Matrix {
			w := randFP8(r, rows, cols, 0, 0)
			for k, p := range at {
				w.FP8[p[0]*cols+p[1]] = 0x7F | uint8(k&1)<<7
			}
			return w
		}
	}
	withScales := func(rows, cols int, specials []float32) func() *Matrix {
		return func() *Matrix {
			w := randFP8(r, rows, cols, 0, 0)
			for k, s := range specials {
				w.Scales.S[(3*k)%len(w.Scales.S)] = s
			}
			return w
		}
	}
	return []skinnyCase{
		{"[8,256]", plain(8, 256, 0, 0), true},
		{"[13,1037] tail 5", plain(13, 1037, 0, 0), true},
		{"[9,301] tail 5", plain(9, 301, 0, 0), true},
		{"[12,2100] three blocks", plain(12, 2*gemmKC+52, 0, 0), true},
		{"[7,200] at (5,32)", plain(7, 200, 5, 32), true},
		{"[40,2112] groups of eight, a short last block", plain(40, 2*gemmKC+64, 0, 0), true},
		{"[20,1280] at (124,0) a group across two scale blocks", plain(20, 1280, 124, 0), true},
		{"[272,256] pairs of groups from different scale blocks", plain(272, 256, 0, 0), true},
		{"[48,4096] pairs a block apart", plain(48, 4096, 0, 0), true},
		{"[44,8192] pairs a block apart, a middle group and a tail", plain(44, 8192, 0, 0), true},
		{"[24,4096] at (124,0) a pair's group across two scale blocks", plain(24, 4096, 124, 0), true},
		{"[16,512] zero, negative, subnormal scales", withScales(16, 512, []float32{0, -0.5, math.Float32frombits(3), -1e-30}), true},
		{"[11,333] at (3,8) splits pairs", plain(11, 333, 3, 8), false},
		{"[6,130] at (0,1) splits vectors", plain(6, 130, 0, 1), false},
		{"[4,16]", plain(4, 16, 0, 0), true},
		{"[5,7] no vector", plain(5, 7, 0, 0), true},
		{"SliceRows(3,41) of [70,556]", func() *Matrix { return big.SliceRows(3, 41) }, true},
		{"SliceRows(60,10).SliceCols(144,300)", func() *Matrix { return big.SliceRows(60, 10).SliceCols(144, 300) }, true},
		{"SliceCols(100,212) of [70,556]", func() *Matrix { return big.SliceCols(100, 212) }, false},
		{"NaN codes", withNaN(10, 1100, [][2]int{{1, 0}, {2, 517}, {6, 1099}, {9, 1024}}), true},
		{"NaN code in the tail", withNaN(8, 301, [][2]int{{5, 299}}), true},
		{"zero, negative, subnormal scales", withScales(8, 520, []float32{0, -0.5, math.Float32frombits(3), -1e-30}), true},
		{"scale 300", withScales(8, 520, []float32{300}), false},
		{"scale 1e30", withScales(9, 300, []float32{1e30}), false},
		{"infinite scale", withScales(9, 300, []float32{float32(math.Inf(-1))}), true},
	}
}

// TestMatMulTFP8FewRows: under every implementation, for n = 1…20, 64 and
// 65, an fp8
// product has exactly the bits of (a) MatVecT on each row alone and (b) the
// product with the dequantized f32 matrix, on one and two threads, with the
// codes checked on every product and, where they hold no NaN code, checked
// once (as NewFP8Matrix marks them); on AVX2 the decoded path is the one
// taken exactly when its conditions hold.
func TestMatMulTFP8FewRows(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(91)
		for _, c := range skinnyFP8Cases() {
			w := c.make()
			if l := activeLevel(); l != levelRef && fp8InRegister(w, l, 0, w.Rows) != c.register {
				t.Fatalf("%s: fp8InRegister = %v, want %v", c.name, !c.register, c.register)
			}
			variants := []*Matrix{w}
			if !hasNaNCode(w.FP8) {
				// As NewFP8Matrix marks codes it checked: the tiles that
				// take only such codes run too.
				f := *w
				f.finite = true
				variants = append(variants, &f)
			}
			for _, w := range variants {
				checkFewRows(t, fmt.Sprintf("%s, codes checked once %v", c.name, w.finite), w, r)
			}
		}
	})
}

// checkFewRows checks the few-row products of one weight w for every n in
// fewRows: MatMulT and MatVecT row by row against MatMulT with the f32 matrix
// w.Dequantize() gives (dequantized fp8, widened bf16), on one and two
// threads. Under avx512-amx a bf16 product has the AMX tiles' own bits:
// the one-thread product is checked against the float64 oracle instead, and
// the others against it bit for bit.
func checkFewRows(t *testing.T, name string, w *Matrix, r *rand.Rand) {
	t.Helper()
	d, dt := w.Dequantize(), w.DType()
	for _, n := range fewRows {
		x := randSlice(r, n*w.Cols, 1)
		want := make([]float32, n*w.Rows)
		if w.BF16 != nil && amxActive() {
			dt = "AMX"
			SetThreads(1)
			MatMulT(want, x, n, w)
			checkOracle(t, name, want, x, n, d)
		} else {
			MatMulT(want, x, n, d)
		}
		alone := make([]float32, n*w.Rows)
		for i := range n {
			MatVecT(alone[i*w.Rows:(i+1)*w.Rows], x[i*w.Cols:(i+1)*w.Cols], w)
		}
		if diff := cmp.Diff(bitsOf(want), bitsOf(alone)); diff != "" {
			t.Errorf("%s n=%d: MatVecT row by row vs f32 (-f32 +%s):\n%s", name, n, dt, diff)
		}
		for _, threads := range []int{1, 2} {
			SetThreads(threads)
			got := make([]float32, n*w.Rows)
			MatMulT(got, x, n, w)
			if diff := cmp.Diff(bitsOf(want), bitsOf(got)); diff != "" {
				t.Errorf("%s n=%d, %d threads: %s vs f32 (-f32 +%s):\n%s", name, n, threads, dt, dt, diff)
			}
		}
		SetThreads(1)
	}
}

// TestMatMulTFP8NaNRows: a NaN code makes exactly its weight row's outputs
// NaN in every activation row, wherever the code lies (a checked chunk, the
// 8-byte rest, a later reduction block, the scalar tail), for batches that
// take the decoded path.
func TestMatMulTFP8NaNRows(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(92)
		const rows, cols = 9, 1100
		for _, col := range []int{0, 31, 32, 127, 128, 1023, 1024, 1095, 1099} {
			w := randFP8(r, rows, cols, 0, 0)
			bad := col % rows
			w.FP8[bad*cols+col] = 0xFF
			for _, n := range []int{2, 5, 8} {
				x := randSlice(r, n*cols, 1)
				dst := make([]float32, n*rows)
				MatMulT(dst, x, n, w)
				for i := range n {
					for j := range rows {
						if v := dst[i*rows+j]; (v != v) != (j == bad) {
							t.Errorf("NaN code at (%d, %d), n=%d: output (%d, %d) = %v", bad, col, n, i, j, v)
						}
					}
				}
			}
		}
	})
}

// TestMatMulTBF16FewRows: the bf16 product of n = 1…20, 64 and 65 rows has
// the bits
// of MatVecT row by row and of the product with the widened f32 matrix,
// on one and two threads.
func TestMatMulTBF16FewRows(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(93)
		for _, sh := range []struct{ rows, cols int }{{8, 256}, {13, 1037}, {9, 2*gemmKC + 52}, {5, 7}, {130, 300}} {
			w := &Matrix{Rows: sh.rows, Cols: sh.cols, BF16: make([]uint16, sh.rows*sh.cols)}
			for i, v := range randSlice(r, sh.rows*sh.cols, 1) {
				w.BF16[i] = toBF16(v)
			}
			checkFewRows(t, fmt.Sprintf("[%d,%d]", sh.rows, sh.cols), w, r)
		}
	})
}

// TestEvenPass pins how a batch splits into passes of a tile: shares as
// even as the passes allow, none above the tile's rows, and, for the
// three-row interleaved group tile, never a pass of one row (groupBF16Ilv
// has no one-row tile; one row alone goes through the GEMV tile).
func TestEvenPass(t *testing.T) {
	passes := func(mr, n int) []int {
		var got []int
		for i0 := 0; i0 < n; {
			m := evenPass(mr, n-i0)
			got = append(got, m)
			i0 += m
		}
		return got
	}
	for _, tc := range []struct {
		mr, n int
		want  []int
	}{
		{3, 2, []int{2}},
		{3, 4, []int{2, 2}},
		{3, 7, []int{3, 2, 2}},
		{3, 8, []int{3, 3, 2}},
		{3, 16, []int{3, 3, 3, 3, 2, 2}},
		{6, 8, []int{4, 4}},
		{6, 13, []int{5, 4, 4}},
	} {
		if diff := cmp.Diff(tc.want, passes(tc.mr, tc.n)); diff != "" {
			t.Errorf("evenPass(%d) over %d rows (-want +got):\n%s", tc.mr, tc.n, diff)
		}
	}
	for n := 2; n <= skinnyMaxRows; n++ {
		for _, m := range passes(groupIlvMaxRows, n) {
			if m < 2 || m > groupIlvMaxRows {
				t.Errorf("%d rows: a pass of %d rows, want 2 to %d", n, m, groupIlvMaxRows)
			}
		}
	}
}

// TestGroupSubCols pins how many values of a reduction block a call of the
// group tiles takes: the whole block up to eight rows, whose values and
// weights fit groupL1Bytes, half of it above; always a power of two that
// divides the block into whole chunks.
func TestGroupSubCols(t *testing.T) {
	var got []int
	for n := 2; n <= skinnyMaxRows; n++ {
		sub := groupSubCols(n)
		got = append(got, sub)
		if sub%ilvCols != 0 || gemmKC%sub != 0 {
			t.Errorf("%d rows: %d values a call, want a multiple of %d dividing %d", n, sub, ilvCols, gemmKC)
		}
		if fit := (4*n + 2*ilvRows) * sub; fit > groupL1Bytes {
			t.Errorf("%d rows: a call of %d values reads %d bytes, over groupL1Bytes (%d)", n, sub, fit, groupL1Bytes)
		}
	}
	want := []int{1024, 1024, 1024, 1024, 1024, 1024, 1024, 512, 512, 512, 512, 512, 512, 512, 512}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("groupSubCols for 2…%d rows (-want +got):\n%s", skinnyMaxRows, diff)
	}
}

// TestPanelWalk runs panelWalk over a few shapes, in one-tile panels and
// in panels of panelOut rows, and checks that it visits every tile and
// block once, panel by panel and block by block, that the next tile it
// names for each call is the one it calls next (after the last, a row at
// or past the end), and that one-tile panels keep the per-tile order: each
// tile's blocks in order, then the next tile.
func TestPanelWalk(t *testing.T) {
	type tile struct{ j, k int }
	defer func(v int) { panelXBytes = v }(panelXBytes)
	for _, c := range []struct{ rows, in, step int }{
		{24, 3072, 8}, {2064, 3072, 8}, {2100, 2500, 3}, {12, 100, 4}, {2048, 2048, 4},
	} {
		for _, panels := range []bool{false, true} {
			panelXBytes = math.MaxInt
			panel := c.step
			if panels {
				panelXBytes, panel = 0, panelOut/c.step*c.step
			}
			var want []tile
			for b0 := 0; b0 < c.rows; b0 += panel {
				for k0 := 0; k0 < c.in; k0 += gemmKC {
					for jt := b0; jt < min(b0+panel, c.rows); jt += c.step {
						want = append(want, tile{jt, k0})
					}
				}
			}
			var got, next []tile
			panelWalk(1, c.in, 0, c.rows, c.step, func(jt, k0, nj, nk int) {
				got = append(got, tile{jt, k0})
				next = append(next, tile{nj, nk})
			})
			if d := cmp.Diff(want, got, cmp.AllowUnexported(tile{})); d != "" {
				t.Fatalf("%+v, panels %v: the walk's order (-want +got):\n%s", c, panels, d)
			}
			for i, n := range next {
				if i+1 < len(got) && n != got[i+1] {
					t.Errorf("%+v, panels %v: after %+v the walk names %+v as next and computes %+v", c, panels, got[i], n, got[i+1])
				}
			}
			if n := next[len(next)-1]; n.j < c.rows {
				t.Errorf("%+v, panels %v: after the last tile the walk names row %d, inside the matrix", c, panels, n.j)
			}
			if !panels {
				var order []tile
				for jt := 0; jt < c.rows; jt += c.step {
					for k0 := 0; k0 < c.in; k0 += gemmKC {
						order = append(order, tile{jt, k0})
					}
				}
				if d := cmp.Diff(order, got, cmp.AllowUnexported(tile{})); d != "" {
					t.Errorf("%+v: one-tile panels do not keep the per-tile order (-want +got):\n%s", c, d)
				}
			}
		}
	}
}

// TestProductPanels: the decode-sized products that walk their weight rows
// in panels when the activation rows are large (the interleaved bf16 group
// tile, the fp8 few- and three-row tiles, the fp8 decoded path up to
// fp8DecodedMaxRows rows) give the bits of the per-tile
// walk, on one and two threads, over shapes with a partial last panel,
// weight rows left over for other tiles and a scalar tail.
func TestProductPanels(t *testing.T) {
	r := newRand(93)
	fp8 := func(rows, cols int) *Matrix {
		m, err := QuantizeFP8(rows, cols, randSlice(r, rows*cols, 0.05))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	_, ilv := ilvMatrices(t, 94, 1048, 2080)
	ws := map[string]*Matrix{"bf16 interleaved [1048, 2080]": ilv, "fp8 [1030, 2072]": fp8(1030, 2072), "fp8 [2050, 1040]": fp8(2050, 1040)}
	defer func(v, d, g int) { panelXBytes, decodedPanelXBytes, groupPanelMinRows = v, d, g }(panelXBytes, decodedPanelXBytes, groupPanelMinRows)
	forEachImpl(t, func(t *testing.T) {
		for name, w := range ws {
			for _, n := range []int{2, 3, 4, 5, 8, 16, 33, fp8DecodedMaxRows} {
				x := randSlice(r, n*w.Cols, 1)
				for _, threads := range []int{1, 2} {
					SetThreads(threads)
					want := make([]float32, n*w.Rows)
					got := make([]float32, n*w.Rows)
					panelXBytes, decodedPanelXBytes, groupPanelMinRows = math.MaxInt, math.MaxInt, math.MaxInt
					MatMulT(want, x, n, w)
					panelXBytes, decodedPanelXBytes, groupPanelMinRows = 0, 0, 0
					MatMulT(got, x, n, w)
					if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
						t.Fatalf("%s, n=%d, %d threads: panels differ from the per-tile walk (-want +got):\n%s", name, n, threads, d)
					}
				}
			}
		}
	})
	SetThreads(1)
}

// TestGroupPanelXBytes pins where the interleaved group tiles switch to the
// panel walk: at groupPanelMinRows rows whatever their size, below it when
// the rows exceed panelXBytes.
func TestGroupPanelXBytes(t *testing.T) {
	for _, c := range []struct{ n, in, panel int }{
		{n: 6, in: 2048, panel: ilvRows},  // 48 KiB of rows: one group a panel
		{n: 6, in: 6144, panel: panelOut}, // 144 KiB
		{n: 7, in: 2048, panel: panelOut},
		{n: 16, in: 512, panel: panelOut},
	} {
		if got := productPanel(groupPanelXBytes(c.n), c.n, c.in, ilvRows); got != c.panel {
			t.Errorf("%d rows of %d columns: a panel of %d weight rows, want %d", c.n, c.in, got, c.panel)
		}
	}
}

// checkOracle checks dst = x·dᵀ (n rows, d an f32 matrix) against the
// float64 product within 1e-6 of Σ|x·w| per output.
func checkOracle(t *testing.T, name string, dst, x []float32, n int, d *Matrix) {
	t.Helper()
	in := d.Cols
	for i := range n {
		xi := x[i*in : (i+1)*in]
		for j := range d.Rows {
			wj := to64(d.F32[j*in : (j+1)*in])
			var want float64
			for k, v := range xi {
				want += float64(v) * wj[k]
			}
			if err := math.Abs(float64(dst[i*d.Rows+j]) - want); err > 1e-6*dotBound(xi, wj)+1e-30 {
				t.Fatalf("%s n=%d: output (%d, %d) = %v, float64 oracle %v", name, n, i, j, dst[i*d.Rows+j], want)
			}
		}
	}
}
