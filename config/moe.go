package config

import (
	"fmt"
	"math"
)

// MoE is the mixture-of-experts layout of a model: which decoder layers
// route their tokens to experts, and how (DeepSeek-V3's noaux_tc routing:
// sigmoid scores, a selection bias, group-limited top-k, normalised weights
// scaled by routed_scaling_factor, plus always-on shared experts).
type MoE struct {
	// FirstKDenseReplace is the number of leading layers that keep a dense MLP.
	FirstKDenseReplace int `json:"first_k_dense_replace"`
	// MoELayerFreq makes every MoELayerFreq-th layer (from layer 0) a MoE
	// layer after the dense ones, as vLLM and DeepSeek's code read it (0
	// means 1).
	MoELayerFreq        int `json:"moe_layer_freq"`
	NRoutedExperts      int `json:"n_routed_experts"`
	NSharedExperts      int `json:"n_shared_experts"`
	NumExpertsPerTok    int `json:"num_experts_per_tok"`
	MoEIntermediateSize int `json:"moe_intermediate_size"`
	// NGroup and TopKGroup limit the selection to the TopKGroup best of
	// NGroup equal groups of experts (a group scores the sum of its two best).
	NGroup              int     `json:"n_group"`
	TopKGroup           int     `json:"topk_group"`
	RoutedScalingFactor float64 `json:"routed_scaling_factor"`
	// ScoringFunc must be "sigmoid" and TopKMethod "noaux_tc" (the only
	// routing implemented); other values are refused when a layer routes.
	ScoringFunc string `json:"scoring_func"`
	TopKMethod  string `json:"topk_method"`
	// NormTopKProb renormalises the selected experts' weights to sum to one.
	NormTopKProb bool `json:"norm_topk_prob"`
	// MLPLayerTypes, when a config.json gives it (transformers' per-layer
	// "dense"/"sparse" list), must agree with FirstKDenseReplace and
	// MoELayerFreq.
	MLPLayerTypes []string `json:"-"`
}

// Routed reports whether decoder layer i is a MoE layer: the model has routed
// experts, i is past the dense layers, and i falls on the layer frequency.
func (m *MoE) Routed(i int) bool {
	if m.NRoutedExperts <= 0 || i < m.FirstKDenseReplace {
		return false
	}
	f := max(m.MoELayerFreq, 1)
	return i%f == 0
}

// HasRouted reports whether any of the first n layers routes to experts.
func (m *MoE) HasRouted(n int) bool {
	for i := 0; i < n; i++ {
		if m.Routed(i) {
			return true
		}
	}
	return false
}

// GroupSize is the number of experts in one routing group.
func (m *MoE) GroupSize() int { return m.NRoutedExperts / max(m.NGroup, 1) }

// validate checks the expert layout of a model with n decoder layers.
func (m *MoE) validate(n int) []error {
	var errs []error
	if m.FirstKDenseReplace < 0 {
		errs = append(errs, fmt.Errorf("first_k_dense_replace must be ≥ 0, got %d", m.FirstKDenseReplace))
	}
	if m.MoELayerFreq < 0 {
		errs = append(errs, fmt.Errorf("moe_layer_freq must be ≥ 1 (0 means 1), got %d", m.MoELayerFreq))
	}
	if m.NRoutedExperts < 0 || m.NSharedExperts < 0 {
		errs = append(errs, fmt.Errorf("n_routed_experts (%d) and n_shared_experts (%d) must be ≥ 0", m.NRoutedExperts, m.NSharedExperts))
	}
	if len(m.MLPLayerTypes) > 0 {
		if len(m.MLPLayerTypes) != n {
			errs = append(errs, fmt.Errorf("mlp_layer_types has %d entries for %d layers", len(m.MLPLayerTypes), n))
		}
		for i, t := range m.MLPLayerTypes {
			want := "dense"
			if m.Routed(i) {
				want = "sparse"
			}
			if t != "dense" && t != "sparse" {
				errs = append(errs, fmt.Errorf("mlp_layer_types[%d] is %q; want \"dense\" or \"sparse\"", i, t))
			} else if t != want {
				errs = append(errs, fmt.Errorf("mlp_layer_types[%d] is %q, but first_k_dense_replace %d and moe_layer_freq %d make layer %d %s; make them agree",
					i, t, m.FirstKDenseReplace, m.MoELayerFreq, i, want))
				break
			}
		}
	}
	if !m.HasRouted(n) {
		return errs
	}
	if m.ScoringFunc != "sigmoid" {
		errs = append(errs, fmt.Errorf("scoring_func %q is not implemented; the engine routes with scoring_func \"sigmoid\" (DeepSeek-V3, V3.2, GLM-5)", m.ScoringFunc))
	}
	if m.TopKMethod != "noaux_tc" {
		errs = append(errs, fmt.Errorf("topk_method %q is not implemented; the engine routes with topk_method \"noaux_tc\" (DeepSeek-V3, V3.2, GLM-5)", m.TopKMethod))
	}
	if m.MoEIntermediateSize <= 0 {
		errs = append(errs, fmt.Errorf("moe_intermediate_size must be > 0 in a model with routed experts, got %d", m.MoEIntermediateSize))
	}
	if m.NumExpertsPerTok < 1 || m.NumExpertsPerTok > m.NRoutedExperts {
		errs = append(errs, fmt.Errorf("num_experts_per_tok %d must be in [1, n_routed_experts = %d]", m.NumExpertsPerTok, m.NRoutedExperts))
	}
	if !(m.RoutedScalingFactor > 0) || math.IsInf(m.RoutedScalingFactor, 0) {
		errs = append(errs, fmt.Errorf("routed_scaling_factor must be a finite number > 0, got %g", m.RoutedScalingFactor))
	}
	switch {
	case m.NGroup < 1:
		errs = append(errs, fmt.Errorf("n_group must be ≥ 1, got %d", m.NGroup))
	case m.NRoutedExperts%m.NGroup != 0:
		errs = append(errs, fmt.Errorf("n_routed_experts %d is not divisible by n_group %d", m.NRoutedExperts, m.NGroup))
	case m.TopKGroup < 1 || m.TopKGroup > m.NGroup:
		errs = append(errs, fmt.Errorf("topk_group %d must be in [1, n_group = %d]", m.TopKGroup, m.NGroup))
	case m.NGroup > 1 && m.GroupSize() < 2:
		errs = append(errs, fmt.Errorf("n_group %d leaves %d expert per group; a group scores the sum of its two best experts, so use n_group ≤ %d",
			m.NGroup, m.GroupSize(), m.NRoutedExperts/2))
	case m.NumExpertsPerTok > m.TopKGroup*m.GroupSize():
		errs = append(errs, fmt.Errorf("num_experts_per_tok %d exceeds the %d experts of topk_group %d groups of %d", m.NumExpertsPerTok, m.TopKGroup*m.GroupSize(), m.TopKGroup, m.GroupSize()))
	}
	return errs
}
