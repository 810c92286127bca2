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
// alias gate or up. It panics unless the three lengths are equal.
func SwiGLU(dst, gate, up []float32) {
	if len(dst) != len(gate) || len(up) != len(gate) {
		panic(fmt.Sprintf("kernels: SwiGLU: lengths differ: len(dst)=%d, len(gate)=%d, len(up)=%d", len(dst), len(gate), len(up)))
	}
	dst = dst[:len(gate)]
	up = up[:len(gate)]
	for i, g := range gate {
		dst[i] = SiLU(g) * up[i]
	}
}
