package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fp8GEMMCases are shapes and block offsets of fp8 products: row and column
// tails of every tile width, reductions across several gemmKC blocks and
// partial edge blocks, offsets that cut blocks (aligned to 16 and 8, and
// not), rows not a multiple of 4 or 8, and blocks with and without a
// scalar tail.
var fp8GEMMCases = []struct{ n, rows, cols, rowOff, colOff int }{
	{1, 1, 1, 0, 0}, {1, 8, 16, 0, 0}, {1, 9, 17, 0, 0}, {1, 16, 128, 0, 0}, {1, 13, 129, 0, 0},
	{1, 24, 300, 64, 64}, {1, 17, 2*gemmKC + 40, 0, 0}, {1, 64, 128, 64, 0}, {1, 8, 64, 0, 64},
	{1, 11, 1000, 16, 16}, {1, 7, 333, 3, 8}, {1, 10, 250, 127, 1}, {1, 30, 140, 200, 250},
	{2, 5, 130, 0, 0}, {3, 7, 257, 1, 16}, {5, 9, 1100, 120, 112}, {6, 4, 16, 0, 0},
	{7, 13, 129, 0, 8}, {9, 31, 300, 64, 64}, {13, 6, 2100, 5, 100}, {16, 33, 64, 0, 0},
	{8, 10, 2*gemmKC + 40, 0, 0}, {8, 7, 300, 64, 64}, {5, 3, 1040, 0, 16}, {6, 17, 1100, 16, 16},
	{12, 5, 1040, 0, 16}, {24, 6, 200, 64, 48}, {64, 3, 140, 0, 0}, {65, 4, 64, 0, 0},
	{3, 5, 0, 0, 0}, {0, 4, 16, 0, 0}, {2, 0, 8, 0, 0},
	// More rows than the decoded path takes: blocks of weight rows decoded
	// to the panel, with offsets, scalar tails and several blocks.
	{70, 37, 2*gemmKC + 40, 64, 48}, {100, 9, 1100, 5, 16}, {66, 70, 130, 0, 0},
	// A prompt's rows on columns a multiple of 16: groups of eight weight
	// rows decoded to L1 and passed over a chunk of rows at a time (one
	// chunk, several, a short last one), rows left over, several blocks.
	{67, 8, gemmKC, 0, 0}, {130, 21, 2*gemmKC + 48, 64, 16}, {300, 9, 64, 128, 0},
	{200, 16, 160, 0, 32},
	// Two to four rows with blocks whose lengths are whole vectors, which
	// the few-row tile stores and then adds to the output itself.
	{2, 8, 2*gemmKC + 48, 0, 0}, {3, 9, 1040, 0, 16}, {4, 13, 160, 128, 32},
}

// TestMatMulTFP8: under every implementation, an fp8 product has exactly the
// bits of the same implementation's product with the dequantized f32
// matrix, for every n and thread count; MatVecT gives the rows' bits.
func TestMatMulTFP8(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(60)
		for _, c := range fp8GEMMCases {
			name := fmt.Sprintf("n=%d [%d,%d] at (%d,%d)", c.n, c.rows, c.cols, c.rowOff, c.colOff)
			w := randFP8(r, c.rows, c.cols, c.rowOff, c.colOff)
			checkFP8Product(t, name, w, randSlice(r, c.n*c.cols, 1), c.n)
		}
	})
}

// checkFP8Product compares MatMulT and MatVecT with w to MatMulT with its
// dequantized copy on 1 and 3 threads. When w's codes hold no NaN code it
// does so twice: with the codes checked on every product (w as a literal
// leaves them) and as NewFP8Matrix marks them, checked once.
func checkFP8Product(t *testing.T, name string, w *Matrix, x []float32, n int) {
	t.Helper()
	variants := []*Matrix{w}
	if !w.finite && !hasNaNCode(w.FP8) {
		c := *w
		c.finite = true
		variants = append(variants, &c)
	}
	for _, w := range variants {
		checkFP8ProductOnce(t, fmt.Sprintf("%s, codes checked once %v", name, w.finite), w, x, n)
	}
}

func checkFP8ProductOnce(t *testing.T, name string, w *Matrix, x []float32, n int) {
	t.Helper()
	d := w.Dequantize()
	want := make([]float32, n*w.Rows)
	MatMulT(want, x, n, d)
	for _, threads := range []int{1, 3} {
		SetThreads(threads)
		got := make([]float32, len(want))
		MatMulT(got, x, n, w)
		if diff := cmp.Diff(bitsOf(want), bitsOf(got)); diff != "" {
			t.Errorf("%s, %d threads: fp8 vs dequantized f32 (-f32 +fp8):\n%s", name, threads, diff)
		}
		for i := range n {
			row := make([]float32, w.Rows)
			MatVecT(row, x[i*w.Cols:(i+1)*w.Cols], w)
			if diff := cmp.Diff(bitsOf(want[i*w.Rows:(i+1)*w.Rows]), bitsOf(row)); diff != "" {
				t.Errorf("%s, %d threads, MatVecT row %d (-f32 +fp8):\n%s", name, threads, i, diff)
			}
		}
	}
	SetThreads(1)
}

// TestMatMulTFP8Specials: NaN codes make their rows' outputs NaN (and only
// those); negative, zero, subnormal and huge scales are applied as their
// definition says.
func TestMatMulTFP8Specials(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(61)
		for _, c := range []struct{ n, rows, cols, rowOff, colOff int }{{1, 16, 300, 0, 0}, {4, 9, 200, 64, 64}, {1, 8, 1100, 0, 16}} {
			w := randFP8(r, c.rows, c.cols, c.rowOff, c.colOff)
			w.FP8[2*c.cols+5] = 0x7F        // row 2
			w.FP8[5*c.cols+c.cols-1] = 0xFF // row 5, in the tail
			specials := []float32{-0.75, 0, math.Float32frombits(1), 1e30, -math.MaxFloat32, 300, float32(math.Inf(1))}
			for k, s := range specials {
				w.Scales.S[k%len(w.Scales.S)] = s
			}
			name := fmt.Sprintf("specials n=%d [%d,%d] at (%d,%d)", c.n, c.rows, c.cols, c.rowOff, c.colOff)
			x := randSlice(r, c.n*c.cols, 1)
			checkFP8Product(t, name, w, x, c.n)
			dst := make([]float32, c.n*c.rows)
			MatMulT(dst, x, c.n, w)
			for i := range c.n {
				for _, j := range []int{2, 5} {
					if v := dst[i*c.rows+j]; v == v {
						t.Errorf("%s: row %d output %d = %v with a NaN code, want NaN", name, i, j, v)
					}
				}
			}
		}
	})
}

// TestFP8PromptGroupsNaN: a prompt's product through the groups of eight
// weight rows gives NaN for exactly the rows holding a NaN code (their
// group is dequantized instead of decoded) and the dequantized product's
// bits everywhere.
func TestFP8PromptGroupsNaN(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(62)
		const n, rows, cols = 70, 16, 160
		w := randFP8(r, rows, cols, 0, 0)
		w.FP8[2*cols+5] = 0x7F    // row 2
		w.FP8[13*cols+150] = 0xFF // row 13, the second group
		x := randSlice(r, n*cols, 1)
		checkFP8Product(t, "prompt groups with NaN codes", w, x, n)
		dst := make([]float32, n*rows)
		MatMulT(dst, x, n, w)
		for i := range n {
			for j := range rows {
				if v := dst[i*rows+j]; (v != v) != (j == 2 || j == 13) {
					t.Errorf("row %d output %d = %v: NaN exactly for the rows with a NaN code (2, 13)", i, j, v)
				}
			}
		}
	})
}

// FuzzMatMulTFP8: any shape, offset and batch gives the dequantized f32
// product's bits under the active implementation. An odd seed rounds the
// block scales to powers of two and marks the matrix as NewFP8Matrix
// would, so that one-row products may take the prescaled activations.
func FuzzMatMulTFP8(f *testing.F) {
	f.Add(uint8(1), uint16(9), uint16(300), uint8(64), uint8(64), uint64(2))
	f.Add(uint8(7), uint16(5), uint16(1040), uint8(3), uint8(17), uint64(2))
	f.Add(uint8(1), uint16(40), uint16(129), uint8(127), uint8(0), uint64(4))
	f.Add(uint8(1), uint16(40), uint16(1040), uint8(64), uint8(16), uint64(1))
	f.Fuzz(func(t *testing.T, n uint8, rows, cols uint16, rowOff, colOff uint8, seed uint64) {
		nn, rr, cc := int(n%9), int(rows%70), int(cols%1200)
		r := newRand(seed)
		w := randFP8(r, rr, cc, int(rowOff), int(colOff))
		if seed%2 == 1 {
			for i, v := range w.Scales.S {
				_, e := math.Frexp(float64(v))
				w.Scales.S[i] = float32(math.Ldexp(1, e))
			}
			w.CheckFP8Codes()
		}
		checkFP8Product(t, fmt.Sprintf("n=%d [%d,%d] at (%d,%d)", nn, rr, cc, rowOff, colOff), w, randSlice(r, nn*cc, 1), nn)
	})
}

// TestFP8GEMVNaNCodes: the in-register tiles (which this test checks are
// the ones taken) give NaN for exactly the rows holding a NaN code,
// wherever the code lies: in a chunk the tile checks, in the partial chunk
// the caller checks, or in the scalar tail; and the other rows keep the
// dequantized product's bits.
func TestFP8GEMVNaNCodes(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(62)
		for _, c := range []struct{ rows, cols, colOff int }{{8, 16, 0}, {9, 40, 16}, {16, 80, 64}, {12, gemmKC + 24, 0}, {8, 2100, 112}} {
			for _, col := range []int{0, c.cols / 2, c.cols - 17, c.cols - 1} {
				if col < 0 {
					continue
				}
				w := randFP8(r, c.rows, c.cols, 0, c.colOff)
				if l := activeLevel(); l != levelRef && !fp8InRegister(w, l, 0, c.rows) {
					t.Fatalf("[%d,%d] at column offset %d: the in-register tiles are not used", c.rows, c.cols, c.colOff)
				}
				bad := 5 % c.rows
				w.FP8[bad*c.cols+col] = 0x7F | uint8(col&1)<<7
				// One activation row (the eight-row GEMV tile), three (the
				// four-row tile), eight (rows decoded to a scratch) and 70
				// (blocks of rows decoded to the panel).
				for _, n := range []int{1, 3, 8, 70} {
					name := fmt.Sprintf("n=%d [%d,%d] at column offset %d, NaN code in row %d column %d", n, c.rows, c.cols, c.colOff, bad, col)
					x := randSlice(r, n*c.cols, 1)
					checkFP8Product(t, name, w, x, n)
					dst := make([]float32, n*c.rows)
					MatMulT(dst, x, n, w)
					for o, v := range dst {
						if j := o % c.rows; (v != v) != (j == bad) {
							t.Errorf("%s: row %d output %d = %v", name, o/c.rows, j, v)
						}
					}
				}
			}
		}
	})
}

// TestFP8TilePrefetch pins where the one-row fp8 tile prefetches: ahead in its own
// rows while the distance stays in them, then into the rows of the next
// tile (the tile's height below); the matrix's last tile, which has no next
// tile, keeps the plain distance.
func TestFP8TilePrefetch(t *testing.T) {
	const d = fp8GEMVPrefetch
	tests := []struct {
		name             string
		rows, cols       int
		jt, k0           int
		tileRows, dist   int
		want             int
		nextTileRowStart int // the row whose line the first code's prefetch reads, counted from jt
	}{
		{"short rows, first block", 6144, 2048, 0, 0, 8, d, d + 7*2048, 8},
		{"short rows, second block", 6144, 2048, 8, 1024, 8, d, d + 7*2048, 8},
		{"long rows, early block", 6144, 16384, 0, 4096, 8, d, d, 0},
		{"long rows, block before the last two", 6144, 16384, 0, 16384 - 3*1024, 8, d, d, 0},
		{"long rows, second-last block", 6144, 16384, 0, 16384 - 2*1024, 8, d, d + 7*16384, 8},
		{"long rows, last block", 6144, 16384, 16, 16384 - 1024, 8, d, d + 7*16384, 8},
		{"last tile keeps the plain distance", 6144, 2048, 6144 - 8, 0, 8, d, d, 1},
		{"second-last tile reaches the last", 6144, 2048, 6144 - 16, 1024, 8, d, d + 7*2048, 8},
	}
	for _, tc := range tests {
		w := &Matrix{Rows: tc.rows, Cols: tc.cols}
		got := fp8TilePrefetch(w, tc.jt, tc.tileRows, tc.k0, tc.dist)
		if got != tc.want {
			t.Errorf("%s: fp8TilePrefetch(%d×%d, jt=%d, rows=%d, k0=%d, dist=%d) = %d, want %d", tc.name, tc.rows, tc.cols, tc.jt, tc.tileRows, tc.k0, tc.dist, got, tc.want)
		}
		// The line prefetched for row jt's code at k0: its row, relative to jt.
		if row := (tc.k0 + got) / tc.cols; row != tc.nextTileRowStart {
			t.Errorf("%s: prefetch of row 0's code %d lands in row %d, want %d", tc.name, tc.k0, row, tc.nextTileRowStart)
		}
	}
}

// TestMatMulTFP8PowerOfTwoScales: a matrix whose block scales are all
// powers of two (DeepSeek's ue8m0) takes the one-row pair tile over
// prescaled activations, and every product keeps the bits of the f32
// product with the dequantized matrix: pairs in one block of rows and
// across several, groups straddling two blocks, rows of 4,096 codes (the
// lagged walk), column offsets, the scales at both ends of the range, and
// activations too large for it or NaN (the tiles that multiply each code).
func TestMatMulTFP8PowerOfTwoScales(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(63)
		for _, c := range []struct {
			rows, cols, rowOff, colOff int
			scales                     []float32 // cycled over the blocks; nil for random powers of two
			xScale                     float32
			pow2, prescaled            bool // the scales marked; prescaled on AVX-512
		}{
			{16, 256, 0, 0, nil, 1, true, true},
			{48, 1040, 0, 16, nil, 1, true, true},
			{300, 160, 0, 0, nil, 1, true, true},
			{136, 512, 64, 0, nil, 1, true, true},
			{32, 4096, 0, 0, nil, 1, true, true},
			{64, 2*gemmKC + 48, 0, 64, nil, 1, true, true},
			{16, 256, 0, 0, []float32{0x1p-100, 0x1p7}, 1, true, true},
			{16, 256, 0, 0, []float32{0x1p-3}, 0x1p11 - 1, true, true},
			{16, 256, 0, 0, []float32{0x1p-3}, 0x1p11, true, false},
			{16, 256, 0, 0, []float32{0x1p-3, 0.75}, 1, false, false},
			{16, 256, 0, 0, []float32{0x1p-101}, 1, false, false},
		} {
			name := fmt.Sprintf("[%d,%d] at (%d,%d), scales %v, x up to %g", c.rows, c.cols, c.rowOff, c.colOff, c.scales, c.xScale)
			w := randFP8(r, c.rows, c.cols, c.rowOff, c.colOff)
			for i := range w.Scales.S {
				if c.scales != nil {
					w.Scales.S[i] = c.scales[i%len(c.scales)]
				} else {
					w.Scales.S[i] = float32(math.Ldexp(1, -14+r.IntN(12)))
				}
			}
			w.CheckFP8Codes()
			x := randSlice(r, c.cols, 1)
			x[c.cols/2] = c.xScale
			if got := w.pow2Max != 0; got != c.pow2 {
				t.Errorf("%s: power-of-two scales marked %v, want %v", name, got, c.pow2)
			}
			if activeLevel() == levelAVX512 {
				ps := newPrescaled(w, x)
				if got := ps.buf != nil; got != c.prescaled {
					t.Errorf("%s: prescaled %v, want %v", name, got, c.prescaled)
				}
				ps.release()
			}
			checkFP8Product(t, name, w, x, 1)
			xn := append([]float32(nil), x...)
			xn[1] = float32(math.NaN())
			checkFP8Product(t, name+", a NaN activation", w, xn, 1)
		}
	})
}

// TestPow2ScalesMax: the largest scale when every one is a power of two
// in [pow2ScaleMin, pow2ScaleMax], else 0.
func TestPow2ScalesMax(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		s    []float32
		want float32
	}{
		{nil, 0},
		{[]float32{0x1p-7, 0x1p-3, 1}, 1},
		{[]float32{pow2ScaleMin, pow2ScaleMax}, pow2ScaleMax},
		{[]float32{0x1p-7, 0.75}, 0},
		{[]float32{0x1p-7, 0x1p-101}, 0},
		{[]float32{0x1p-7, 0x1p8}, 0},
		{[]float32{0x1p-7, 0}, 0},
		{[]float32{0x1p-7, -0x1p-7}, 0},
		{[]float32{0x1p-7, nan}, 0},
		{[]float32{0x1p-7, inf}, 0},
		{[]float32{math.Float32frombits(1)}, 0},
	} {
		if got := pow2ScalesMax(c.s); got != c.want {
			t.Errorf("pow2ScalesMax(%v) = %g, want %g", c.s, got, c.want)
		}
	}
}
