package model

import (
	"context"
	"fmt"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/kernels"
)

// splitProducts computes Linear products y = x·Wᵀ whose input rows are the
// same on every member of a group, each member reading only its share of W.
//
// Member r computes the outputs of W's rows [r·per, r·per + per) with
// per = ⌈rows(W)/members⌉ (the last share shorter, or empty), and the group
// all-gathers the shares. A share is the same rows of the same matrix, and
// the kernel's summation order depends on the columns only, so every output
// is bitwise the one the whole product gives; only the bytes a member reads
// shrink, by the group's size.
//
// Used for the products the layer would otherwise replicate: the LM head
// (over the whole world, whose ranks all hold the final-normed rows after the
// TP all-reduce and the PCP gather) and, over the TP group, q_a, kv_a and the
// indexer's query projection (their inputs are the TP group's common rows).
//
// The all-gather's count (rows × per) derives from the replicated batch and
// the weights' shapes, so every member issues it alike.
type splitProducts struct {
	g      comm.Group // nil: whole products
	shares map[*kernels.Matrix]share
	part   []float32 // this member's share of the outputs, [rows, per]
	all    []float32 // every member's share, [members, rows, per]
}

// share is a member's part of one matrix.
type share struct {
	w   *kernels.Matrix // rows [r·per, r·per + n) of the matrix; nil when n = 0
	per int
}

// newSplitProducts prepares this member's shares of ws for products of up to
// maxRows input rows. With a nil group or a group of one, it computes whole
// products and allocates nothing.
func newSplitProducts(g comm.Group, maxRows int, ws []*kernels.Matrix, name string, bufs *bufferList) *splitProducts {
	p := &splitProducts{}
	if g == nil || g.Size() == 1 {
		return p
	}
	G, r := g.Size(), g.Rank()
	p.g, p.shares = g, map[*kernels.Matrix]share{}
	most := 0
	for _, w := range ws {
		if _, ok := p.shares[w]; ok {
			continue
		}
		s := share{per: ShareRows(w.Rows, G)}
		if n := spanRows(w.Rows, s.per, r); n > 0 {
			s.w = w.SliceRows(r*s.per, n)
		}
		p.shares[w] = s
		most = max(most, s.per)
	}
	p.part = bufs.f32(name+" share", maxRows*most)
	p.all = bufs.f32(name+" gather", G*maxRows*most)
	return p
}

// ShareRows is the rows of each member's share of a matrix of out rows split
// over members (the last share shorter, or empty): what a member's buffers
// hold per input row. engine.RunnerBytes sizes those buffers from it too.
func ShareRows(out, members int) int { return (out + members - 1) / members }

// spanRows is the row count of member q's share of a matrix of out rows.
func spanRows(out, per, q int) int { return max(0, min(per, out-q*per)) }

// mul writes dst[rows, W.Rows] = x[rows, W.Cols] · Wᵀ, counting this member's
// reads.
func (p *splitProducts) mul(ctx context.Context, dst, x []float32, rows int, w *kernels.Matrix, reads *weightReads) error {
	if p.g == nil {
		reads.mul(dst[:rows*w.Rows], x, rows, w)
		return nil
	}
	s, ok := p.shares[w]
	if !ok {
		return fmt.Errorf("the matrix [%d, %d] has no share on this rank", w.Rows, w.Cols)
	}
	P := s.per
	part := p.part[:rows*P]
	n := 0
	if s.w != nil {
		n = s.w.Rows
		reads.mul(part[:rows*n], x, rows, s.w)
	}
	if n < P {
		// Spread the rows from [rows, n] to [rows, P], last row first (a
		// row's new place never overlaps a row not yet moved), zeroing the
		// padding.
		for i := rows - 1; i >= 0; i-- {
			copy(part[i*P:i*P+n], part[i*n:(i+1)*n])
			clear(part[i*P+n : (i+1)*P])
		}
	}
	G, out := p.g.Size(), w.Rows
	all := p.all[:G*rows*P]
	if err := comm.AllGather(ctx, p.g, all, part); err != nil {
		return fmt.Errorf("gather of a [%d, %d] product's shares: %w", w.Rows, w.Cols, err)
	}
	for q := range G {
		nq := spanRows(out, P, q)
		if nq == 0 {
			continue // an empty share may start past the last row
		}
		lo, from := q*P, all[q*rows*P:]
		for i := range rows {
			copy(dst[i*out+lo:i*out+lo+nq], from[i*P:i*P+nq])
		}
	}
	return nil
}

// newVocabHead splits the LM heads (the main one and those of the MTP layers)
// by vocabulary over the world.
func newVocabHead(m *Model, opt RunnerOptions, par *Parallel, bufs *bufferList) *splitProducts {
	var world comm.Group
	if par != nil {
		world = par.Groups.World
	}
	heads := []*kernels.Matrix{m.LMHead}
	for k := range m.MTP {
		heads = append(heads, m.MTP[k].Head)
	}
	return newSplitProducts(world, opt.MaxLogitRows, heads, "lm head", bufs)
}
