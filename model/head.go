package model

import (
	"context"
	"fmt"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/kernels"
)

// vocabHead computes the logits of a step's logit rows.
//
// On one rank it is the LM head's product. Across ranks the vocabulary is
// split over the world: the TP all-reduce and the PCP gather leave every
// rank with the same final-normed rows, so rank r computes the logits of its
// slice of ⌈V/W⌉ vocabulary rows (the last slice shorter, or empty) and the
// ranks all-gather the slices. A rank then reads 1/W of the head instead of
// all of it. A slice is the same rows of the same matrix, and the kernel's
// summation order depends on the columns only, so every logit is bitwise the
// one the whole product gives.
//
// The all-gather's count (rows × ⌈V/W⌉) derives from the replicated batch,
// so every rank issues it alike.
type vocabHead struct {
	world  comm.Group // nil on one rank
	v      int        // vocabulary size
	per    int        // rows of a rank's slice, the last one padded
	slices map[*kernels.Matrix]*kernels.Matrix
	part   []float32 // this rank's slice of the logits, [rows, per]
	all    []float32 // every rank's slice, [W, rows, per]
}

// newVocabHead prepares the slices of the model's heads (the main LM head and
// those of the MTP layers) for this rank.
func newVocabHead(m *Model, opt RunnerOptions, par *Parallel, bufs *bufferList) *vocabHead {
	V := m.Cfg.VocabSize
	h := &vocabHead{v: V, per: V}
	if par == nil || par.Groups.World == nil || par.Groups.World.Size() == 1 {
		return h
	}
	w := par.Groups.World
	W := w.Size()
	h.world, h.per = w, (V+W-1)/W
	lo, n := h.span(w.Rank())
	h.slices = map[*kernels.Matrix]*kernels.Matrix{}
	heads := []*kernels.Matrix{m.LMHead}
	for k := range m.MTP {
		heads = append(heads, m.MTP[k].Head)
	}
	for _, head := range heads {
		if _, ok := h.slices[head]; ok {
			continue
		}
		if n == 0 {
			h.slices[head] = nil
		} else {
			h.slices[head] = head.SliceRows(lo, n)
		}
	}
	h.part = bufs.f32("vocab slice logits", opt.MaxLogitRows*h.per)
	h.all = bufs.f32("vocab slice gather", W*opt.MaxLogitRows*h.per)
	return h
}

// span is the first vocabulary row and the row count of rank q's slice.
func (h *vocabHead) span(q int) (lo, n int) {
	lo = q * h.per
	return lo, max(0, min(h.per, h.v-lo))
}

// logits writes dst[rows, V] = normed[rows, D] · headᵀ, counting this rank's
// reads.
func (h *vocabHead) logits(ctx context.Context, dst, normed []float32, rows int, head *kernels.Matrix, reads *weightReads) error {
	if h.world == nil {
		reads.mul(dst[:rows*h.v], normed, rows, head)
		return nil
	}
	slice, ok := h.slices[head]
	if !ok {
		return fmt.Errorf("the LM head [%d, %d] has no vocabulary slice on this rank", head.Rows, head.Cols)
	}
	P := h.per
	part := h.part[:rows*P]
	_, n := h.span(h.world.Rank())
	if n > 0 {
		reads.mul(part[:rows*n], normed, rows, slice)
	}
	if n < P {
		// Spread the rows from [rows, n] to [rows, P], last row first (a
		// row never moves down over one not yet moved), zeroing the padding.
		for i := rows - 1; i >= 0; i-- {
			copy(part[i*P:i*P+n], part[i*n:(i+1)*n])
			clear(part[i*P+n : (i+1)*P])
		}
	}
	W := h.world.Size()
	all := h.all[:W*rows*P]
	if err := comm.AllGather(ctx, h.world, all, part); err != nil {
		return fmt.Errorf("lm head vocabulary gather: %w", err)
	}
	for q := range W {
		lo, nq := h.span(q)
		if nq == 0 {
			continue // an empty slice (more ranks than ⌈V/per⌉) may start past V
		}
		from := all[q*rows*P:]
		for i := range rows {
			copy(dst[i*h.v+lo:i*h.v+lo+nq], from[i*P:i*P+nq])
		}
	}
	return nil
}
