package model

import (
	"math"

	"github.com/cpmla/cpmla/config"
)

// router is DeepSeek-V3's noaux_tc expert selection, as DeepSeek's reference
// implementation computes it (inference/model.py, Gate.forward), in float32:
//
//	s     = sigmoid(x·Wgᵀ)                       scores
//	s_sel = s + e_score_correction_bias          used for selection only
//	n_group > 1: a group scores the sum of its two best s_sel; the
//	             topk_group best groups stay, the others' experts drop out
//	idx   = the num_experts_per_tok best s_sel   (ties: lowest expert index)
//	w     = s[idx], divided by Σ w when norm_topk_prob, times
//	        routed_scaling_factor
//
// Two points where transformers differs are decided for the reference:
// dropped groups are excluded (not scored 0, which could outrank kept experts
// whose s_sel is negative), and no 1e-20 is added to Σ w. Group ties also
// break by the lowest group index. A NaN score ranks below every number.
type router struct {
	experts, perTok, groups, keepGroups int
	norm                                bool
	scale                               float32
}

func newRouter(c *config.Model) router {
	return router{experts: c.NRoutedExperts, perTok: c.NumExpertsPerTok, groups: max(c.NGroup, 1), keepGroups: max(c.TopKGroup, 1),
		norm: c.NormTopKProb, scale: float32(c.RoutedScalingFactor)}
}

// routeScratch holds one row's working scores, sized for a router.
type routeScratch struct {
	score, sel []float32 // [experts]
	taken      []bool    // [experts]
	group      []float32 // [groups]
	keep       []bool    // [groups]
}

func newRouteScratch(r router) *routeScratch {
	return &routeScratch{score: make([]float32, r.experts), sel: make([]float32, r.experts), taken: make([]bool, r.experts),
		group: make([]float32, r.groups), keep: make([]bool, r.groups)}
}

// sigmoid is 1/(1+e^−v) rounded once to float32.
func sigmoid(v float32) float32 { return float32(1 / (1 + math.Exp(-float64(v)))) }

// better orders selection scores: a beats b when it is larger, NaN losing to
// every number; ties are left to the caller (lowest index first).
func better(a, b float32) bool {
	if a != a {
		return false
	}
	return b != b || a > b
}

// route selects the experts of one row from its router logits [experts] and
// the selection bias [experts], writing perTok expert ids (best first) to idx
// and their weights to w.
func (r router) route(idx []int32, w []float32, logits, bias []float32, s *routeScratch) {
	E := r.experts
	for e := 0; e < E; e++ {
		s.score[e] = sigmoid(logits[e])
		s.sel[e] = s.score[e] + bias[e]
		s.taken[e] = false
	}
	gs := E / r.groups
	if r.groups > 1 {
		for g := 0; g < r.groups; g++ {
			b1, b2 := float32(math.Inf(-1)), float32(math.Inf(-1))
			for _, v := range s.sel[g*gs : (g+1)*gs] {
				switch {
				case better(v, b1):
					b1, b2 = v, b1
				case better(v, b2):
					b2 = v
				}
			}
			s.group[g] = b1 + b2
			s.keep[g] = false
		}
		for k := 0; k < r.keepGroups; k++ {
			best := -1
			for g := 0; g < r.groups; g++ {
				if !s.keep[g] && (best < 0 || better(s.group[g], s.group[best])) {
					best = g
				}
			}
			s.keep[best] = true
		}
	}
	for k := 0; k < r.perTok; k++ {
		best := -1
		for e := 0; e < E; e++ {
			if s.taken[e] || (r.groups > 1 && !s.keep[e/gs]) {
				continue
			}
			if best < 0 || better(s.sel[e], s.sel[best]) {
				best = e
			}
		}
		s.taken[best] = true
		idx[k] = int32(best)
		w[k] = s.score[best]
	}
	if r.norm {
		var sum float32
		for _, v := range w[:r.perTok] {
			sum += v
		}
		for k := range w[:r.perTok] {
			w[k] /= sum
		}
	}
	for k := range w[:r.perTok] {
		w[k] *= r.scale
	}
}
