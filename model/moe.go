package model

import (
	"fmt"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
)

// MoE is one routed layer's weights as this rank holds them: the replicated
// router and selection bias, this rank's routed experts, and the shared
// experts (sliced over TP like a dense MLP).
//
// Without expert parallelism every rank holds every expert, each sliced over
// TP along its intermediate dimension. With it, experts are whole and spread
// over the TP × PCP ranks: rank r (its world rank) holds experts
// [r·E/EP, (r+1)·E/EP).
type MoE struct {
	Router *kernels.Matrix // [E, D]
	Bias   []float32       // e_score_correction_bias [E]
	// Experts are this rank's routed experts, global ids First, First+1, ….
	Experts []*MLP
	First   int
	Shared  *MLP // nil without shared experts
}

// Owns reports whether global expert e is one of this rank's.
func (w *MoE) Owns(e int) bool { return e >= w.First && e < w.First+len(w.Experts) }

// loadMoE reads the MoE block of the layer at prefix p for shard.
func loadMoE(l *weightLoader, cfg *config.Model, p string, shard Shard) (*MoE, error) {
	w := &MoE{}
	var err error
	if w.Router, err = l.matrix(p + "mlp.gate.weight"); err != nil {
		return nil, err
	}
	if w.Bias, err = l.vector(p + "mlp.gate.e_score_correction_bias"); err != nil {
		return nil, err
	}
	E, MI := cfg.NRoutedExperts, cfg.MoEIntermediateSize
	first, n, lo, width := 0, E, shard.TPRank*(MI/shard.TPSize), MI/shard.TPSize
	if shard.EPSize > 1 {
		n = E / shard.EPSize
		first, lo, width = shard.EPRank*n, 0, MI
	}
	w.First = first
	w.Experts = make([]*MLP, n)
	for j := range w.Experts {
		if w.Experts[j], err = loadMLP(l, ExpertPrefix(p, first+j), lo, width); err != nil {
			return nil, err
		}
	}
	// Tensors of the experts other ranks hold are read (checked) but not kept.
	for e := 0; e < E; e++ {
		if e < first || e >= first+n {
			if _, err := loadMLP(l, ExpertPrefix(p, e), 0, MI); err != nil {
				return nil, err
			}
		}
	}
	if ns := cfg.NSharedExperts; ns > 0 {
		sw := ns * MI / shard.TPSize
		if w.Shared, err = loadMLP(l, p+"mlp.shared_experts.", shard.TPRank*sw, sw); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// matrices lists the MoE block's weight matrices (for byte counts).
func (w *MoE) matrices() []*kernels.Matrix {
	ms := []*kernels.Matrix{w.Router}
	for _, e := range w.Experts {
		ms = append(ms, e.matrices()...)
	}
	if w.Shared != nil {
		ms = append(ms, w.Shared.matrices()...)
	}
	return ms
}

// checkMoEShard refuses a shard the expert layout cannot be split into.
func checkMoEShard(cfg *config.Model, shard Shard) error {
	if !cfg.HasRouted(cfg.NumLayers) {
		return nil
	}
	MI := cfg.MoEIntermediateSize
	if shard.EPSize > 1 {
		if cfg.NRoutedExperts%shard.EPSize != 0 {
			return fmt.Errorf("n_routed_experts %d is not divisible by the expert-parallel size %d (TP × PCP); use a layout whose TP × PCP divides %d, or leave expert parallelism off",
				cfg.NRoutedExperts, shard.EPSize, cfg.NRoutedExperts)
		}
	} else if MI%shard.TPSize != 0 {
		return fmt.Errorf("moe_intermediate_size %d is not divisible by tensor-parallel-size %d; use a TP size that divides it, or --enable-expert-parallel", MI, shard.TPSize)
	}
	if sw := cfg.NSharedExperts * MI; sw%shard.TPSize != 0 {
		return fmt.Errorf("the shared experts' width %d (n_shared_experts × moe_intermediate_size) is not divisible by tensor-parallel-size %d", sw, shard.TPSize)
	}
	return nil
}
