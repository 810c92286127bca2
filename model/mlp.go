package model

import (
	"github.com/cpmla/cpmla/kernels"
)

// MLP is a SwiGLU feed-forward block, down(silu(gate·x) ⊙ up·x): a dense
// layer's MLP, a layer's shared experts, or one routed expert, as this rank
// holds it (Width columns of the intermediate dimension).
type MLP struct {
	Gate, Up *kernels.Matrix // [Width, D]
	Down     *kernels.Matrix // [D, Width]
	Width    int
}

// loadMLP reads the gate/up/down projections under prefix p ("…mlp." or
// "…mlp.experts.3.") and keeps columns [lo, lo+width) of the intermediate
// dimension (all of it when width equals the stored width).
func loadMLP(l *weightLoader, p string, lo, width int) (*MLP, error) {
	var g, u, d *kernels.Matrix
	var err error
	for _, s := range []struct {
		dst  **kernels.Matrix
		name string
	}{{&g, p + "gate_proj.weight"}, {&u, p + "up_proj.weight"}, {&d, p + "down_proj.weight"}} {
		if *s.dst, err = l.matrix(s.name); err != nil {
			return nil, err
		}
	}
	return &MLP{Gate: g.SliceRows(lo, width), Up: u.SliceRows(lo, width), Down: d.SliceCols(lo, width), Width: width}, nil
}

// forward computes out[n, D] = MLP(x[n, D]) with gate and up scratch of at
// least n·Width each, reading each weight once. A row's result never
// depends on n.
func (f *MLP) forward(reads *weightReads, out, x []float32, n int, gate, up []float32) {
	gate, up = gate[:n*f.Width], up[:n*f.Width]
	reads.mul(gate, x, n, f.Gate)
	reads.mul(up, x, n, f.Up)
	kernels.SwiGLU(gate, gate, up)
	reads.mul(out, gate, n, f.Down)
}

func (f *MLP) matrices() []*kernels.Matrix { return []*kernels.Matrix{f.Gate, f.Up, f.Down} }
