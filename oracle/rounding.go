package oracle

import (
	"fmt"
	"math"

	"github.com/cpmla/cpmla/numfmt"
)

// DefaultRoundingTieTol bounds how far (relative to the larger of the
// element's magnitude and the largest magnitude in its row) an engine's
// float32 value may sit from the oracle's float64 value and still count as
// the same value rounded on the other side of a boundary. A float32
// computation of these rows is accurate to about 1e-6 of the row's scale.
const DefaultRoundingTieTol = 1e-5

// StoredValues lets the oracle resolve rounding ties against what an engine
// actually stored. Row returns the dequantized MLA cache row of (layer,
// position); Key the dequantized indexer key. Either may be nil.
//
// Every element the oracle rounds is checked against the stored value: it
// must be the oracle's own rounding, or — only when the float64 value v lies
// within δ = RoundingTieTol·max(|v|, max|row|) of a rounding boundary, so
// that a float32 computation may land on either side — a code between the
// roundings of the row moved by −δ and by +δ. The oracle then continues with the stored value, so the
// comparison isolates the computation from the choice at a boundary. A stored
// value outside that set is reported as an error in the Result.
type StoredValues struct {
	Row func(layer, pos int) []float32
	Key func(layer, pos int) []float32
	// RoundingTieTol defaults to DefaultRoundingTieTol.
	RoundingTieTol float64
}

// RoundingReport counts how the stored values compared with the oracle's own
// rounding.
type RoundingReport struct {
	// Elements checked against stored values.
	Checked int
	// Ties: elements where the engine legitimately took the other
	// neighbouring code at a rounding boundary.
	Ties int
	// Mismatches describes stored values that no rounding within tolerance
	// explains (at most the first 10).
	Mismatches []string
	// MismatchCount is the total number of such elements.
	MismatchCount int
}

func (r *RoundingReport) mismatch(kind string, layer, pos, i int, v float64, own, stored float32) {
	r.MismatchCount++
	if len(r.Mismatches) < 10 {
		r.Mismatches = append(r.Mismatches, fmt.Sprintf("%s layer %d position %d element %d: float64 %.9g rounds to %.9g, stored %.9g", kind, layer, pos, i, v, own, stored))
	}
}

// resolve rounds vals (float64) with round into own, and if stored values are
// given, checks and adopts them element by element.
func (m *Model) resolve(kind string, layer, pos int, vals []float64, stored []float32, round func([]float32)) {
	n := len(vals)
	own := make([]float32, n)
	for i, v := range vals {
		own[i] = float32(v)
	}
	round(own)
	if stored == nil {
		for i, v := range own {
			vals[i] = float64(v)
		}
		return
	}
	rep := &m.rounding
	tol := m.stored.RoundingTieTol
	if tol == 0 {
		tol = DefaultRoundingTieTol
	}
	var lo, hi []float32
	if len(stored) != n {
		rep.mismatch(kind, layer, pos, -1, 0, 0, 0)
		for i, v := range own {
			vals[i] = float64(v)
		}
		return
	}
	for i := range vals {
		rep.Checked++
		if own[i] == stored[i] || (math.IsNaN(float64(own[i])) && math.IsNaN(float64(stored[i]))) {
			vals[i] = float64(own[i])
			continue
		}
		if lo == nil {
			rowMax := 0.0
			for _, v := range vals {
				rowMax = math.Max(rowMax, math.Abs(v))
			}
			lo, hi = make([]float32, n), make([]float32, n)
			for j, v := range vals {
				d := tol * math.Max(math.Abs(v), rowMax)
				lo[j] = float32(v - d)
				hi[j] = float32(v + d)
			}
			round(lo)
			round(hi)
		}
		a, b := min(lo[i], hi[i], own[i]), max(lo[i], hi[i], own[i])
		if stored[i] >= a && stored[i] <= b {
			rep.Ties++
			vals[i] = float64(stored[i])
			continue
		}
		rep.mismatch(kind, layer, pos, i, vals[i], own[i], stored[i])
		vals[i] = float64(own[i])
	}
}

// roundF32 is the identity: the values were already converted to float32.
func roundF32([]float32) {}

func roundBF16s(v []float32) {
	for i, x := range v {
		v[i] = numfmt.RoundBF16(x)
	}
}
