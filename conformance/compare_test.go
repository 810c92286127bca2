package conformance

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/safetensors"
)

var (
	inf = float32(math.Inf(1))
	nan = float32(math.NaN())
)

// outcome is what a comparison is judged by.
type outcome struct {
	Failures, Substituted int
	First, Err            string
}

func judge(t *testing.T, got, ref []safetensors.Tensor, tol map[string]Tolerance) (outcome, []TensorReport) {
	t.Helper()
	reps, err := Compare(got, ref, tol)
	var o outcome
	for _, r := range reps {
		o.Failures += r.Failures
		o.Substituted += r.Substituted
		if o.First == "" {
			o.First = r.First
		}
	}
	if err != nil {
		o.Err = err.Error()
		if strings.Contains(o.Err, "\n") {
			t.Errorf("Compare error spans several lines: %q", o.Err)
		}
	}
	return o, reps
}

func TestCompareFloats(t *testing.T) {
	closeTol := map[string]Tolerance{"x": {Kind: Close, Abs: 8e-4, Rel: 3.01 / 128}}
	cosTol := map[string]Tolerance{"x": {Kind: Close, Abs: 2, Rel: 0, CosDiff: 1e-6}}
	exactTol := map[string]Tolerance{"x": {Kind: Exact}}
	f := func(v ...float32) []safetensors.Tensor {
		return []safetensors.Tensor{safetensors.FromF32("x", []int{1, len(v)}, v)}
	}
	tests := []struct {
		name     string
		got, ref []safetensors.Tensor
		tol      map[string]Tolerance
		want     outcome
	}{
		{name: "identical", got: f(1, -2, 0.5), ref: f(1, -2, 0.5), tol: closeTol},
		{name: "within abs", got: f(1.0005, 0), ref: f(1, 0.0007), tol: closeTol},
		{name: "within rel", got: f(100.5), ref: f(100), tol: closeTol},
		{name: "outside both", got: f(0, 1.1), ref: f(0, 1), tol: closeTol, want: outcome{
			Failures: 1,
			First:    "[0 1]: got 1.1, want 1 (abs 0.1 ≥ 0.0008, rel 0.1 ≥ 0.0235)",
			Err:      "x: 1 of 2 elements fail (close), first [0 1]: got 1.1, want 1 (abs 0.1 ≥ 0.0008, rel 0.1 ≥ 0.0235)"}},
		{name: "matching inf and nan", got: f(inf, -inf, nan), ref: f(inf, -inf, nan), tol: closeTol},
		{name: "inf sign", got: f(-inf), ref: f(inf), tol: closeTol, want: outcome{
			Failures: 1, First: "[0 0]: got -Inf, want +Inf",
			Err: "x: 1 of 1 elements fail (close), first [0 0]: got -Inf, want +Inf"}},
		{name: "nan where finite", got: f(nan), ref: f(0), tol: closeTol, want: outcome{
			Failures: 1, First: "[0 0]: got NaN, want 0",
			Err: "x: 1 of 1 elements fail (close), first [0 0]: got NaN, want 0"}},
		{name: "cos_diff", got: f(0, 1), ref: f(1, 0), tol: cosTol, want: outcome{
			Failures: 1, First: "cos_diff 1 ≥ 1e-06",
			Err: "x: 1 of 2 elements fail (close), first cos_diff 1 ≥ 1e-06"}},
		{name: "exact signed zero", got: f(float32(math.Copysign(0, -1)), 3), ref: f(0, 3), tol: exactTol},
		{name: "exact one ulp", got: f(math.Nextafter32(1, 2)), ref: f(1), tol: exactTol, want: outcome{
			Failures: 1, First: "[0 0]: got 1.0000001, want 1",
			Err: "x: 1 of 1 elements fail (exact), first [0 0]: got 1.0000001, want 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := judge(t, tt.got, tt.ref, tt.tol)
			if diff := cmp.Diff(tt.want, o); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompareMeasures(t *testing.T) {
	want := []safetensors.Tensor{safetensors.FromF32("x", []int{3}, []float32{1, 2, inf})}
	got := []safetensors.Tensor{safetensors.FromF32("x", []int{3}, []float32{1.25, 2, inf})}
	reps, err := Compare(got, want, map[string]Tolerance{"x": {Kind: Close, Abs: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	// By definition over the finite elements: max |a−r| = 0.25,
	// max rel = 0.25/(1+1e-6), cos_diff = 1 − 2(1.25+4)/(1.5625+1+4+4).
	wantRep := []TensorReport{{Name: "x", Kind: Close, Elems: 3, MaxAbs: 0.25, MaxRel: 0.25 / (1 + 1e-6), CosDiff: 1 - 2*5.25/10.5625}}
	// The expected values are folded exactly at compile time, the measured
	// ones in float64: equal to a few ulps.
	if diff := cmp.Diff(wantRep, reps, cmpopts.EquateApprox(1e-12, 0)); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}

func TestCompareIntsAndStructure(t *testing.T) {
	exact := map[string]Tolerance{"i": {Kind: Exact}, "b": {Kind: Exact}}
	i32 := func(v ...int32) safetensors.Tensor { return safetensors.FromI32("i", []int{len(v)}, v) }
	u8 := func(v ...byte) safetensors.Tensor { return safetensors.FromU8("b", []int{len(v)}, v) }
	ts := func(x ...safetensors.Tensor) []safetensors.Tensor { return x }
	tests := []struct {
		name     string
		got, ref []safetensors.Tensor
		want     outcome
	}{
		{name: "equal", got: ts(i32(1, -1), u8(7)), ref: ts(i32(1, -1), u8(7))},
		{name: "int differs", got: ts(i32(1, 5), u8(7)), ref: ts(i32(1, -1), u8(7)), want: outcome{
			Failures: 1, First: "[1]: got 5, want -1", Err: "i: 1 of 2 elements fail (exact), first [1]: got 5, want -1"}},
		{name: "byte differs", got: ts(i32(1), u8(0x80)), ref: ts(i32(1), u8(0x00)), want: outcome{
			Failures: 1, First: "[0]: got 0x80, want 0x00", Err: "b: 1 of 1 elements fail (exact), first [0]: got 0x80, want 0x00"}},
		{name: "missing", got: ts(u8(7)), ref: ts(i32(1), u8(7)), want: outcome{Err: "i: missing from the output"}},
		{name: "extra", got: ts(i32(1), u8(7), safetensors.FromI32("z", []int{1}, []int32{0})), ref: ts(i32(1), u8(7)),
			want: outcome{Err: "z: not in the reference"}},
		{name: "shape", got: ts(i32(1, 2), u8(7)), ref: ts(i32(1), u8(7)), want: outcome{Err: "i: shape [2], want [1]"}},
		{name: "dtype", got: ts(safetensors.FromF32("i", []int{1}, []float32{1}), u8(7)), ref: ts(i32(1), u8(7)),
			want: outcome{Err: "i: dtype F32, want I32"}},
		{name: "no tolerance", got: ts(i32(1)), ref: ts(safetensors.FromI32("q", []int{1}, []int32{1})),
			want: outcome{Err: "q: no tolerance is defined for this tensor; i: not in the reference"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := judge(t, tt.got, tt.ref, exact)
			if diff := cmp.Diff(tt.want, o); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCompareTopK uses one score row: keys 1 and 2 score 2.000001 and 2,
// closer than the tie distance 2·(1e-5 + 1e-5·2) = 6e-5, so the reference
// marks positions 1 and 2 as ties; key 3 scores 1 and key 4 is masked.
func TestCompareTopK(t *testing.T) {
	tol := map[string]Tolerance{
		"scores":  {Kind: Close, Abs: 1e-5, Rel: 1e-5},
		"indices": {Kind: TopK, Scores: "scores", Ties: "indices_tie"},
	}
	scores := safetensors.FromF32("scores", []int{1, 5}, []float32{3, 2.000001, 2, 1, -inf})
	want := []safetensors.Tensor{
		scores,
		safetensors.FromI32("indices", []int{1, 3}, []int32{0, 1, 2}),
		safetensors.FromU8("indices_tie", []int{1, 3}, []byte{0, 1, 1}),
	}
	got := func(idx ...int32) []safetensors.Tensor {
		return []safetensors.Tensor{scores, safetensors.FromI32("indices", []int{1, 3}, idx)}
	}
	const pre = "indices: 1 of 3 elements fail (topk), first "
	tests := []struct {
		name string
		got  []safetensors.Tensor
		want outcome
	}{
		{name: "equal", got: got(0, 1, 2)},
		{name: "tie swapped", got: got(0, 2, 1), want: outcome{Substituted: 2}},
		{name: "not a tie", got: got(0, 1, 3), want: outcome{Failures: 1,
			First: "[0 2]: got key 3 (score 1), want key 2 (score 2): not a tie",
			Err:   pre + "[0 2]: got key 3 (score 1), want key 2 (score 2): not a tie"}},
		{name: "unmarked position", got: got(1, 0, 2), want: outcome{Failures: 2,
			First: "[0 0]: got 1, want 0",
			Err:   "indices: 2 of 3 elements fail (topk), first [0 0]: got 1, want 0"}},
		{name: "duplicate", got: got(0, 1, 1), want: outcome{Failures: 1,
			First: "[0 2]: got key 1 twice in row 0", Err: pre + "[0 2]: got key 1 twice in row 0"}},
		{name: "masked key", got: got(0, 1, 4), want: outcome{Failures: 1,
			First: "[0 2]: got key 4, which row 0 may not select", Err: pre + "[0 2]: got key 4, which row 0 may not select"}},
		{name: "key past row", got: got(0, 1, 9), want: outcome{Failures: 1,
			First: "[0 2]: got key 9, which row 0 may not select", Err: pre + "[0 2]: got key 9, which row 0 may not select"}},
		{name: "padding", got: got(0, 1, -1), want: outcome{Failures: 1,
			First: "[0 2]: got -1, want 2", Err: pre + "[0 2]: got -1, want 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := judge(t, tt.got, want, tol)
			if diff := cmp.Diff(tt.want, o); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGoldenComparisonsCanFail perturbs one output of every committed case
// beyond its tolerance and checks that Compare rejects it: the golden test
// would catch a wrong kernel.
func TestGoldenComparisonsCanFail(t *testing.T) {
	m := loadManifest(t)
	for _, c := range m.Cases {
		t.Run(c.Kernel+"/"+c.Name, func(t *testing.T) {
			want, _ := readAll(t, caseDir+"/"+c.Want.Path)
			tol, err := Tolerances(c.Kernel)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]safetensors.Tensor, 0, len(want))
			for _, w := range want {
				if w.Name == "indices_tie" {
					continue
				}
				w.Data = append([]byte(nil), w.Data...)
				got = append(got, w)
			}
			if _, err := Compare(got, want, tol); err != nil {
				t.Fatalf("the reference does not match itself: %v", err)
			}
			x := &got[0]
			perturbed := false
			switch x.DType {
			case safetensors.F32:
				v := toF32(*x)
				for i := range v {
					if f := float64(v[i]); !math.IsNaN(f) && !math.IsInf(f, 0) {
						v[i] = float32(f + 1 + 2*math.Abs(f))
						perturbed = true
						break
					}
				}
				*x = safetensors.FromF32(x.Name, x.Shape, v)
			case safetensors.I32:
				v := toI32(*x)
				if len(v) > 0 {
					v[len(v)-1] += 1000
					perturbed = true
				}
				*x = safetensors.FromI32(x.Name, x.Shape, v)
			case safetensors.U8:
				if len(x.Data) > 0 {
					x.Data[0] ^= 0x01
					perturbed = true
				}
			}
			if !perturbed {
				t.Skipf("%s has no finite element to perturb", x.Name)
			}
			if _, err := Compare(got, want, tol); err == nil {
				t.Errorf("a perturbed %s passed", x.Name)
			}
		})
	}
}
