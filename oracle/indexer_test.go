package oracle

import (
	"encoding/binary"
	"math"
	"math/cmplx"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/config"
)

func TestSelectTopK(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name       string
		scores     []float64
		k          int
		wantSel    []int32
		wantMargin float64
		wantKth    float64
	}{
		{"single key", []float64{0.5}, 1, []int32{0}, inf, 0.5},
		{"all selected", []float64{1, 3, 2}, 3, []int32{0, 1, 2}, inf, 1},
		{"distinct", []float64{1, 3, 2, 0}, 2, []int32{1, 2}, 1, 2},
		{"tie at the boundary goes to the lowest position", []float64{3, 1, 3, 2}, 1, []int32{0}, 0, 3},
		{"tie inside the set", []float64{3, 1, 3, 2}, 2, []int32{0, 2}, 1, 3},
		{"three-way tie", []float64{2, 2, 5, 2}, 3, []int32{0, 1, 2}, 0, 2},
		{"negative scores", []float64{-1, -0.25, -3}, 1, []int32{1}, 0.75, -0.25},
		{"signed zeros tie", []float64{0, math.Copysign(0, -1), 1}, 2, []int32{0, 2}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, margin, kth := selectTopK(tc.scores, tc.k)
			if diff := cmp.Diff(tc.wantSel, sel); diff != "" {
				t.Errorf("selection (-want +got):\n%s", diff)
			}
			if margin != tc.wantMargin || kth != tc.wantKth {
				t.Errorf("margin, kth = %v, %v; want %v, %v", margin, kth, tc.wantMargin, tc.wantKth)
			}
		})
	}
}

// FuzzSelectTopK checks selectTopK against the definition of the selected
// set: exactly k positions, ascending, and every selected position outranks
// every unselected one (higher score, or equal score and lower position).
func FuzzSelectTopK(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint8(2))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(1))
	f.Fuzz(func(t *testing.T, raw []byte, kb uint8) {
		// Two bytes per score from a small set so that ties are common.
		n := len(raw) / 2
		if n == 0 {
			return
		}
		scores := make([]float64, n)
		for i := range scores {
			scores[i] = float64(int16(binary.LittleEndian.Uint16(raw[2*i:]))%7) / 4
		}
		k := 1 + int(kb)%n
		sel, margin, kth := selectTopK(scores, k)
		if len(sel) != k || !slices.IsSorted(sel) {
			t.Fatalf("selection %v: want %d ascending positions", sel, k)
		}
		in := make([]bool, n)
		for _, s := range sel {
			if in[s] {
				t.Fatalf("selection %v repeats %d", sel, s)
			}
			in[s] = true
		}
		outranks := func(a, b int) bool { return scores[a] > scores[b] || scores[a] == scores[b] && a < b }
		lowest, best := math.Inf(1), math.Inf(-1)
		for s := range n {
			if in[s] {
				lowest = min(lowest, scores[s])
				continue
			}
			best = max(best, scores[s])
			for _, q := range sel {
				if !outranks(int(q), s) {
					t.Fatalf("scores %v k %d: selected %d does not outrank unselected %d", scores, k, q, s)
				}
			}
		}
		if kth != lowest {
			t.Errorf("k-th score %v, want the lowest selected score %v", kth, lowest)
		}
		if want := lowest - best; k == n && !math.IsInf(margin, 1) || k < n && margin != want {
			t.Errorf("margin %v, want %v (+Inf when k = n)", margin, want)
		}
	})
}

// rotateComplex is RoPE written as a complex product: pair i is the complex
// number x_a + i·x_b turned by e^{i·pos·f_i} and scaled by attn.
func rotateComplex(x []float64, pos int, invFreq []float64, attn float64, interleaved bool) {
	half := len(invFreq)
	for i, f := range invFreq {
		a, b := i, i+half
		if interleaved {
			a, b = 2*i, 2*i+1
		}
		z := complex(x[a], x[b]) * cmplx.Rect(attn, float64(pos)*f)
		x[a], x[b] = real(z), imag(z)
	}
}

// TestIndexScoreDefinition recomputes every layer-0 index score of a
// sequence independently, straight from sparse_mla_spec §3.1/§3.4, and
// compares it to the oracle's.
func TestIndexScoreDefinition(t *testing.T) {
	for _, mk := range []func() *config.Model{tinySparse, tinyV32} {
		cfg := mk()
		t.Run(cfg.Name, func(t *testing.T) {
			w := randomWeights(cfg, 41)
			m := mustNew(t, cfg, w, Options{})
			toks := randomTokens(8, cfg.VocabSize, 42)
			_, is := layerZero(t, m, toks)

			get := func(name string) []float32 { return w["model.layers.0."+name].Values }
			linear := func(wt []float32, x []float64) []float64 {
				y := make([]float64, len(wt)/len(x))
				for r := range y {
					for c, v := range x {
						y[r] += float64(wt[r*len(x)+c]) * v
					}
				}
				return y
			}
			rms := func(x []float64, g []float32) []float64 {
				var ss float64
				for _, v := range x {
					ss += v * v
				}
				y := make([]float64, len(x))
				for i, v := range x {
					y[i] = float64(g[i]) * v / math.Sqrt(ss/float64(len(x))+cfg.RMSNormEps)
				}
				return y
			}
			d, hi, di, dr := cfg.HiddenSize, cfg.IndexNHeads, cfg.IndexHeadDim, cfg.QKRopeHeadDim
			tab := newRopeTable(cfg)
			var qs, ks, ws [][]float64
			for pos, tok := range toks {
				e := make([]float64, d)
				for i := range e {
					e[i] = float64(w[embedTensorName].Values[tok*d+i])
				}
				x := rms(e, get("input_layernorm.weight"))
				cq := rms(linear(get("self_attn.q_a_proj.weight"), x), get("self_attn.q_a_layernorm.weight"))
				q := linear(get("self_attn.indexer.wq_b.weight"), cq)
				for h := range hi {
					rotateComplex(q[h*di:h*di+dr], pos, tab.invFreq, tab.attn, cfg.IndexerRopeInterleave)
				}
				k := linear(get("self_attn.indexer.wk.weight"), x)
				var mean, vr float64
				for _, v := range k {
					mean += v / float64(di)
				}
				for _, v := range k {
					vr += (v - mean) * (v - mean) / float64(di)
				}
				for i, v := range k {
					k[i] = (v-mean)/math.Sqrt(vr+1e-6)*float64(get("self_attn.indexer.k_norm.weight")[i]) + float64(get("self_attn.indexer.k_norm.bias")[i])
				}
				rotateComplex(k[:dr], pos, tab.invFreq, tab.attn, cfg.IndexerRopeInterleave)
				for i, v := range k {
					k[i] = float64(float32(v))
				}
				hw := linear(get("self_attn.indexer.weights_proj.weight"), x)
				for h := range hw {
					hw[h] /= math.Sqrt(float64(hi * di))
				}
				qs, ks, ws = append(qs, q), append(ks, k), append(ws, hw)
			}
			want := make([][]float64, len(toks))
			negative := 0
			for q := range toks {
				for s := range q + 1 {
					var score float64
					for h := range hi {
						var dp float64
						for i := range di {
							dp += qs[q][h*di+i] * ks[s][i]
						}
						if dp < 0 {
							negative++
						}
						score += ws[q][h] * max(dp, 0)
					}
					want[q] = append(want[q], score)
				}
			}
			if negative == 0 {
				t.Fatal("no negative head dot product: the ReLU is not exercised")
			}
			if diff := cmp.Diff(want, is.scores, cmpopts.EquateApprox(1e-9, 1e-12)); diff != "" {
				t.Errorf("layer-0 index scores (-independent +oracle):\n%s", diff)
			}
		})
	}
}
