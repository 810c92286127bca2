package cp

import (
	"context"
	"fmt"
	"math"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/plan"
)

// Combiner merges partial attention results across a DCP group of N ranks.
// Each rank holds, for T rows, the partial outputs of all N·H gathered heads
// normalized over its own keys, out [T, N·H, D], and their natural-log LSEs
// lse [T, N·H]. Combine returns this rank's H heads (heads [r·H, (r+1)·H) of
// the gathered order) over all keys; CombineAll returns every head on every
// rank (the all-reduce form used when the DCP group spans PCP).
//
// The combiner is built for at most maxRows rows and owns every buffer; its
// methods do not allocate. The row count passed to a call must be the same on
// every rank of the group (it comes from the replicated step plan).
type Combiner struct {
	backend       string
	n, rows, h, d int

	lses   []float32 // [N, T, N·H] all-gathered partial LSEs
	global []float32 // [T, N·H] global LSEs (float32)
	scaled []float32 // ag_rs: [N, T, H, D] own partial rescaled, head-group major; all-reduce: [T, N·H, D]
	send   []float32 // a2a: [N, T, H, D+1]
	recv   []float32 // a2a: [N, T, H, D+1]
	parts  []float32 // a2a: [N, T, H, D] unpacked partial outputs
	partL  []float32 // a2a: [N, T, H] unpacked partial LSEs
}

// NewCombiner returns a combiner for the DCP communication backend
// (plan.CommAGRS or plan.CommA2A) over n ranks, at most maxRows rows, heads
// heads per rank after the combine (N·heads before) and head width dim.
func NewCombiner(backend string, n, maxRows, heads, dim int) (*Combiner, error) {
	if n < 1 || maxRows < 1 || heads < 1 || dim < 1 {
		return nil, fmt.Errorf("cp: combiner sizes must be positive: dcp=%d rows=%d heads=%d dim=%d", n, maxRows, heads, dim)
	}
	c := &Combiner{backend: backend, n: n, rows: maxRows, h: heads, d: dim}
	nh := n * heads
	switch backend {
	case plan.CommAGRS:
		c.lses = make([]float32, n*maxRows*nh)
		c.global = make([]float32, maxRows*nh)
		c.scaled = make([]float32, maxRows*nh*dim)
	case plan.CommA2A:
		if n < 2 {
			return nil, fmt.Errorf("cp: dcp comm backend %s needs a DCP group of at least 2 ranks, got %d; use --dcp-comm-backend %s", plan.CommA2A, n, plan.CommAGRS)
		}
		c.send = make([]float32, maxRows*nh*(dim+1))
		c.recv = make([]float32, maxRows*nh*(dim+1))
		c.parts = make([]float32, maxRows*nh*dim)
		c.partL = make([]float32, maxRows*nh)
	default:
		return nil, fmt.Errorf("cp: unknown dcp comm backend %q; use %s or %s", backend, plan.CommAGRS, plan.CommA2A)
	}
	return c, nil
}

// Backend is the communication backend the combiner runs.
func (c *Combiner) Backend() string { return c.backend }

// Bytes is the memory the combiner holds.
func (c *Combiner) Bytes() int64 {
	return 4 * int64(len(c.lses)+len(c.global)+len(c.scaled)+len(c.send)+len(c.recv)+len(c.parts)+len(c.partL))
}

func (c *Combiner) check(rows int, dst, dstLSE, out, lse []float32, outHeads int) error {
	if rows < 0 || rows > c.rows {
		return fmt.Errorf("cp: combine of %d rows, combiner sized for at most %d", rows, c.rows)
	}
	nh := c.n * c.h
	switch {
	case len(out) < rows*nh*c.d:
		return fmt.Errorf("cp: combine out has %d values, need %d ([%d, %d, %d])", len(out), rows*nh*c.d, rows, nh, c.d)
	case len(lse) < rows*nh:
		return fmt.Errorf("cp: combine lse has %d values, need %d ([%d, %d])", len(lse), rows*nh, rows, nh)
	case len(dst) < rows*outHeads*c.d:
		return fmt.Errorf("cp: combine dst has %d values, need %d ([%d, %d, %d])", len(dst), rows*outHeads*c.d, rows, outHeads, c.d)
	case len(dstLSE) < rows*outHeads:
		return fmt.Errorf("cp: combine dstLSE has %d values, need %d ([%d, %d])", len(dstLSE), rows*outHeads, rows, outHeads)
	}
	return nil
}

// Combine merges the partials of rows rows over the DCP group g (size N,
// this member's rank r): out [rows, N·H, D] and lse [rows, N·H] in,
// dst [rows, H, D] and dstLSE [rows, H] out for heads [r·H, (r+1)·H).
func (c *Combiner) Combine(ctx context.Context, g comm.Group, dst, dstLSE, out, lse []float32, rows int) error {
	if g.Size() != c.n {
		return fmt.Errorf("cp: combiner built for a DCP group of %d ranks, group %s has %d", c.n, g.Name(), g.Size())
	}
	if err := c.check(rows, dst, dstLSE, out, lse, c.h); err != nil {
		return err
	}
	if c.backend == plan.CommA2A {
		return c.combineA2A(ctx, g, dst, dstLSE, out, lse, rows)
	}
	return c.combineAGRS(ctx, g, dst, dstLSE, out, lse, rows, false)
}

// CombineAll merges the partials of rows rows over g and leaves every head on
// every rank: dst [rows, N·H, D], dstLSE [rows, N·H]. It is the form used
// when the DCP group spans PCP ranks, which all need all heads. It needs an
// ag_rs combiner (one LSE all-gather, then an all-reduce of the rescaled
// outputs).
func (c *Combiner) CombineAll(ctx context.Context, g comm.Group, dst, dstLSE, out, lse []float32, rows int) error {
	if c.backend != plan.CommAGRS {
		return fmt.Errorf("cp: the all-heads combine runs on an %s combiner, this one is %s; build it with %s", plan.CommAGRS, c.backend, plan.CommAGRS)
	}
	if g.Size() != c.n {
		return fmt.Errorf("cp: combiner built for a DCP group of %d ranks, group %s has %d", c.n, g.Name(), g.Size())
	}
	if err := c.check(rows, dst, dstLSE, out, lse, c.n*c.h); err != nil {
		return err
	}
	return c.combineAGRS(ctx, g, dst, dstLSE, out, lse, rows, true)
}

// globalLSE computes, from the gathered lses [N, rows, N·H], the global LSE
// of every (row, head) into c.global.
func (c *Combiner) globalLSE(rows int) {
	nh := c.n * c.h
	k := rows * nh
	for i := range k {
		m := math.Inf(-1)
		for r := range c.n {
			m = max(m, emptyAsNegInf(c.lses[r*k+i]))
		}
		if math.IsInf(m, -1) {
			c.global[i] = float32(m)
			continue
		}
		var sum float64
		for r := range c.n {
			sum += math.Exp(emptyAsNegInf(c.lses[r*k+i]) - m)
		}
		c.global[i] = float32(m + math.Log(sum))
	}
}

// weight is exp(lse − global) for this rank's partial, 0 for an empty
// partial or an empty row.
func weight(lse, global float32) float32 {
	l := emptyAsNegInf(lse)
	if math.IsInf(l, -1) || math.IsInf(float64(global), -1) {
		return 0
	}
	return float32(math.Exp(l - float64(global)))
}

func (c *Combiner) combineAGRS(ctx context.Context, g comm.Group, dst, dstLSE, out, lse []float32, rows int, all bool) error {
	nh := c.n * c.h
	k := rows * nh
	if err := comm.AllGather(ctx, g, c.lses[:c.n*k], lse[:k]); err != nil {
		return fmt.Errorf("cp: ag_rs combine: all-gather of %d LSEs over %s: %w", k, g.Name(), err)
	}
	c.globalLSE(rows)
	d := c.d
	for t := range rows {
		for hh := range nh {
			i := t*nh + hh
			w := weight(lse[i], c.global[i])
			var o []float32
			if all { // [T, N·H, D]
				o = c.scaled[i*d : (i+1)*d]
			} else { // [N, T, H, D]: head hh = j·H + h
				j, h := hh/c.h, hh%c.h
				off := ((j*rows+t)*c.h + h) * d
				o = c.scaled[off : off+d]
			}
			if w == 0 {
				clear(o) // an empty partial contributes exact zeros, whatever its output holds
				continue
			}
			src := out[i*d : (i+1)*d]
			for x := range o {
				o[x] = w * src[x]
			}
		}
	}
	if all {
		if err := comm.AllReduce(ctx, g, dst[:k*d], c.scaled[:k*d]); err != nil {
			return fmt.Errorf("cp: ag_ar combine: all-reduce of %d values over %s: %w", k*d, g.Name(), err)
		}
		copy(dstLSE[:k], c.global[:k])
		return nil
	}
	if err := comm.ReduceScatter(ctx, g, dst[:rows*c.h*d], c.scaled[:k*d]); err != nil {
		return fmt.Errorf("cp: ag_rs combine: reduce-scatter of %d values over %s: %w", k*d, g.Name(), err)
	}
	r := g.Rank()
	for t := range rows {
		copy(dstLSE[t*c.h:(t+1)*c.h], c.global[t*nh+r*c.h:t*nh+(r+1)*c.h])
	}
	return nil
}

func (c *Combiner) combineA2A(ctx context.Context, g comm.Group, dst, dstLSE, out, lse []float32, rows int) error {
	nh := c.n * c.h
	d, w := c.d, c.d+1
	// Pack: send[j, t, h, :D] = out[t, j·H+h, :], send[j, t, h, D] = lse[t, j·H+h]
	// (the float32 LSE travels bit for bit in the same float32 payload).
	for j := range c.n {
		for t := range rows {
			for h := range c.h {
				src := (t*nh + j*c.h + h)
				off := ((j*rows+t)*c.h + h) * w
				copy(c.send[off:off+d], out[src*d:(src+1)*d])
				c.send[off+d] = lse[src]
			}
		}
	}
	m := c.n * rows * c.h * w
	if err := comm.AllToAll(ctx, g, c.recv[:m], c.send[:m]); err != nil {
		return fmt.Errorf("cp: a2a combine: all-to-all of %d values over %s: %w", m, g.Name(), err)
	}
	// recv[j, t, h, :] is member j's partial of this rank's head h.
	k := c.n * rows * c.h
	for i := range k {
		copy(c.parts[i*d:(i+1)*d], c.recv[i*w:i*w+d])
		c.partL[i] = c.recv[i*w+d]
	}
	mla.CombineLSE(dst[:rows*c.h*d], dstLSE[:rows*c.h], c.parts[:k*d], c.partL[:k], c.n, rows, c.h, d)
	return nil
}

// emptyAsNegInf widens a partial LSE, mapping the empty markers NaN and +Inf
// to −Inf (the same convention as mla.CombineLSE).
func emptyAsNegInf(l float32) float64 {
	v := float64(l)
	if v != v || math.IsInf(v, 1) {
		return math.Inf(-1)
	}
	return v
}
