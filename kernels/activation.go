package kernels

import (
	"fmt"
	"math"
)

// SiLU returns x·sigmoid(x) = x / (1 + e^−x), evaluated in float64 and rounded
// once to float32. Large negative x gives −0, large positive x gives x.
func SiLU(x float32) float32 {
	v := float64(x)
	return float32(v / (1 + math.Exp(-v)))
}

// SwiGLU computes dst = SiLU(gate) ⊙ up, the gated MLP activation. dst may
// alias gate or up. Long vectors are split across the SetThreads workers
// (each element is computed the same way wherever it runs, so the bits do
// not depend on the thread count). It panics unless the three lengths are
// equal.
func SwiGLU(dst, gate, up []float32) {
	if len(dst) != len(gate) || len(up) != len(gate) {
		panic(fmt.Sprintf("kernels: SwiGLU: lengths differ: len(dst)=%d, len(gate)=%d, len(up)=%d", len(dst), len(gate), len(up)))
	}
	parts := planParts((len(gate)+swigluAlign-1)/swigluAlign, swigluCost*float64(len(gate)))
	if parts == 1 {
		swiglu(dst, gate, up)
		return
	}
	var t *swigluTask
	select {
	case t = <-swigluTasks:
	default:
		t = new(swigluTask)
	}
	t.dst, t.gate, t.up = dst, gate, up
	runParts(t, parts, &t.join)
	t.dst, t.gate, t.up = nil, nil, nil
	select {
	case swigluTasks <- t:
	default:
	}
}

const (
	// swigluAlign is the granularity of SwiGLU's parts (a cache line of
	// float32 values, so no two parts write the same line).
	swigluAlign = 16
	// swigluCost is what one SiLU and product count as against planParts'
	// FLOP threshold: a float64 exp is tens of floating-point operations.
	swigluCost = 40
)

// swigluTask is one parallel SwiGLU call; parts split the elements.
type swigluTask struct {
	dst, gate, up []float32
	join          joiner
}

var swigluTasks = make(chan *swigluTask, 16)

func (t *swigluTask) runPart(p, parts int) {
	lo, hi := partRange(len(t.gate), swigluAlign, p, parts)
	swiglu(t.dst[lo:hi], t.gate[lo:hi], t.up[lo:hi])
}

// swiglu is SwiGLU on the calling goroutine. Under AVX-512 the groups of
// eight gates within ±30 go through siluMul, which has SiLU's bits: the
// float64 exp of Go's math.Exp on a CPU with FMA, operation for operation,
// eight lanes at a time; a group holding any other value (a NaN, an
// infinity, |gate| > 30, where math.Exp's other branches could apply) is
// computed here.
func swiglu(dst, gate, up []float32) {
	dst = dst[:len(gate)]
	up = up[:len(gate)]
	i := 0
	if activeLevel() == levelAVX512 {
		nv := len(gate) &^ 7
		for i < nv {
			i += siluMul(dst[i:nv], gate[i:nv], up[i:nv])
			for e := min(i+8, nv); i < e; i++ {
				dst[i] = SiLU(gate[i]) * up[i]
			}
		}
	}
	for ; i < len(gate); i++ {
		dst[i] = SiLU(gate[i]) * up[i]
	}
}
