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

// Indexer holds the lightning indexer's weights (whole on every rank; under
// TP each member computes its share of WQB's outputs, see splitProducts).
type Indexer struct {
	WQB, WK, WProj *kernels.Matrix
	NormW, NormB   []float32
}

// loadAttention reads the attention of the layer at prefix p and slices this
// rank's heads [headLo, headLo+heads).
func loadAttention(l *weightLoader, cfg *config.Model, p string, headLo, heads int) (Attention, error) {
	var at Attention
	dn, dr, dv := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
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
	// Absorption: per local head, W_UKᵀ [dc, dn] (a transposed copy in
	// kv_b's storage, the heads one after another in one allocation) and
	// W_UV (a row view).
	at.WUV = make([]kernels.Matrix, heads)
	nope := make([]int, heads)
	for h := 0; h < heads; h++ {
		base := (headLo + h) * (dn + dv)
		nope[h] = base
		at.WUV[h] = *kvb.SliceRows(base+dn, dv)
	}
	at.WUKT = newTransposer(kvb).rowsEach(nope, dn)
	return at, nil
}

// transposer cuts transposed row ranges out of one weight, in its storage:
// f32 and bf16 values are copied; fp8 codes are copied and share the
// weight's block scale grid, transposed once (the blocks are square, so a
// transposed fp8 matrix is still one scale per 128×128 block).
type transposer struct {
	w       *kernels.Matrix
	scalesT []float32 // fp8: [⌈Cols/128⌉, ⌈Rows/128⌉]
	nbr     int
}

func newTransposer(w *kernels.Matrix) *transposer {
	t := &transposer{w: w}
	if w.FP8 != nil {
		const B = config.FP8BlockSize
		s := w.Scales
		t.nbr = ceilDiv(s.RowOff+w.Rows, B)
		nbc := ceilDiv(s.ColOff+w.Cols, B)
		t.scalesT = make([]float32, nbc*t.nbr)
		for r := 0; r < t.nbr; r++ {
			for c := 0; c < nbc; c++ {
				t.scalesT[c*t.nbr+r] = s.S[r*s.Stride+c]
			}
		}
	}
	return t
}

// rowsEach returns, for every lo of los, rows [lo, lo+n) of the weight
// transposed ([Cols, n]), their values one after another in one allocation
// in the order of los. A one-row product of all of them (the absorbed
// heads' kernels.MatMulTHeads) then reads one stream front to back rather
// than one allocation after another: GLM-5's 64 heads of W_UKᵀ in fp8
// streamed at 19.5–20.6 GB/s on a Zen 5 core against 13.5–18.4 allocated
// one by one (docs/performance-log.md, "The absorbed per-head products as
// one walk").
func (t *transposer) rowsEach(los []int, n int) []kernels.Matrix {
	w, size := t.w, t.w.Cols*n
	var f32 []float32
	var bf16 []uint16
	var fp8 []uint8
	switch {
	case w.F32 != nil:
		f32 = make([]float32, len(los)*size)
	case w.BF16 != nil:
		bf16 = make([]uint16, len(los)*size)
	default:
		fp8 = make([]uint8, len(los)*size)
	}
	ms := make([]kernels.Matrix, len(los))
	for i, lo := range los {
		a, b := i*size, (i+1)*size
		switch {
		case f32 != nil:
			ms[i] = t.rows(lo, n, f32[a:b:b], nil, nil)
		case bf16 != nil:
			ms[i] = t.rows(lo, n, nil, bf16[a:b:b], nil)
		default:
			ms[i] = t.rows(lo, n, nil, nil, fp8[a:b:b])
		}
	}
	return ms
}

// rows returns rows [lo, lo+n) of the weight transposed: [Cols, n], its
// values written to the one of f32, bf16 and fp8 (Cols·n values each) of
// the weight's storage type.
func (t *transposer) rows(lo, n int, f32 []float32, bf16 []uint16, fp8 []uint8) kernels.Matrix {
	w := t.w
	C := w.Cols
	m := kernels.Matrix{Rows: C, Cols: n}
	switch {
	case w.F32 != nil:
		m.F32 = transposeRange(f32, w.F32, C, lo, n)
	case w.Interleaved():
		// Build interleaves the bf16 and fp8 weights after every matrix is cut.
		panic("model: transposer reads row-major storage, given an interleaved matrix")
	case w.BF16 != nil:
		m.BF16 = transposeRange(bf16, w.BF16, C, lo, n)
	default:
		const B = config.FP8BlockSize
		s := w.Scales
		m.FP8 = transposeRange(fp8, w.FP8, C, lo, n)
		// Element (c, j) is the weight's (lo+j, c): its block is
		// ((lo+j+RowOff)/B, (c+ColOff)/B), entry (c+ColOff)/B, (lo+j+RowOff)/B
		// of the transposed grid.
		col := lo + s.RowOff
		m.Scales = &kernels.BlockScales{S: t.scalesT[col/B:], Stride: t.nbr, RowOff: s.ColOff, ColOff: col % B}
		// Checked once here, so that every product need not check the
		// codes again: an unchecked matrix takes slower tiles (1.4–1.8×
		// on the absorbed W_UKᵀ products; docs/performance-log.md, "The
		// absorbed products' codes checked once").
		m.CheckFP8Codes()
	}
	return m
}

// transposeRange copies rows [lo, lo+n) of a row-major [·, cols] array,
// transposed to [cols, n], into out (cols·n values) and returns it.
func transposeRange[T any](out, src []T, cols, lo, n int) []T {
	out = out[:cols*n]
	for j := 0; j < n; j++ {
		row := src[(lo+j)*cols : (lo+j+1)*cols]
		for c, v := range row {
			out[c*n+j] = v
		}
	}
	return out
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
