package oracle

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// indexerSelection is the lightning indexer's verdict for one layer.
type indexerSelection struct {
	sel      [][]int32   // [t] selected positions, ascending
	margin   []float64   // [t] k-th minus (k+1)-th score, +Inf when all keys are selected
	kthScore []float64   // [t] the k-th largest score
	scores   [][]float64 // [t][s ≤ t] the index scores
}

// indexerSelect runs the DSA lightning indexer of layer l over the whole
// sequence: xs are the input-normed hidden states and cq the normalized q
// latents. For each token t it scores every s ≤ t,
//
//	score[t,s] = Σ_h w[t,h]·ReLU(qI[t,h]·kI[s]),   w = weights_proj(x)·H_I^-0.5·d_I^-0.5,
//
// and keeps the top min(K, t+1) (score descending, ties to the lowest
// position). Token t sits at position pos0 + t.
func (m *Model) indexerSelect(l int, xs, cq [][]float64, pos0 int) (*indexerSelection, error) {
	lw := &m.layers[l]
	n := len(xs)
	hi, di, dr := m.cfg.IndexNHeads, m.cfg.IndexHeadDim, m.cfg.QKRopeHeadDim
	wscale := m.cfg.IndexerWeightScale()
	qI := make([][]float64, n)
	kI := make([][]float64, n)
	w := make([][]float64, n)
	raw := make([]float64, di)
	for t := range n {
		qI[t] = make([]float64, hi*di)
		matVec(qI[t], lw.idxWQB, cq[t])
		for h := range hi {
			m.rope.rotate(qI[t][h*di:h*di+dr], pos0+t, m.cfg.IndexerRopeInterleave)
		}
		matVec(raw, lw.idxWK, xs[t])
		kI[t] = make([]float64, di)
		layerNorm(kI[t], raw, lw.idxKNormW, lw.idxKNormB, indexerNormEps)
		m.rope.rotate(kI[t][:dr], pos0+t, m.cfg.IndexerRopeInterleave)
		m.roundIndexerKey(l, pos0+t, kI[t])
		w[t] = make([]float64, hi)
		matVec(w[t], lw.idxWeights, xs[t])
		for h := range w[t] {
			w[t][h] *= wscale
		}
	}
	out := &indexerSelection{
		sel:      make([][]int32, n),
		margin:   make([]float64, n),
		kthScore: make([]float64, n),
		scores:   make([][]float64, n),
	}
	for t := range n {
		sc := make([]float64, t+1)
		for s := range sc {
			var v float64
			for h := range hi {
				v += w[t][h] * math.Max(0, dot64(qI[t][h*di:(h+1)*di], kI[s]))
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("layer %d: index score of query %d on key %d is %v", l, t, s, v)
			}
			sc[s] = v
		}
		out.scores[t] = sc
		out.sel[t], out.margin[t], out.kthScore[t] = selectTopK(sc, min(m.cfg.IndexTopK, t+1))
	}
	return out, nil
}

// selectTopK returns the positions of the k largest scores (score
// descending, ties to the lowest position) sorted ascending, the margin
// between the k-th and (k+1)-th score in that order (+Inf when k covers
// every score), and the k-th score. Scores must be finite and 1 ≤ k ≤ len.
func selectTopK(scores []float64, k int) (sel []int32, margin, kth float64) {
	order := make([]int32, len(scores))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(scores[b], scores[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	kth = scores[order[k-1]]
	margin = math.Inf(1)
	if k < len(scores) {
		margin = kth - scores[order[k]]
	}
	sel = slices.Clone(order[:k])
	slices.Sort(sel)
	return sel, margin, kth
}

// Tie is a (layer, position) whose selected set sits on a near tie: the
// k-th and (k+1)-th index scores differ by less than the tolerance.
type Tie struct {
	Layer, Pos int
	// Margin is the k-th minus the (k+1)-th score (≥ 0).
	Margin float64
	// KthScore is the k-th largest score.
	KthScore float64
}

// NearTies lists the (layer, position) pairs whose Margin is at most
// tol·max(|k-th score|, |(k+1)-th score|): there an engine computing the
// scores in float32 may legitimately select a different set. Exact ties are
// listed for every tol ≥ 0. Dense models have none.
func (r *Result) NearTies(tol float64) []Tie {
	var ties []Tie
	for l := range r.Margin {
		for t, mg := range r.Margin[l] {
			if math.IsInf(mg, 1) {
				continue
			}
			kth := r.KthScore[l][t]
			scale := math.Max(math.Abs(kth), math.Abs(kth-mg))
			if mg == 0 || mg <= tol*scale {
				ties = append(ties, Tie{Layer: l, Pos: t, Margin: mg, KthScore: kth})
			}
		}
	}
	return ties
}
