package oracle

import (
	"fmt"
	"math"

	"github.com/cpmla/cpmla/numfmt"
)

// RunOptions narrows what a run computes.
type RunOptions struct {
	// LogitsFrom is the first position whose next-token logprobs are
	// computed; LogProbs[t] is nil for t < LogitsFrom. The LM head is the
	// most expensive step of a small model, so verifying a decode tail need
	// not pay for the whole prompt. 0 computes every position;
	// len(tokens) computes none.
	LogitsFrom int
}

// Result is the outcome of one oracle run over a single sequence.
type Result struct {
	// LogProbs[t][v] = log p(v | tokens[:t+1]) for t ≥ LogitsFrom.
	LogProbs [][]float64
	// TopK[l][t] lists the positions token t attends to in layer l, sorted
	// ascending (nil for dense models).
	TopK [][][]int32
	// Margin[l][t] is the gap between the k-th and (k+1)-th index score,
	// +Inf when all keys are selected (nil for dense models).
	Margin [][]float64
	// KthScore[l][t] is the k-th largest index score (nil for dense models).
	KthScore [][]float64
	// Experts[l][t] lists the routed experts token t selects in layer l,
	// sorted ascending (nil for dense layers).
	Experts [][][]int32
	// RouteMargin[l][t] is the smallest score gap that decided token t's
	// experts in layer l (+Inf when none was left out); RouteScale[l][t] is
	// the magnitude of the scores it separates (see RouteNearTies).
	RouteMargin, RouteScale [][]float64
	// Rounding reports the check of stored values (zero without StoredValues).
	Rounding RoundingReport
}

// attnState holds one layer's attention inputs for the whole sequence.
type attnState struct {
	q    [][]float64 // [t][H·(dn+dr)], each head [q_nope | RoPE'd q_pe]
	rows [][]float64 // [t][dc+dr] cached row [c_kv | k_pe], rounded as stored
	cq   [][]float64 // [t][dq] normalized q latent (nil when q_lora_rank = 0)
	sel  [][]int32   // [t] positions attended to, ascending
}

// Run computes the logprobs of every position of tokens (positions 0…n−1)
// and, for sparse models, every layer's selected sets.
func (m *Model) Run(tokens []int) (*Result, error) { return m.RunWith(tokens, RunOptions{}) }

// RunWith is Run with RunOptions.
func (m *Model) RunWith(tokens []int, ro RunOptions) (*Result, error) {
	cfg := &m.cfg
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("oracle: empty token sequence; pass at least one token")
	}
	if n > cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("oracle: %d tokens exceed max_position_embeddings=%d; pass at most %d tokens", n, cfg.MaxPositionEmbeddings, cfg.MaxPositionEmbeddings)
	}
	for i, tok := range tokens {
		if tok < 0 || tok >= cfg.VocabSize {
			return nil, fmt.Errorf("oracle: token %d at position %d is outside the vocabulary [0, %d)", tok, i, cfg.VocabSize)
		}
	}
	if ro.LogitsFrom < 0 || ro.LogitsFrom > n {
		return nil, fmt.Errorf("oracle: LogitsFrom=%d is outside [0, %d] for %d tokens", ro.LogitsFrom, n, n)
	}
	d := cfg.HiddenSize
	h := make([][]float64, n)
	for t, tok := range tokens {
		h[t] = make([]float64, d)
		for i, v := range m.embed[tok*d : (tok+1)*d] {
			h[t][i] = float64(v)
		}
	}
	res := m.newResult(n)
	for l := range cfg.NumLayers {
		if err := m.layer(l, h, res); err != nil {
			return nil, err
		}
	}
	m.logProbs(h, ro.LogitsFrom, res.LogProbs)
	for t := ro.LogitsFrom; t < n; t++ {
		for v, lp := range res.LogProbs[t] {
			if math.IsNaN(lp) {
				return nil, fmt.Errorf("oracle: logprob of token %d at position %d is NaN (weights %q hold non-finite values?)", v, t, cfg.Name)
			}
		}
	}
	res.Rounding = m.rounding
	return res, nil
}

// newResult sizes a Result for n tokens: per-layer entries for every
// decoder and MTP layer.
func (m *Model) newResult(n int) *Result {
	cfg := &m.cfg
	layers := len(m.layers)
	res := &Result{LogProbs: make([][]float64, n)}
	m.rounding = RoundingReport{}
	if cfg.HasRouted(cfg.NumLayers) {
		res.Experts = make([][][]int32, layers)
		res.RouteMargin = make([][]float64, layers)
		res.RouteScale = make([][]float64, layers)
	}
	if cfg.Sparse() {
		res.TopK = make([][][]int32, layers)
		res.Margin = make([][]float64, layers)
		res.KthScore = make([][]float64, layers)
	}
	return res
}

// layer runs decoder layer l (an MTP layer's block for l ≥ num_hidden_layers)
// over the residual streams h of the whole sequence, in place, recording
// its selections and routes in res.
func (m *Model) layer(l int, h [][]float64, res *Result) error {
	cfg := &m.cfg
	lw := &m.layers[l]
	n := len(h)
	xs := make([][]float64, n)
	for t := range n {
		xs[t] = make([]float64, cfg.HiddenSize)
		rmsNorm(xs[t], h[t], lw.inputNorm, cfg.RMSNormEps)
	}
	st := m.attentionInputs(l, xs, 0)
	if cfg.Sparse() {
		is, err := m.indexerSelect(l, xs, st.cq, 0)
		if err != nil {
			return fmt.Errorf("oracle: %w", err)
		}
		st.sel = is.sel
		res.TopK[l], res.Margin[l], res.KthScore[l] = is.sel, is.margin, is.kthScore
	} else {
		st.sel = causalSets(n)
	}
	u := m.attendMHA(l, st)
	for t := range n {
		for i, v := range u[t] {
			h[t][i] += v
		}
	}
	if lw.moe != nil {
		m.moe(l, h, res)
	} else {
		m.mlp(l, h)
	}
	return nil
}

// causalSets is S_t = {0, …, t} for every t < n.
func causalSets(n int) [][]int32 {
	all := make([]int32, n)
	for i := range all {
		all[i] = int32(i)
	}
	sel := make([][]int32, n)
	for t := range sel {
		sel[t] = all[: t+1 : t+1]
	}
	return sel
}

// attentionInputs computes, for every token of the sequence, the MLA query
// (RoPE applied to q_pe), the cached row [c_kv | k_pe] rounded as the KV
// cache stores it, and the q latent the indexer reads. Token t sits at
// position pos0 + t.
func (m *Model) attentionInputs(l int, xs [][]float64, pos0 int) *attnState {
	cfg := &m.cfg
	lw := &m.layers[l]
	n := len(xs)
	dn, dr, dc := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.KVLoraRank
	st := &attnState{q: make([][]float64, n), rows: make([][]float64, n)}
	if cfg.QLoraRank > 0 {
		st.cq = make([][]float64, n)
	}
	qa := make([]float64, cfg.QLoraRank)
	a := make([]float64, dc+dr)
	for t := range n {
		st.q[t] = make([]float64, cfg.NumHeads*(dn+dr))
		if cfg.QLoraRank > 0 {
			matVec(qa, lw.qA, xs[t])
			st.cq[t] = make([]float64, cfg.QLoraRank)
			rmsNorm(st.cq[t], qa, lw.qANorm, cfg.RMSNormEps)
			matVec(st.q[t], lw.qB, st.cq[t])
		} else {
			matVec(st.q[t], lw.q, xs[t])
		}
		for h := range cfg.NumHeads {
			m.rope.rotate(st.q[t][h*(dn+dr)+dn:(h+1)*(dn+dr)], pos0+t, cfg.RopeInterleave)
		}
		matVec(a, lw.kvA, xs[t])
		row := make([]float64, dc+dr)
		rmsNorm(row[:dc], a[:dc], lw.kvANorm, cfg.RMSNormEps)
		copy(row[dc:], a[dc:])
		m.rope.rotate(row[dc:], pos0+t, cfg.RopeInterleave)
		m.roundRow(l, pos0+t, row)
		st.rows[t] = row
	}
	return st
}

// attendMHA is attention in the non-absorbed form: per head, keys
// k_nope = W_UK_h c_kv and values v = W_UV_h c_kv are expanded from the
// cached rows, logits = scale·(q_nope·k_nope + q_pe·k_pe) over the selected
// set, softmax, o = Σ p v, and u = W_O concat_h o.
func (m *Model) attendMHA(l int, st *attnState) [][]float64 {
	cfg := &m.cfg
	lw := &m.layers[l]
	n := len(st.rows)
	nh, dn, dr, dv, dc := cfg.NumHeads, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	scale := cfg.SoftmaxScale()
	kv := make([][]float64, n) // [s][H·(dn+dv)]: per head [k_nope | v]
	for s := range n {
		kv[s] = make([]float64, nh*(dn+dv))
		matVec(kv[s], lw.kvB, st.rows[s][:dc])
	}
	u := make([][]float64, n)
	o := make([]float64, nh*dv)
	p := make([]float64, n)
	for t := range n {
		keys := st.sel[t]
		for h := range nh {
			qh := st.q[t][h*(dn+dr) : (h+1)*(dn+dr)]
			for j, s := range keys {
				kh := kv[s][h*(dn+dv):]
				p[j] = scale * (dot64(qh[:dn], kh[:dn]) + dot64(qh[dn:], st.rows[s][dc:]))
			}
			softmax(p[:len(keys)])
			oh := o[h*dv : (h+1)*dv]
			clear(oh)
			for j, s := range keys {
				v := kv[s][h*(dn+dv)+dn : (h+1)*(dn+dv)]
				for i := range oh {
					oh[i] += p[j] * v[i]
				}
			}
		}
		u[t] = make([]float64, cfg.HiddenSize)
		matVec(u[t], lw.o, o)
	}
	return u
}

// mlp adds W_down(silu(W_gate y)·(W_up y)), y = RMSNorm(h), to every h[t].
func (m *Model) mlp(l int, h [][]float64) {
	cfg := &m.cfg
	lw := &m.layers[l]
	y := make([]float64, cfg.HiddenSize)
	for t := range h {
		rmsNorm(y, h[t], lw.postNorm, cfg.RMSNormEps)
		for i, v := range lw.dense.apply(y) {
			h[t][i] += v
		}
	}
}

// logProbs fills out[t] = log_softmax(lm_head(RMSNorm(h[t]))) for t ≥ from.
// Each LM-head row is read once and applied to every requested position.
func (m *Model) logProbs(h [][]float64, from int, out [][]float64) {
	cfg := &m.cfg
	d := cfg.HiddenSize
	fin := make([][]float64, len(h)-from)
	for i := range fin {
		fin[i] = make([]float64, d)
		rmsNorm(fin[i], h[from+i], m.norm, cfg.RMSNormEps)
		out[from+i] = make([]float64, cfg.VocabSize)
	}
	if len(fin) == 0 {
		return
	}
	for v := range cfg.VocabSize {
		row := m.head[v*d : (v+1)*d]
		for i, f := range fin {
			out[from+i][v] = dot(row, f)
		}
	}
	for _, lp := range out[from:] {
		logSoftmax(lp)
	}
}

// roundRow rounds a cached MLA row [c_kv | k_pe] of (layer, pos) in place
// as the KV cache dtype stores it, resolving rounding ties against stored
// values when they are given.
func (m *Model) roundRow(layer, pos int, row []float64) {
	var round func([]float32)
	switch m.opt.KVDType {
	case KVF32:
		round = roundF32
	case KVBF16:
		round = roundBF16s
	case KVFP8DSMLA:
		round = numfmt.RoundDSMLA
	default:
		panic("oracle: unchecked kv cache dtype " + m.opt.KVDType)
	}
	m.roundStored("kv row", layer, pos, row, m.opt.KVDType == KVF32, m.stored.Row, round)
}

// roundIndexerKey rounds an indexer key of (layer, pos) in place as the
// indexer key cache stores it.
func (m *Model) roundIndexerKey(layer, pos int, k []float64) {
	var round func([]float32)
	switch m.opt.IndexerDType {
	case IndexerF32:
		round = roundF32
	case IndexerFP8:
		round = numfmt.RoundIndexerKey
	default:
		panic("oracle: unchecked indexer key dtype " + m.opt.IndexerDType)
	}
	m.roundStored("indexer key", layer, pos, k, m.opt.IndexerDType == IndexerF32, m.stored.Key, round)
}

// roundStored fetches the stored value of (layer, pos) when the dtype has
// rounding boundaries to resolve (float32 storage has none) and rounds.
func (m *Model) roundStored(kind string, layer, pos int, vals []float64, plainF32 bool, stored func(layer, pos int) []float32, round func([]float32)) {
	var got []float32
	if !plainF32 && stored != nil {
		got = stored(layer, pos)
	}
	m.resolve(kind, layer, pos, vals, got, round)
}
