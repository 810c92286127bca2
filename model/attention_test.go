package model

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/numfmt"
)

// TestTransposerKeepsValues: a transposed row range in every storage holds
// exactly the weight's values, fp8 included (codes copied, the transposed
// scale grid shared, the codes checked for NaN codes as the weight's were),
// for ranges that cut through scale blocks, several of them cut into one
// allocation in any order.
func TestTransposerKeepsValues(t *testing.T) {
	const rows, cols = 448 * 3, 300
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	bf := make([]uint16, len(w))
	numfmt.F32sToBF16(bf, w)
	br, bc := numfmt.WeightScaleBlocks(rows, cols)
	codes, scales := make([]uint8, len(w)), make([]float32, br*bc)
	if err := numfmt.QuantizeE4M3Blocks(codes, scales, w, rows, cols); err != nil {
		t.Fatal(err)
	}
	fp8, err := kernels.NewFP8Matrix(rows, cols, codes, scales)
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*kernels.Matrix{
		"f32":                {Rows: rows, Cols: cols, F32: w},
		"bf16":               {Rows: rows, Cols: cols, BF16: bf},
		"fp8":                fp8,
		"fp8 view at row 70": fp8.SliceRows(70, rows-70),
	} {
		tr := newTransposer(m)
		for _, rg := range []struct {
			los []int
			n   int
		}{{[]int{0, 448, 896}, 192}, {[]int{5}, 130}, {[]int{300, 0}, 64}} {
			los := slices.DeleteFunc(rg.los, func(lo int) bool { return lo+rg.n > m.Rows })
			for i, got := range tr.rowsEach(los, rg.n) {
				lo, n := los[i], rg.n
				if err := got.Validate(); err != nil {
					t.Fatalf("%s rows [%d, %d): %v", name, lo, lo+n, err)
				}
				// fp8 codes copied are checked once, as the weight's were, so
				// that the absorbed products take the checked codes' tiles.
				if got.FP8Checked() != m.FP8Checked() {
					t.Errorf("%s rows [%d, %d): transposed codes checked = %v, the weight's %v", name, lo, lo+n, got.FP8Checked(), m.FP8Checked())
				}
				col := make([]float32, n)
				row := make([]float32, cols)
				for j := 0; j < n; j++ {
					want := m.Row(lo+j, row)
					for c := 0; c < cols; c++ {
						got.Row(c, col)
						if col[j] != want[c] {
							t.Fatalf("%s rows [%d, %d): transposed (%d, %d) = %v, weight (%d, %d) = %v", name, lo, lo+n, c, j, col[j], lo+j, c, want[c])
						}
					}
				}
			}
		}
	}
}
