package kernels

import (
	"math"
	"testing"

	"github.com/cpmla/cpmla/config"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// yarnInvFreq64 restates sparse_mla_spec §2.2 step by step (the test's own
// derivation): corr, low/high, ramp, blend.
func yarnInvFreq64(dim int, theta float64, y *config.YaRN) (inv []float64, corrFast, corrSlow float64) {
	corr := func(n float64) float64 {
		return float64(dim) * math.Log(float64(y.OriginalMaxPositionEmbeddings)/(2*math.Pi*n)) / (2 * math.Log(theta))
	}
	corrFast, corrSlow = corr(y.BetaFast), corr(y.BetaSlow)
	low := math.Max(math.Floor(corrFast), 0)
	high := math.Min(math.Ceil(corrSlow), float64(dim-1))
	if low == high {
		high += 0.001
	}
	inv = make([]float64, dim/2)
	for i := range inv {
		base := 1 / math.Pow(theta, float64(2*i)/float64(dim))
		ramp := (float64(i) - low) / (high - low)
		ramp = math.Max(0, math.Min(1, ramp))
		inv[i] = base/y.Factor*ramp + base*(1-ramp)
	}
	return inv, corrFast, corrSlow
}

func TestRopeYaRNDeepSeekV32(t *testing.T) {
	m, err := config.Load("deepseek-v3.2")
	if err != nil {
		t.Fatalf("load preset: %v", err)
	}
	y := m.RopeScaling
	if y == nil {
		t.Fatal("deepseek-v3.2 preset has no YaRN scaling")
	}
	dim, theta := m.QKRopeHeadDim, m.RopeTheta
	r := NewRope(dim, theta, y)
	want, corrFast, corrSlow := yarnInvFreq64(dim, theta, y)

	// The published bounds: corr(32) = 10.47…, corr(1) = 22.51….
	if diff := cmp.Diff([]float64{10.4722, 22.5134}, []float64{corrFast, corrSlow}, cmpopts.EquateApprox(0, 1e-4)); diff != "" {
		t.Errorf("YaRN correction dims (-spec +derived):\n%s", diff)
	}
	low, high := YaRNRange(dim, theta, y)
	if low != 10 || high != 23 {
		t.Errorf("YaRNRange = [%v, %v], want the published [10, 23]", low, high)
	}
	if diff := cmp.Diff(want, r.InvFreq(), cmpopts.EquateApprox(1e-14, 0)); diff != "" {
		t.Errorf("InvFreq vs the §2.2 formula (-want +got):\n%s", diff)
	}
	for i, f := range r.InvFreq() {
		base := math.Pow(theta, -float64(2*i)/float64(dim))
		switch {
		case i <= 10:
			if math.Abs(f-base) > 1e-15*base {
				t.Errorf("inv_freq'_%d = %v, want unchanged %v", i, f, base)
			}
		case i >= 23:
			if math.Abs(f-base/40) > 1e-15*base {
				t.Errorf("inv_freq'_%d = %v, want %v/40 = %v", i, f, base, base/40)
			}
		default:
			if !(f < base && f > base/40) {
				t.Errorf("inv_freq'_%d = %v, want strictly between %v and %v", i, f, base/40, base)
			}
		}
		if i > 0 && !(f < r.InvFreq()[i-1]) {
			t.Errorf("inv_freq' not strictly decreasing at %d", i)
		}
	}
	// Spec constants (sparse_mla_spec §2.2): inv_freq'_0 = 1, inv_freq'_31 ≈ 3.3338e-6.
	if got := r.InvFreq()[0]; got != 1 {
		t.Errorf("inv_freq'_0 = %v, want 1", got)
	}
	if diff := cmp.Diff(3.3338e-6, r.InvFreq()[31], cmpopts.EquateApprox(1e-4, 0)); diff != "" {
		t.Errorf("inv_freq'_31 (-spec +got):\n%s", diff)
	}
	if got := r.CosSinScale(); got != 1 {
		t.Errorf("CosSinScale = %v, want 1 (mscale = mscale_all_dim)", got)
	}
}

func TestRopePlainAndMScale(t *testing.T) {
	r := NewRope(64, 1e6, nil)
	for i, f := range r.InvFreq() {
		want := math.Pow(1e6, -float64(i)/32)
		if math.Abs(f-want) > 1e-15*want {
			t.Errorf("GLM-5 inv_freq_%d = %v, want 1e6^(-%d/32) = %v", i, f, i, want)
		}
	}
	// mscale ≠ mscale_all_dim scales cos/sin by the ratio of yarn_get_mscale.
	y := &config.YaRN{Factor: 40, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 0}
	want := (0.1*math.Log(40) + 1) / 1
	if got := NewRope(64, 10000, y).CosSinScale(); math.Abs(got-want) > 1e-15 {
		t.Errorf("CosSinScale = %v, want %v", got, want)
	}
}

func TestRopeKnownRotation(t *testing.T) {
	// inv_freq_0 is 1 for any theta: pair 0 turns by pos radians.
	r := NewRope(2, 10000, nil)
	for _, interleaved := range []bool{true, false} {
		x := []float32{1, 0}
		r.Apply(x, 1, interleaved)
		want := []float64{math.Cos(1), math.Sin(1)}
		if diff := cmp.Diff(want, to64(x), cmpopts.EquateApprox(0, 1e-7)); diff != "" {
			t.Errorf("interleaved=%v: rotate (1,0) by 1 rad (-want +got):\n%s", interleaved, diff)
		}
	}
	// Position 0 is the identity, bit for bit.
	r = NewRope(64, 10000, nil)
	x := randSlice(newRand(7), 64, 3)
	y := append([]float32(nil), x...)
	r.Apply(y, 0, true)
	if diff := cmp.Diff(x, y); diff != "" {
		t.Errorf("Apply at pos 0 (-x +rotated):\n%s", diff)
	}
}

// Positions cover the V3.2 context (163840) and GLM-5 (202752).
var ropePositions = []int{0, 1, 7, 4095, 4096, 65537, 163839, 202751}

func ropeCases(t *testing.T) []struct {
	name string
	r    *Rope
} {
	t.Helper()
	v32, err := config.Load("deepseek-v3.2")
	if err != nil {
		t.Fatalf("load preset: %v", err)
	}
	return []struct {
		name string
		r    *Rope
	}{
		{"v3.2 yarn", NewRope(64, v32.RopeTheta, v32.RopeScaling)},
		{"glm-5 plain", NewRope(64, 1e6, nil)},
		{"small dim", NewRope(8, 10000, nil)},
	}
}

func norm64(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

func TestRopePreservesNorm(t *testing.T) {
	rnd := newRand(8)
	for _, tc := range ropeCases(t) {
		for _, interleaved := range []bool{true, false} {
			for _, pos := range ropePositions {
				x := randSlice(rnd, tc.r.Dim(), 4)
				x64 := to64(x)
				want := norm64(x64)
				tc.r.Apply(x, pos, interleaved)
				tc.r.Apply64(x64, pos, interleaved)
				got := []float64{norm64(to64(x)), norm64(x64)}
				if diff := cmp.Diff([]float64{want, want}, got, cmpopts.EquateApprox(1e-6, 0)); diff != "" {
					t.Errorf("%s interleaved=%v pos=%d: norms [f32, f64] (-before +after):\n%s", tc.name, interleaved, pos, diff)
				}
				if math.Abs(got[1]-want) > 1e-13*want {
					t.Errorf("%s interleaved=%v pos=%d: Apply64 norm %v, want %v", tc.name, interleaved, pos, got[1], want)
				}
				if diff := cmp.Diff(x64, to64(x), cmpopts.EquateApprox(0, 4e-6)); diff != "" {
					t.Errorf("%s interleaved=%v pos=%d: Apply vs Apply64 (-f64 +f32):\n%s", tc.name, interleaved, pos, diff)
				}
			}
		}
	}
}

func TestRopeLayoutsArePermutations(t *testing.T) {
	rnd := newRand(9)
	for _, tc := range ropeCases(t) {
		d := tc.r.Dim()
		// perm maps half-split position → interleaved position: pair i is
		// (i, i+d/2) in one layout and (2i, 2i+1) in the other.
		perm := make([]int, d)
		for i := range d / 2 {
			perm[i], perm[i+d/2] = 2*i, 2*i+1
		}
		for _, pos := range ropePositions {
			half := randSlice(rnd, d, 2)
			inter := make([]float32, d)
			for j, v := range half {
				inter[perm[j]] = v
			}
			tc.r.Apply(half, pos, false)
			tc.r.Apply(inter, pos, true)
			back := make([]float32, d)
			for j := range back {
				back[j] = inter[perm[j]]
			}
			if diff := cmp.Diff(half, back); diff != "" {
				t.Errorf("%s pos=%d: interleaved result permuted back differs from half-split (-half +interleaved):\n%s", tc.name, pos, diff)
			}
		}
	}
}

func TestRopeRelativePosition(t *testing.T) {
	rnd := newRand(10)
	pairs := [][2]int{{5, 2}, {4096, 4093}, {163839, 163836}, {100, 100}, {202751, 202751}, {3, 9}, {70000, 70006}}
	for _, tc := range ropeCases(t) {
		for _, interleaved := range []bool{true, false} {
			q := randSlice(rnd, tc.r.Dim(), 1)
			k := randSlice(rnd, tc.r.Dim(), 1)
			bound := norm64(to64(q)) * norm64(to64(k))
			// Reference dot product at the same offset with both positions small.
			for _, p := range pairs {
				delta := p[0] - p[1]
				p0, p1 := max(delta, 0), max(-delta, 0)
				ref64 := dotRotated64(tc.r, q, k, p0, p1, interleaved)
				got64 := dotRotated64(tc.r, q, k, p[0], p[1], interleaved)
				got32 := dotRotated32(tc.r, q, k, p[0], p[1], interleaved)
				if math.Abs(got64-ref64) > 1e-9*bound {
					t.Errorf("%s interleaved=%v pos %v: f64 q·k = %v, at offset %d from 0 = %v", tc.name, interleaved, p, got64, delta, ref64)
				}
				if math.Abs(got32-ref64) > 1e-5*bound {
					t.Errorf("%s interleaved=%v pos %v: f32 q·k = %v, want %v", tc.name, interleaved, p, got32, ref64)
				}
			}
		}
	}
}

func dotRotated64(r *Rope, q, k []float32, pq, pk int, interleaved bool) float64 {
	q64, k64 := to64(q), to64(k)
	r.Apply64(q64, pq, interleaved)
	r.Apply64(k64, pk, interleaved)
	var s float64
	for i := range q64 {
		s += q64[i] * k64[i]
	}
	return s
}

func dotRotated32(r *Rope, q, k []float32, pq, pk int, interleaved bool) float64 {
	q32 := append([]float32(nil), q...)
	k32 := append([]float32(nil), k...)
	r.Apply(q32, pq, interleaved)
	r.Apply(k32, pk, interleaved)
	return float64(Dot(q32, k32))
}

func TestRopePanics(t *testing.T) {
	r := NewRope(8, 10000, nil)
	tests := []struct {
		name string
		f    func()
	}{
		{"odd dim", func() { NewRope(7, 10000, nil) }},
		{"zero dim", func() { NewRope(0, 10000, nil) }},
		{"theta 1", func() { NewRope(8, 1, nil) }},
		{"bad yarn", func() { NewRope(8, 10000, &config.YaRN{Factor: 40}) }},
		{"short x", func() { r.Apply(make([]float32, 6), 1, true) }},
		{"negative pos", func() { r.Apply64(make([]float64, 8), -1, false) }},
	}
	for _, tc := range tests {
		expectPanic(t, tc.name, tc.f)
	}
}

// TestRopeRotateIsApply: rotating with the angles Angles wrote for a
// position gives Apply's bits, for both layouts, with and without YaRN, at
// positions from 0 to beyond a million.
func TestRopeRotateIsApply(t *testing.T) {
	ropes := map[string]*Rope{
		"plain":  NewRope(64, 1e6, nil),
		"yarn":   NewRope(64, 10000, &config.YaRN{Factor: 40, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 0.707}),
		"dim 16": NewRope(16, 10000, nil),
	}
	r := newRand(7)
	for name, rope := range ropes {
		for _, interleaved := range []bool{false, true} {
			for _, pos := range []int{0, 1, 17, 4095, 131071, 1 << 20} {
				x := randSlice(r, rope.Dim(), 1)
				want := append([]float32(nil), x...)
				rope.Apply(want, pos, interleaved)
				cs := make([]float32, rope.Dim())
				rope.Angles(cs, pos)
				rope.Rotate(x, cs, interleaved)
				if diff := cmp.Diff(bitsOf(want), bitsOf(x)); diff != "" {
					t.Errorf("%s, interleaved %v, pos %d: Rotate vs Apply (-Apply +Rotate):\n%s", name, interleaved, pos, diff)
				}
			}
		}
	}
	for _, bad := range []func(){
		func() { ropes["plain"].Rotate(make([]float32, 64), make([]float32, 32), false) },
		func() { ropes["plain"].Angles(make([]float32, 63), 5) },
		func() { ropes["plain"].Angles(make([]float32, 64), -1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic for a wrong length or position")
				}
			}()
			bad()
		}()
	}
}
