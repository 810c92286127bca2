package model

import (
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
)

// Attention holds one layer's MLA weights as this rank uses them: the query
// LoRA, the latent KV projection, its local heads' absorbed W_UK / W_UV and
// o_proj columns, and the DSA lightning indexer (nil for dense MLA).
type Attention struct {
	QA      *kernels.Matrix // [dq, D]; nil when the model has no q LoRA
	QANorm  []float32
	QB      *kernels.Matrix // [heads·(dn+dr), dq or D]: this rank's heads
	KVA     *kernels.Matrix // [dc+dr, D]
	KVANorm []float32
	WUKT    []kernels.Matrix // per local head: W_UKᵀ [dc, dn] (f32)
	WUV     []kernels.Matrix // per local head: W_UV [dv, dc]
	O       *kernels.Matrix  // [D, heads·dv]: this rank's input columns
	Indexer *Indexer
}

// Indexer holds the lightning indexer's weights (replicated on every rank).
type Indexer struct {
	WQB, WK, WProj *kernels.Matrix
	NormW, NormB   []float32
}

// loadAttention reads the attention of the layer at prefix p and slices this
// rank's heads [headLo, headLo+heads).
func loadAttention(l *weightLoader, cfg *config.Model, p string, headLo, heads int) (Attention, error) {
	var at Attention
	dn, dr, dv, dc := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	a := p + "self_attn."
	var err error
	mat := func(dst **kernels.Matrix, name string) {
		if err == nil {
			*dst, err = l.matrix(name)
		}
	}
	vec := func(dst *[]float32, name string) {
		if err == nil {
			*dst, err = l.vector(name)
		}
	}
	if cfg.QLoraRank > 0 {
		mat(&at.QA, a+"q_a_proj.weight")
		vec(&at.QANorm, a+"q_a_layernorm.weight")
		mat(&at.QB, a+"q_b_proj.weight")
	} else {
		mat(&at.QB, a+"q_proj.weight")
	}
	mat(&at.KVA, a+"kv_a_proj_with_mqa.weight")
	vec(&at.KVANorm, a+"kv_a_layernorm.weight")
	var kvb, o *kernels.Matrix
	mat(&kvb, a+"kv_b_proj.weight")
	mat(&o, a+"o_proj.weight")
	if cfg.Sparse() {
		ix := &Indexer{}
		mat(&ix.WQB, a+"indexer.wq_b.weight")
		mat(&ix.WK, a+"indexer.wk.weight")
		vec(&ix.NormW, a+"indexer.k_norm.weight")
		vec(&ix.NormB, a+"indexer.k_norm.bias")
		mat(&ix.WProj, a+"indexer.weights_proj.weight")
		at.Indexer = ix
	}
	if err != nil {
		return at, err
	}
	// TP slices: q_b rows of this rank's heads (contiguous), o_proj columns.
	at.QB = at.QB.SliceRows(headLo*(dn+dr), heads*(dn+dr))
	at.O = o.SliceCols(headLo*dv, heads*dv)
	// Absorption: per local head, W_UKᵀ [dc, dn] in f32 and W_UV a row view.
	at.WUKT = make([]kernels.Matrix, heads)
	at.WUV = make([]kernels.Matrix, heads)
	row := make([]float32, dc)
	for h := 0; h < heads; h++ {
		base := (headLo + h) * (dn + dv)
		t := make([]float32, dc*dn)
		for j := 0; j < dn; j++ {
			r := kvb.Row(base+j, row)
			for c := 0; c < dc; c++ {
				t[c*dn+j] = r[c]
			}
		}
		at.WUKT[h] = kernels.Matrix{Rows: dc, Cols: dn, F32: t}
		at.WUV[h] = *kvb.SliceRows(base+dn, dv)
	}
	return at, nil
}

// matrices lists the attention's weight matrices (for byte counts).
func (at *Attention) matrices() []*kernels.Matrix {
	ms := []*kernels.Matrix{at.QA, at.QB, at.KVA, at.O}
	for h := range at.WUKT {
		ms = append(ms, &at.WUKT[h], &at.WUV[h])
	}
	if ix := at.Indexer; ix != nil {
		ms = append(ms, ix.WQB, ix.WK, ix.WProj)
	}
	return ms
}

// vectors lists the attention's norm weights and biases.
func (at *Attention) vectors() [][]float32 {
	vs := [][]float32{at.QANorm, at.KVANorm}
	if ix := at.Indexer; ix != nil {
		vs = append(vs, ix.NormW, ix.NormB)
	}
	return vs
}
