package conformance

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cpmla/cpmla/safetensors"
)

// Kind says how an output tensor is compared with its reference.
type Kind int

const (
	// Close is FlashMLA's comparator: ±Inf and NaN positions equal, every
	// finite element within Abs or Rel, cos_diff below CosDiff.
	Close Kind = iota + 1
	// Exact requires every element to be equal (float32 by value, NaN
	// matching NaN; integers and bytes bit for bit).
	Exact
	// TopK requires equal indices except at positions the reference marks
	// as ties, where any key whose reference score is as close is accepted.
	TopK
)

func (k Kind) String() string {
	switch k {
	case Close:
		return "close"
	case Exact:
		return "exact"
	case TopK:
		return "topk"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Tolerance is the acceptance rule of one output tensor.
type Tolerance struct {
	Kind Kind
	// Close: an element passes if |a−r| < Abs or |a−r|/(|r|+1e-6) < Rel.
	Abs, Rel float64
	// Close: bound on cos_diff = 1 − 2Σar/Σ(a²+r²); 0 means no bound.
	CosDiff float64
	// TopK: the want tensors holding the reference scores (compared with
	// their own Close tolerance, which also defines a tie) and the tie
	// marks (U8, 1 = tie).
	Scores, Ties string
}

// relFloor is the denominator floor of the relative error, as in FlashMLA.
const relFloor = 1e-6

// tolerances per kernel and output tensor. Sparse attention: FlashMLA's
// test thresholds (sparse prefill against its fp32 reference, sparse
// decode). Indexer scores and the LSE combine: float32 arithmetic against a
// float64 reference. Formats and index maps: exact.
var tolerances = map[string]map[string]Tolerance{
	KernelSparsePrefill: {
		"out":        {Kind: Close, Abs: 8e-4, Rel: 3.01 / 128, CosDiff: 7e-6},
		"lse":        {Kind: Close, Abs: 1e-6, Rel: 2.01 / 65536},
		"max_logits": {Kind: Close, Abs: 1e-6, Rel: 2.01 / 65536},
	},
	KernelSparseDecode: {
		"out": {Kind: Close, Abs: 1e-3, Rel: 2.01 / 128, CosDiff: 5e-6},
		"lse": {Kind: Close, Abs: 1e-6, Rel: 8.01 / 65536},
	},
	KernelDSMLAQuantize:   {"records": {Kind: Exact}},
	KernelDSMLADequantize: {"kv": {Kind: Exact}},
	KernelIndexerTopK: {
		"scores":  {Kind: Close, Abs: 1e-5, Rel: 1e-5},
		"indices": {Kind: TopK, Scores: "scores", Ties: "indices_tie"},
	},
	KernelLSECombine: {
		"out": {Kind: Close, Abs: 1e-6, Rel: 1e-5, CosDiff: 1e-10},
		"lse": {Kind: Close, Abs: 1e-6, Rel: 1e-6},
	},
	KernelDCPLocalSeqLens: {"local_seq_lens": {Kind: Exact}},
	KernelDCPLocalize: {
		"slots":        {Kind: Exact},
		"valid_counts": {Kind: Exact},
	},
}

// Tolerances returns the acceptance rule of every output tensor of kernel.
func Tolerances(kernel string) (map[string]Tolerance, error) {
	t, ok := tolerances[kernel]
	if !ok {
		return nil, fmt.Errorf("unknown kernel %q (known: %s)", kernel, strings.Join(Kernels(), ", "))
	}
	out := make(map[string]Tolerance, len(t))
	for k, v := range t {
		out[k] = v
	}
	return out, nil
}

// TensorReport is the comparison of one output tensor.
type TensorReport struct {
	Name  string
	Kind  Kind
	Elems int
	// MaxAbs and MaxRel are the largest |a−r| and |a−r|/(|r|+1e-6) over the
	// elements finite in both tensors (index differences for TopK are not
	// measured: see Substituted).
	MaxAbs, MaxRel float64
	// CosDiff is 1 − 2Σar/Σ(a²+r²) over those elements (0 when both are 0).
	CosDiff float64
	// Failures counts elements outside the tolerance; First describes the
	// first of them.
	Failures int
	First    string
	// Substituted counts tie-marked TopK positions holding a different but
	// equally good key.
	Substituted int
	// Problem is set when the tensor could not be compared at all (missing,
	// wrong dtype or shape).
	Problem string
}

// OK reports whether the tensor passed.
func (r TensorReport) OK() bool { return r.Problem == "" && r.Failures == 0 }

// Compare checks got against want with tol (from Tolerances). Every tensor
// of want is compared except the auxiliary ones a TopK rule reads (tie
// marks); got must hold exactly the compared tensors. The report lists the
// compared tensors in want's order; the error, non-nil when anything fails,
// is one line naming each failing tensor.
func Compare(got, want []safetensors.Tensor, tol map[string]Tolerance) ([]TensorReport, error) {
	wantBy := map[string]safetensors.Tensor{}
	for _, t := range want {
		wantBy[t.Name] = t
	}
	aux := map[string]bool{}
	for _, t := range tol {
		if t.Kind == TopK {
			aux[t.Ties] = true
		}
	}
	gotBy := map[string]safetensors.Tensor{}
	for _, t := range got {
		gotBy[t.Name] = t
	}
	var reports []TensorReport
	var problems []string
	for _, w := range want {
		if aux[w.Name] {
			continue
		}
		rep := TensorReport{Name: w.Name}
		t, ok := tol[w.Name]
		g, have := gotBy[w.Name]
		switch {
		case !ok:
			rep.Problem = "no tolerance is defined for this tensor"
		case !have:
			rep.Problem = "missing from the output"
		default:
			rep.Kind = t.Kind
			compareTensor(&rep, g, w, t, tol, wantBy)
		}
		reports = append(reports, rep)
		if !rep.OK() {
			problems = append(problems, rep.summary())
		}
	}
	for _, g := range got {
		if _, ok := wantBy[g.Name]; !ok || aux[g.Name] {
			problems = append(problems, fmt.Sprintf("%s: not in the reference", g.Name))
		}
	}
	if len(problems) > 0 {
		return reports, errors.New(strings.Join(problems, "; "))
	}
	return reports, nil
}

func (r TensorReport) summary() string {
	if r.Problem != "" {
		return fmt.Sprintf("%s: %s", r.Name, r.Problem)
	}
	return fmt.Sprintf("%s: %d of %d elements fail (%s), first %s", r.Name, r.Failures, r.Elems, r.Kind, r.First)
}

// checkShapes verifies that g and w have the same dtype and shape and that
// their data sizes are consistent; it returns the element count.
func checkShapes(g, w safetensors.Tensor) (int, string) {
	if g.DType != w.DType {
		return 0, fmt.Sprintf("dtype %s, want %s", g.DType, w.DType)
	}
	if !slices.Equal(g.Shape, w.Shape) {
		return 0, fmt.Sprintf("shape %v, want %v", g.Shape, w.Shape)
	}
	n, err := elems(w.Shape)
	if err != nil {
		return 0, err.Error()
	}
	size := n * w.DType.Size()
	if len(g.Data) != size || len(w.Data) != size {
		return 0, fmt.Sprintf("data sizes %d (got) and %d (want), shape %v %s needs %d bytes", len(g.Data), len(w.Data), w.Shape, w.DType, size)
	}
	return n, ""
}

func compareTensor(rep *TensorReport, g, w safetensors.Tensor, t Tolerance, tol map[string]Tolerance, wantBy map[string]safetensors.Tensor) {
	n, problem := checkShapes(g, w)
	if problem != "" {
		rep.Problem = problem
		return
	}
	rep.Elems = n
	switch t.Kind {
	case Close, Exact:
		switch w.DType {
		case safetensors.F32:
			compareFloats(rep, toF32(g), toF32(w), w.Shape, t)
		case safetensors.I32, safetensors.U8:
			if t.Kind != Exact {
				rep.Problem = fmt.Sprintf("%s tensors are compared exactly, the tolerance says %s", w.DType, t.Kind)
				return
			}
			compareInts(rep, g, w)
		default:
			rep.Problem = fmt.Sprintf("cannot compare %s tensors", w.DType)
		}
	case TopK:
		compareTopK(rep, g, w, t, tol, wantBy)
	default:
		rep.Problem = fmt.Sprintf("unknown comparison kind %v", t.Kind)
	}
}

// at formats the multi-index of flat element i of shape.
func at(shape []int, i int) string {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return fmt.Sprint(idx)
}

func (r *TensorReport) fail(shape []int, i int, format string, args ...any) {
	if r.Failures == 0 {
		r.First = at(shape, i) + ": " + fmt.Sprintf(format, args...)
	}
	r.Failures++
}

func compareFloats(rep *TensorReport, a, r []float32, shape []int, t Tolerance) {
	var dot, norm float64
	for i := range r {
		av, rv := float64(a[i]), float64(r[i])
		aNaN, rNaN := math.IsNaN(av), math.IsNaN(rv)
		aInf, rInf := math.IsInf(av, 0), math.IsInf(rv, 0)
		if aNaN || rNaN || aInf || rInf {
			if !(aNaN && rNaN) && !(aInf && rInf && av == rv) {
				rep.fail(shape, i, "got %v, want %v", a[i], r[i])
			}
			continue
		}
		diff := math.Abs(av - rv)
		rel := diff / (math.Abs(rv) + relFloor)
		rep.MaxAbs = max(rep.MaxAbs, diff)
		rep.MaxRel = max(rep.MaxRel, rel)
		dot += av * rv
		norm += av*av + rv*rv
		switch t.Kind {
		case Exact:
			if av != rv {
				rep.fail(shape, i, "got %v, want %v", a[i], r[i])
			}
		default:
			if !(diff < t.Abs || rel < t.Rel) {
				rep.fail(shape, i, "got %v, want %v (abs %.3g ≥ %.3g, rel %.3g ≥ %.3g)", a[i], r[i], diff, t.Abs, rel, t.Rel)
			}
		}
	}
	if norm > 0 {
		rep.CosDiff = 1 - 2*dot/norm
	}
	if t.Kind == Close && t.CosDiff > 0 && !(rep.CosDiff < t.CosDiff) {
		if rep.Failures == 0 {
			rep.First = fmt.Sprintf("cos_diff %.3g ≥ %.3g", rep.CosDiff, t.CosDiff)
		}
		rep.Failures++
	}
}

func compareInts(rep *TensorReport, g, w safetensors.Tensor) {
	if w.DType == safetensors.U8 {
		for i := range w.Data {
			if g.Data[i] != w.Data[i] {
				rep.fail(w.Shape, i, "got %#02x, want %#02x", g.Data[i], w.Data[i])
			}
		}
		return
	}
	a, r := toI32(g), toI32(w)
	for i := range r {
		if a[i] != r[i] {
			rep.MaxAbs = max(rep.MaxAbs, math.Abs(float64(a[i])-float64(r[i])))
			rep.fail(w.Shape, i, "got %d, want %d", a[i], r[i])
		}
	}
}

// compareTopK checks top-k indices [t, k] against the reference indices,
// the reference scores [t, s] and the tie marks [t, k].
func compareTopK(rep *TensorReport, g, w safetensors.Tensor, t Tolerance, tol map[string]Tolerance, wantBy map[string]safetensors.Tensor) {
	if w.DType != safetensors.I32 || len(w.Shape) != 2 {
		rep.Problem = fmt.Sprintf("top-k indices must be I32 [t, k], the reference is %s %v", w.DType, w.Shape)
		return
	}
	sc, ok1 := wantBy[t.Scores]
	ties, ok2 := wantBy[t.Ties]
	st, ok3 := tol[t.Scores]
	if !ok1 || !ok2 || !ok3 {
		rep.Problem = fmt.Sprintf("the reference lacks %q or %q, or %q has no tolerance", t.Scores, t.Ties, t.Scores)
		return
	}
	rows, k := w.Shape[0], w.Shape[1]
	if sc.DType != safetensors.F32 || len(sc.Shape) != 2 || sc.Shape[0] != rows ||
		ties.DType != safetensors.U8 || !slices.Equal(ties.Shape, w.Shape) {
		rep.Problem = fmt.Sprintf("reference %q is %s %v and %q is %s %v, want F32 [%d, s] and U8 %v", t.Scores, sc.DType, sc.Shape, t.Ties, ties.DType, ties.Shape, rows, w.Shape)
		return
	}
	if _, problem := checkShapes(sc, sc); problem != "" {
		rep.Problem = fmt.Sprintf("reference %q: %s", t.Scores, problem)
		return
	}
	if _, problem := checkShapes(ties, ties); problem != "" {
		rep.Problem = fmt.Sprintf("reference %q: %s", t.Ties, problem)
		return
	}
	s := sc.Shape[1]
	scores := toF32(sc)
	a, r := toI32(g), toI32(w)
	// tau is the tie distance the reference used: twice the score tolerance,
	// with 1% slack for the float32 rounding of the stored scores.
	tau := func(x float64) float64 { return 1.01 * 2 * (st.Abs + st.Rel*math.Abs(x)) }
	seen := map[int32]bool{}
	for i := range rows {
		clear(seen)
		ref := scores[i*s : (i+1)*s]
		for p := range k {
			e := i*k + p
			gv, rv := a[e], r[e]
			if gv >= 0 {
				if int(gv) >= s || math.IsInf(float64(ref[gv]), -1) || math.IsNaN(float64(ref[gv])) {
					rep.fail(w.Shape, e, "got key %d, which row %d may not select", gv, i)
					continue
				}
				if seen[gv] {
					rep.fail(w.Shape, e, "got key %d twice in row %d", gv, i)
					continue
				}
				seen[gv] = true
			}
			if gv == rv {
				continue
			}
			if ties.Data[e] == 0 || gv < 0 || rv < 0 {
				rep.fail(w.Shape, e, "got %d, want %d", gv, rv)
				continue
			}
			want := float64(ref[rv])
			if d := math.Abs(float64(ref[gv]) - want); d > tau(want) {
				rep.fail(w.Shape, e, "got key %d (score %v), want key %d (score %v): not a tie", gv, ref[gv], rv, ref[rv])
				continue
			}
			rep.Substituted++
		}
	}
}
