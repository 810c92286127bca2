package oracle

import (
	"math"
	"slices"
)

// moeWeights holds one routed layer's tensors (row-major [out, in]).
type moeWeights struct {
	router  []float32 // W_g [E, D]
	bias    []float32 // e_score_correction_bias [E]
	experts []mlpWeights
	shared  *mlpWeights // nil without shared experts
}

// mlpWeights is one SwiGLU block: gate/up [W, D], down [D, W].
type mlpWeights struct {
	gate, up, down []float32
	width          int
}

// swiglu returns down(silu(gate·y) ⊙ (up·y)).
func (w *mlpWeights) apply(y []float64) []float64 {
	g := make([]float64, w.width)
	u := make([]float64, w.width)
	matVec(g, w.gate, y)
	matVec(u, w.up, y)
	for i := range g {
		g[i] = silu(g[i]) * u[i]
	}
	out := make([]float64, len(y))
	matVec(out, w.down, g)
	return out
}

// routing is the noaux_tc verdict for one token.
type routing struct {
	experts []int32   // selected experts, best first
	weights []float64 // their weights
	// margin is the smallest gap that decided the selection: between the
	// K-th and (K+1)-th selection score among the kept groups' experts, and
	// (grouped routing) between the last kept and the first dropped group
	// score. +Inf when nothing was left out.
	margin float64
	// scale is the magnitude the margin is compared with.
	scale float64
}

// route selects the experts of the post-attention-normed hidden state y,
// straight from DeepSeek-V3's reference in float64: s = σ(W_g y); the
// selection score is s + bias; with n_group > 1 each group scores the sum of
// its two best selection scores and only the topk_group best groups stay;
// the num_experts_per_tok best kept experts are selected (ties to the lowest
// index); their weights are their s, normalised to sum 1 when
// norm_topk_prob, times routed_scaling_factor.
func (m *Model) route(mw *moeWeights, y []float64) routing {
	cfg := &m.cfg
	E, K := cfg.NRoutedExperts, cfg.NumExpertsPerTok
	G, KG := max(cfg.NGroup, 1), max(cfg.TopKGroup, 1)
	logits := make([]float64, E)
	matVec(logits, mw.router, y)
	s := make([]float64, E)
	sel := make([]float64, E)
	for e := range E {
		s[e] = 1 / (1 + math.Exp(-logits[e]))
		sel[e] = s[e] + float64(mw.bias[e])
	}
	r := routing{margin: math.Inf(1)}
	keep := make([]bool, G)
	gs := E / G
	if G > 1 {
		gscore := make([]float64, G)
		for g := range G {
			v := slices.Clone(sel[g*gs : (g+1)*gs])
			slices.Sort(v)
			gscore[g] = v[len(v)-1] + v[len(v)-2]
		}
		order := rankDesc(gscore)
		for _, g := range order[:KG] {
			keep[g] = true
		}
		if KG < G {
			a, b := gscore[order[KG-1]], gscore[order[KG]]
			r.margin, r.scale = a-b, math.Max(math.Abs(a), math.Abs(b))
		}
	} else {
		keep[0] = true
	}
	cand := make([]float64, 0, E)
	ids := make([]int, 0, E)
	for e := range E {
		if keep[e/gs] {
			cand = append(cand, sel[e])
			ids = append(ids, e)
		}
	}
	order := rankDesc(cand)
	if K < len(cand) {
		a, b := cand[order[K-1]], cand[order[K]]
		if a-b < r.margin {
			r.margin, r.scale = a-b, math.Max(math.Abs(a), math.Abs(b))
		}
	}
	var sum float64
	for _, i := range order[:K] {
		e := ids[i]
		r.experts = append(r.experts, int32(e))
		r.weights = append(r.weights, s[e])
		sum += s[e]
	}
	for k := range r.weights {
		if cfg.NormTopKProb {
			r.weights[k] /= sum
		}
		r.weights[k] *= cfg.RoutedScalingFactor
	}
	return r
}

// rankDesc returns the indices of v ordered by value descending, ties to the
// lowest index.
func rankDesc(v []float64) []int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case v[a] > v[b]:
			return -1
		case v[a] < v[b]:
			return 1
		}
		return 0
	})
	return idx
}

// moe adds the routed layer l's output to every h[t]: y = RMSNorm(h[t]),
// Σ_k w_k·Expert_k(y) + SharedExperts(y). It records each token's experts
// (sorted ascending) and routing margin.
func (m *Model) moe(l int, h [][]float64, res *Result) {
	cfg := &m.cfg
	lw := &m.layers[l]
	y := make([]float64, cfg.HiddenSize)
	res.Experts[l] = make([][]int32, len(h))
	res.RouteMargin[l] = make([]float64, len(h))
	res.RouteScale[l] = make([]float64, len(h))
	for t := range h {
		rmsNorm(y, h[t], lw.postNorm, cfg.RMSNormEps)
		r := m.route(lw.moe, y)
		out := make([]float64, cfg.HiddenSize)
		for k, e := range r.experts {
			for i, v := range lw.moe.experts[e].apply(y) {
				out[i] += r.weights[k] * v
			}
		}
		if sh := lw.moe.shared; sh != nil {
			for i, v := range sh.apply(y) {
				out[i] += v
			}
		}
		for i, v := range out {
			h[t][i] += v
		}
		ex := slices.Clone(r.experts)
		slices.Sort(ex)
		res.Experts[l][t] = ex
		res.RouteMargin[l][t], res.RouteScale[l][t] = r.margin, r.scale
	}
}

// RouteTie is a token whose expert selection was decided by a gap within
// rounding of float32 arithmetic.
type RouteTie struct {
	Layer, Pos int
	Margin     float64
}

// RouteNearTies lists the (layer, position) pairs of routed layers whose
// routing margin is at most tol·(the magnitude of the scores it separates):
// there an engine routing in float32 may legitimately select other experts.
func (r *Result) RouteNearTies(tol float64) []RouteTie {
	var ties []RouteTie
	for l := range r.RouteMargin {
		for t, mg := range r.RouteMargin[l] {
			if !math.IsInf(mg, 1) && (mg == 0 || mg <= tol*r.RouteScale[l][t]) {
				ties = append(ties, RouteTie{Layer: l, Pos: t, Margin: mg})
			}
		}
	}
	return ties
}
