package oracle

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/config"
)

func randomVec(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return v
}

func rotated(tab ropeTable, x []float64, pos int, interleaved bool) []float64 {
	y := append([]float64(nil), x...)
	tab.rotate(y, pos, interleaved)
	return y
}

// TestRoPERelativePosition pins the property attention relies on: the dot
// product of a rotated query and key depends only on their distance, and
// the rotation scales norms by the YaRN attention factor only.
func TestRoPERelativePosition(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, tc := range []struct {
		name        string
		cfg         *config.Model
		interleaved bool
	}{
		{"glm5 interleaved", tinySparse(), true},
		{"glm5 half-split", tinySparse(), false},
		{"v32 yarn interleaved", tinyV32(), true},
		{"v32 yarn half-split", tinyV32(), false},
		{"small dr yarn mscale", tinyDenseQProj(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newRopeTable(tc.cfg)
			dr := tc.cfg.QKRopeHeadDim
			for _, p := range []struct{ q, k, shift int }{{0, 0, 1}, {5, 2, 37}, {17, 0, 4096}, {4095, 4000, 159000}} {
				x, y := randomVec(rng, dr), randomVec(rng, dr)
				base := dot64(rotated(tab, x, p.q, tc.interleaved), rotated(tab, y, p.k, tc.interleaved))
				shifted := dot64(rotated(tab, x, p.q+p.shift, tc.interleaved), rotated(tab, y, p.k+p.shift, tc.interleaved))
				if math.Abs(base-shifted) > 1e-9 {
					t.Errorf("q@%d·k@%d = %.15g but shifted by %d = %.15g", p.q, p.k, base, p.shift, shifted)
				}
				n0, n1 := math.Sqrt(dot64(x, x)), math.Sqrt(dot64(rotated(tab, x, p.q, tc.interleaved), rotated(tab, x, p.q, tc.interleaved)))
				if math.Abs(n1-tab.attn*n0) > 1e-12*n0 {
					t.Errorf("|rot(x)| = %v, want attention factor %v · |x| = %v", n1, tab.attn, tab.attn*n0)
				}
			}
			// Position 0 is the identity up to the attention factor.
			x := randomVec(rng, dr)
			want := make([]float64, dr)
			for i, v := range x {
				want[i] = v * tab.attn
			}
			if diff := cmp.Diff(want, rotated(tab, x, 0, tc.interleaved)); diff != "" {
				t.Errorf("rotation at position 0 (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRoPELayoutsAgree checks that half-split RoPE is interleaved RoPE seen
// through the permutation that moves dim 2i to i and dim 2i+1 to i + dr/2.
func TestRoPELayoutsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	tab := newRopeTable(tinyV32())
	dr := 2 * len(tab.invFreq)
	perm := func(x []float64) []float64 {
		y := make([]float64, dr)
		for i := range dr / 2 {
			y[i], y[i+dr/2] = x[2*i], x[2*i+1]
		}
		return y
	}
	for _, pos := range []int{1, 7, 4096, 163839} {
		x := randomVec(rng, dr)
		if diff := cmp.Diff(perm(rotated(tab, x, pos, true)), rotated(tab, perm(x), pos, false)); diff != "" {
			t.Errorf("position %d: P·interleaved(x) vs half-split(P·x) (-interleaved +half-split):\n%s", pos, diff)
		}
	}
}

// TestRoPEFrequencies checks the tables against the definitions and the
// DeepSeek-V3.2 YaRN numbers of sparse_mla_spec §2.2: correction range
// low = floor(10.47) = 10, high = ceil(22.51) = 23, and
// inv_freq'_31 = 10⁴^(−62/64)/40 ≈ 3.3338e-6.
func TestRoPEFrequencies(t *testing.T) {
	glm := newRopeTable(tinySparse())
	for i, f := range glm.invFreq {
		if want := math.Pow(1e6, -float64(i)/32); f != want {
			t.Errorf("glm5 inv_freq[%d] = %v, want 1e6^(-%d/32) = %v", i, f, i, want)
		}
	}
	if glm.attn != 1 {
		t.Errorf("glm5 attention factor %v, want 1 without rope scaling", glm.attn)
	}
	v32 := newRopeTable(tinyV32())
	for i, f := range v32.invFreq {
		plain := math.Pow(1e4, -float64(i)/32)
		switch {
		case i <= 10:
			if f != plain {
				t.Errorf("v32 inv_freq[%d] = %v, want the unscaled %v", i, f, plain)
			}
		case i >= 23:
			if math.Abs(f-plain/40) > 1e-15*plain {
				t.Errorf("v32 inv_freq[%d] = %v, want %v/40 = %v", i, f, plain, plain/40)
			}
		default:
			if !(f < plain && f > plain/40) {
				t.Errorf("v32 inv_freq[%d] = %v, want strictly between %v/40 and %v", i, f, plain, plain)
			}
		}
	}
	if got := v32.invFreq[31]; math.Abs(got-3.3338e-6) > 1e-4*3.3338e-6 {
		t.Errorf("v32 inv_freq[31] = %v, want ≈ 3.3338e-6", got)
	}
	if v32.attn != 1 {
		t.Errorf("v32 attention factor %v, want mscale(40,1)/mscale(40,1) = 1", v32.attn)
	}
	// V2-Lite-style mscale 0.707 / mscale_all_dim 0.707 also gives 1; a
	// lone mscale gives 0.1·m·ln(f) + 1.
	lone := tinyV32()
	lone.RopeScaling.MScaleAllDim = 0
	lone.RopeScaling.MScale = 0.707
	if got, want := newRopeTable(lone).attn, 0.1*0.707*math.Log(40)+1; math.Abs(got-want) > 1e-15 {
		t.Errorf("attention factor with mscale 0.707, mscale_all_dim 0 = %v, want %v", got, want)
	}
}

// TestModelPositionShift moves a whole sequence to later positions: every
// rotary dot product depends on distance only, so layer-0 attention outputs
// and index scores may change by no more than the float32 storage rounding
// of the shifted keys.
func TestModelPositionShift(t *testing.T) {
	for _, tc := range configs {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			m := mustNew(t, cfg, randomWeights(cfg, 35), Options{KVDType: KVF32})
			toks := randomTokens(9, cfg.VocabSize, 36)
			st0, is0 := layerZeroAt(t, m, toks, 0)
			st1, is1 := layerZeroAt(t, m, toks, 1000)
			approx := cmpopts.EquateApprox(1e-5, 1e-6)
			if diff := cmp.Diff(m.attendMHA(0, st0), m.attendMHA(0, st1), approx); diff != "" {
				t.Errorf("layer-0 attention output moved with the positions (-at 0 +at 1000):\n%s", diff)
			}
			if is0 != nil {
				if diff := cmp.Diff(is0.scores, is1.scores, approx); diff != "" {
					t.Errorf("layer-0 index scores moved with the positions (-at 0 +at 1000):\n%s", diff)
				}
			}
		})
	}
}
