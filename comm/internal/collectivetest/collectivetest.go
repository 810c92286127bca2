package collectivetest

import (
	"context"
	"math"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/comm"
)

// Input is member r's i-th source element: distinct per rank and index,
// with fractional parts and mixed signs and magnitudes so that float sums
// round and their order shows in the bits. Every process can compute every
// member's inputs, so each can check its own results.
func Input[T comm.Elem](r, i int) T {
	switch any((*T)(nil)).(type) {
	case *float32, *float64:
		v := float64(r+1)*0.7310585786 + float64(i)*1.25e-3 + float64((r*7+i*13)%11)*1e-4
		if (r+i)%3 == 0 {
			v = -v * 1e3
		}
		return T(v)
	}
	return T((r*31 + i*7 + 3) % 251) // exact in every Elem type
}

// Inputs is every member's source of n elements in a group of size.
func Inputs[T comm.Elem](size, n int) [][]T {
	in := make([][]T, size)
	for r := range in {
		in[r] = make([]T, n)
		for i := range in[r] {
			in[r][i] = Input[T](r, i)
		}
	}
	return in
}

// AllGather is the members' sources one after another, in group-rank
// order.
func AllGather[T comm.Elem](in [][]T) []T {
	var out []T
	for _, s := range in {
		out = append(out, s...)
	}
	return out
}

// Sum is elements [lo, hi) of the members' sum, a left fold in group-rank
// order in the element type: float results are defined to the bit,
// integers wrap around.
func Sum[T comm.Elem](in [][]T, lo, hi int) []T {
	out := make([]T, hi-lo)
	for i := lo; i < hi; i++ {
		x := in[0][i]
		for _, s := range in[1:] {
			x += s[i]
		}
		out[i-lo] = x
	}
	return out
}

// AllToAll is what member r receives: part r of every member's source, in
// group-rank order.
func AllToAll[T comm.Elem](in [][]T, r int) []T {
	p := len(in)
	q := len(in[0]) / p
	var out []T
	for j := range p {
		out = append(out, in[j][r*q:(r+1)*q]...)
	}
	return out
}

// BitsEqual compares floats by their bits (so −0 ≠ +0 and NaN = NaN),
// other types by value, and empty slices as equal to nil.
var BitsEqual = cmp.Options{
	cmp.Comparer(func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }),
	cmp.Comparer(func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }),
	cmpopts.EquateEmpty(),
}

// Bufs are one member's preallocated buffers for every op of Ops.
type Bufs struct {
	Src, Dst, Part, Buf []float32
	Send, Recv          []int
}

// NewBufs makes a member's buffers for sources of n elements (a multiple
// of size) in a group of size.
func NewBufs(size, n int) *Bufs {
	b := &Bufs{Src: make([]float32, n), Dst: make([]float32, n*size), Part: make([]float32, n/size),
		Buf: make([]float32, n), Send: make([]int, size), Recv: make([]int, size)}
	for j := range size {
		b.Send[j], b.Recv[j] = n/size, n/size
	}
	return b
}

// Op is one collective on a member's buffers.
type Op struct {
	Name string
	Op   comm.Op
	Do   func(ctx context.Context, g comm.Group, b *Bufs) error
}

// Ops is every collective, once each, in comm.Op order.
var Ops = []Op{
	{"AllGather", comm.OpAllGather, func(ctx context.Context, g comm.Group, b *Bufs) error {
		return comm.AllGather(ctx, g, b.Dst, b.Src)
	}},
	{"ReduceScatter", comm.OpReduceScatter, func(ctx context.Context, g comm.Group, b *Bufs) error {
		return comm.ReduceScatter(ctx, g, b.Part, b.Src)
	}},
	{"AllReduce", comm.OpAllReduce, func(ctx context.Context, g comm.Group, b *Bufs) error {
		return comm.AllReduce(ctx, g, b.Buf, b.Src)
	}},
	{"AllToAll", comm.OpAllToAll, func(ctx context.Context, g comm.Group, b *Bufs) error {
		return comm.AllToAll(ctx, g, b.Buf, b.Src)
	}},
	{"AllToAllV", comm.OpAllToAllV, func(ctx context.Context, g comm.Group, b *Bufs) error {
		return comm.AllToAllV(ctx, g, b.Buf, b.Src, b.Send, b.Recv)
	}},
	{"Broadcast", comm.OpBroadcast, func(ctx context.Context, g comm.Group, b *Bufs) error {
		return comm.Broadcast(ctx, g, b.Buf, 0)
	}},
	{"Barrier", comm.OpBarrier, func(ctx context.Context, g comm.Group, _ *Bufs) error {
		return comm.Barrier(ctx, g)
	}},
}
