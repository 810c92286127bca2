package cp

import (
	"context"
	"fmt"

	"github.com/cpmla/cpmla/comm"
)

// QueryGather all-gathers the absorbed queries of a DCP group: every rank
// holds q [T, H, W] for its own H heads, and receives [T, N·H, W] with the
// heads in rank-major order (rank j's heads at [j·H, (j+1)·H)), the order
// Combiner expects. It is built for at most maxRows rows and does not
// allocate per call.
type QueryGather struct {
	n, rows, h, w int
	staged        []float32 // [N, T, H, W] as the all-gather delivers it
}

// NewQueryGather returns a gather over n ranks for at most maxRows rows of
// heads heads of width width (mla.RowDim = 576 for absorbed MLA queries).
func NewQueryGather(n, maxRows, heads, width int) (*QueryGather, error) {
	if n < 1 || maxRows < 1 || heads < 1 || width < 1 {
		return nil, fmt.Errorf("cp: query gather sizes must be positive: dcp=%d rows=%d heads=%d width=%d", n, maxRows, heads, width)
	}
	return &QueryGather{n: n, rows: maxRows, h: heads, w: width, staged: make([]float32, n*maxRows*heads*width)}, nil
}

// Gather all-gathers q [rows, H, W] over g into dst [rows, N·H, W]. rows must
// be the same on every rank of g.
func (qg *QueryGather) Gather(ctx context.Context, g comm.Group, dst, q []float32, rows int) error {
	if g.Size() != qg.n {
		return fmt.Errorf("cp: query gather built for a DCP group of %d ranks, group %s has %d", qg.n, g.Name(), g.Size())
	}
	if rows < 0 || rows > qg.rows {
		return fmt.Errorf("cp: query gather of %d rows, built for at most %d", rows, qg.rows)
	}
	per := qg.h * qg.w
	if len(q) < rows*per || len(dst) < rows*qg.n*per {
		return fmt.Errorf("cp: query gather needs q of %d and dst of %d values ([%d, %d, %d] → [%d, %d, %d]), got %d and %d",
			rows*per, rows*qg.n*per, rows, qg.h, qg.w, rows, qg.n*qg.h, qg.w, len(q), len(dst))
	}
	n := rows * per
	if err := comm.AllGather(ctx, g, qg.staged[:qg.n*n], q[:n]); err != nil {
		return fmt.Errorf("cp: query all-gather of %d values over %s: %w", n, g.Name(), err)
	}
	for j := range qg.n {
		for t := range rows {
			copy(dst[(t*qg.n+j)*per:(t*qg.n+j+1)*per], qg.staged[j*n+t*per:j*n+(t+1)*per])
		}
	}
	return nil
}
