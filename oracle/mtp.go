package oracle

import (
	"fmt"
)

// mtpWeights is an MTP layer's glue (its decoder block is in Model.layers).
type mtpWeights struct {
	enorm, hnorm []float32
	eh           []float32 // [D, 2D]
	headNorm     []float32
	head         []float32 // [V, D]: the layer's shared head, or lm_head
}

// RunMTP runs MTP layer k (DeepSeek-V3's multi-token prediction) over a
// sequence, from the formulas, as vLLM runs it for DeepSeek-V3.2 and GLM-5:
// the input at MTP position p is
//
//	x_p = eh_proj([enorm(embed(next_p)) | hnorm(prev_p)])     (embed 0 at p = 0)
//
// where, for the teacher-forced positions p < n−1, next_p = tokens[p+1] and
// prev_p = the target's hidden state at p after its final norm; and for the
// chained draft steps p = n−1+j, next_p = chain[j] and prev_p = the target's
// final-normed hidden at n−1 for j = 0, else g_{p−1}. The layer is a full
// decoder layer (MLA with its own indexer and cache, MoE) with x as its
// residual stream; g_p = shared_head.norm(its output) is the hidden state the
// next chained step reads, and LogProbs[p] = log_softmax(head · g_p).
// The Result holds LogProbs for the n−1+len(chain) MTP positions and the
// layer's selections and routes at index num_hidden_layers+k.
func (m *Model) RunMTP(k int, tokens []int, chain []int) (*Result, error) {
	cfg := &m.cfg
	if k < 0 || k >= len(m.mtp) {
		return nil, fmt.Errorf("oracle: MTP layer %d of %d", k, len(m.mtp))
	}
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("oracle: empty token sequence; pass at least one token")
	}
	for i, tok := range append(append([]int(nil), tokens...), chain...) {
		if tok < 0 || tok >= cfg.VocabSize {
			return nil, fmt.Errorf("oracle: token %d at %d is outside the vocabulary [0, %d)", tok, i, cfg.VocabSize)
		}
	}
	if n+len(chain) > cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("oracle: %d tokens + %d draft steps exceed max_position_embeddings=%d", n, len(chain), cfg.MaxPositionEmbeddings)
	}
	d := cfg.HiddenSize
	// The target: final-normed hidden states at every position.
	h := make([][]float64, n)
	for t, tok := range tokens {
		h[t] = make([]float64, d)
		for i, v := range m.embed[tok*d : (tok+1)*d] {
			h[t][i] = float64(v)
		}
	}
	res := m.newResult(n - 1 + len(chain))
	for l := range cfg.NumLayers {
		if err := m.layer(l, h, res); err != nil {
			return nil, err
		}
	}
	hn := make([][]float64, n)
	for t := range h {
		hn[t] = make([]float64, d)
		rmsNorm(hn[t], h[t], m.norm, cfg.RMSNormEps)
	}
	mw := &m.mtp[k]
	l := cfg.NumLayers + k
	var inputs [][]float64 // x_p of every MTP position so far
	glue := func(p, next int, prev []float64) []float64 {
		e := make([]float64, d)
		if p > 0 {
			for i, v := range m.embed[next*d : (next+1)*d] {
				e[i] = float64(v)
			}
		}
		cat := make([]float64, 2*d)
		rmsNorm(cat[:d], e, mw.enorm, cfg.RMSNormEps)
		rmsNorm(cat[d:], prev, mw.hnorm, cfg.RMSNormEps)
		x := make([]float64, d)
		matVec(x, mw.eh, cat)
		return x
	}
	// run computes the layer over every input so far (causal: earlier
	// outputs do not change) and returns g_p for positions from…end.
	run := func(from int) ([][]float64, error) {
		hs := make([][]float64, len(inputs))
		for p, x := range inputs {
			hs[p] = append([]float64(nil), x...)
		}
		if err := m.layer(l, hs, res); err != nil {
			return nil, err
		}
		g := make([][]float64, len(hs)-from)
		for i := range g {
			g[i] = make([]float64, d)
			rmsNorm(g[i], hs[from+i], mw.headNorm, cfg.RMSNormEps)
		}
		return g, nil
	}
	for p := 0; p < n-1; p++ {
		inputs = append(inputs, glue(p, tokens[p+1], hn[p]))
	}
	var g [][]float64
	if n > 1 {
		var err error
		if g, err = run(0); err != nil {
			return nil, err
		}
	}
	for j, next := range chain {
		prev := hn[n-1]
		if j > 0 {
			prev = g[len(g)-1]
		}
		inputs = append(inputs, glue(n-1+j, next, prev))
		last, err := run(len(inputs) - 1)
		if err != nil {
			return nil, err
		}
		g = append(g, last[0])
	}
	for p, gp := range g {
		lp := make([]float64, cfg.VocabSize)
		for v := range cfg.VocabSize {
			lp[v] = dot(mw.head[v*d:(v+1)*d], gp)
		}
		logSoftmax(lp)
		res.LogProbs[p] = lp
	}
	res.Rounding = m.rounding
	return res, nil
}
