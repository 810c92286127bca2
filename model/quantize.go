package model

import (
	"math"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/numfmt"
)

// quantizeBlocks block-quantizes a [rows, cols] weight to e4m3 codes and one
// float32 scale per 128×128 block, as fp8 checkpoints are made: a block's
// scale maps its largest finite magnitude to 448 (rounded up to a power of
// two when pow2), an all-zero block gets scale 1.
func quantizeBlocks(w []float32, rows, cols int, pow2 bool) ([]byte, []float32) {
	const B = config.FP8BlockSize
	br, bc := ceilDiv(rows, B), ceilDiv(cols, B)
	codes, scales := make([]byte, rows*cols), make([]float32, br*bc)
	for bi := 0; bi < br; bi++ {
		for bj := 0; bj < bc; bj++ {
			var amax float32
			for i := bi * B; i < min(rows, (bi+1)*B); i++ {
				for _, v := range w[i*cols+bj*B : i*cols+min(cols, (bj+1)*B)] {
					if a := float32(math.Abs(float64(v))); a > amax && !math.IsInf(float64(a), 0) {
						amax = a
					}
				}
			}
			s := float32(1)
			if amax > 0 {
				s = amax / 448
				if pow2 {
					s = float32(math.Exp2(math.Ceil(math.Log2(float64(s)))))
				}
			}
			scales[bi*bc+bj] = s
			for i := bi * B; i < min(rows, (bi+1)*B); i++ {
				for j := bj * B; j < min(cols, (bj+1)*B); j++ {
					codes[i*cols+j] = numfmt.E4M3FromF32(w[i*cols+j] / s)
				}
			}
		}
	}
	return codes, scales
}
