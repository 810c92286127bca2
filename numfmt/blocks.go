package numfmt

import (
	"fmt"
	"math"
)

// WeightBlock is the side of the square blocks of an fp8 weight that share
// one scale: 128, the weight_block_size of DeepSeek-V3 and GLM-5 fp8
// checkpoints.
const WeightBlock = 128

// MinWeightScale is the smallest block scale QuantizeE4M3Blocks writes:
// 2^-126, the smallest normal float32. A block whose largest magnitude is
// below 448·2^-126 (an all-zero block among them) gets this scale, so that
// every scale is a positive normal number whose reciprocal is finite too.
const MinWeightScale = 0x1p-126

// WeightScaleBlocks returns the shape of the scale grid of a [rows, cols]
// weight: ⌈rows/128⌉ × ⌈cols/128⌉ (edge blocks are partial).
func WeightScaleBlocks(rows, cols int) (br, bc int) {
	return (rows + WeightBlock - 1) / WeightBlock, (cols + WeightBlock - 1) / WeightBlock
}

// QuantizeE4M3Blocks quantizes the row-major float32 weight w [rows, cols]
// the way fp8 checkpoints are made: for each 128×128 block (partial at the
// right and bottom edges) scale = float32(amax/448), amax the block's
// largest magnitude, raised to MinWeightScale when smaller; then every
// element becomes codes[i] = E4M3FromF32(float32(w[i]/scale)) (round to
// nearest even, saturating), so the block's largest magnitude maps to 448.
// scales gets the block scales row-major, [⌈rows/128⌉, ⌈cols/128⌉], the
// tensor a checkpoint stores as weight_scale_inv (multiplied, despite the
// name: the weight is F32FromE4M3(code)·scale). A NaN or infinite weight is
// refused, naming its position, and nothing is written for its block; so
// are lengths that do not fit the shape.
func QuantizeE4M3Blocks(codes []uint8, scales []float32, w []float32, rows, cols int) error {
	return quantizeE4M3Blocks("QuantizeE4M3Blocks", codes, scales, w, rows, cols, false)
}

// QuantizeE4M3BlocksUE8M0 is QuantizeE4M3Blocks with every block scale
// rounded up to a power of two, the scale_fmt "ue8m0" of DeepSeek-V3.1 and
// later checkpoints (a scale stored in 8 exponent bits and no mantissa): the
// block's largest magnitude then maps to at most 448.
func QuantizeE4M3BlocksUE8M0(codes []uint8, scales []float32, w []float32, rows, cols int) error {
	return quantizeE4M3Blocks("QuantizeE4M3BlocksUE8M0", codes, scales, w, rows, cols, true)
}

func quantizeE4M3Blocks(name string, codes []uint8, scales []float32, w []float32, rows, cols int, pow2 bool) error {
	if err := checkBlockShape(len(codes), len(scales), len(w), rows, cols); err != nil {
		return fmt.Errorf("numfmt: %s: %w", name, err)
	}
	br, bc := WeightScaleBlocks(rows, cols)
	for bi := range br {
		r0, r1 := bi*WeightBlock, min((bi+1)*WeightBlock, rows)
		for bj := range bc {
			c0, c1 := bj*WeightBlock, min((bj+1)*WeightBlock, cols)
			var amax uint32 // bits of the largest magnitude; they order like the values
			for r := r0; r < r1; r++ {
				for c := c0; c < c1; c++ {
					a := math.Float32bits(w[r*cols+c]) & 0x7FFFFFFF
					if a >= 0x7F800000 {
						return fmt.Errorf("numfmt: %s: weight [%d, %d] is %v; an fp8 weight must be finite", name, r, c, w[r*cols+c])
					}
					amax = max(amax, a)
				}
			}
			scale := max(math.Float32frombits(amax)/448, MinWeightScale)
			if pow2 {
				scale = pow2Ceil(scale)
			}
			scales[bi*bc+bj] = scale
			for r := r0; r < r1; r++ {
				for c := c0; c < c1; c++ {
					codes[r*cols+c] = E4M3FromF32(w[r*cols+c] / scale)
				}
			}
		}
	}
	return nil
}

// DequantizeE4M3Blocks is the inverse map: dst[i] = F32FromE4M3(codes[i])·s
// rounded once to float32, s the scale of the element's block, for a
// row-major [rows, cols] weight and its [⌈rows/128⌉, ⌈cols/128⌉] scales.
// It returns an error if the lengths do not fit the shape.
func DequantizeE4M3Blocks(dst []float32, codes []uint8, scales []float32, rows, cols int) error {
	if err := checkBlockShape(len(codes), len(scales), len(dst), rows, cols); err != nil {
		return fmt.Errorf("numfmt: DequantizeE4M3Blocks: %w", err)
	}
	_, bc := WeightScaleBlocks(rows, cols)
	for r := range rows {
		srow := scales[r/WeightBlock*bc:]
		for c := range cols {
			dst[r*cols+c] = F32FromE4M3(codes[r*cols+c]) * srow[c/WeightBlock]
		}
	}
	return nil
}

// checkBlockShape checks the lengths of a [rows, cols] block-quantized
// weight: codes and values rows·cols long, scales one per block.
func checkBlockShape(nCodes, nScales, nValues, rows, cols int) error {
	if rows < 0 || cols < 0 || (cols > 0 && rows > math.MaxInt/cols) {
		return fmt.Errorf("weight shape [%d, %d] is negative or overflows int", rows, cols)
	}
	br, bc := WeightScaleBlocks(rows, cols)
	switch {
	case nCodes != rows*cols || nValues != rows*cols:
		return fmt.Errorf("weight [%d, %d] needs %d codes and values, got %d codes and %d values", rows, cols, rows*cols, nCodes, nValues)
	case nScales != br*bc:
		return fmt.Errorf("weight [%d, %d] needs [%d, %d] = %d block scales of %d×%d, got %d", rows, cols, br, bc, br*bc, WeightBlock, WeightBlock, nScales)
	}
	return nil
}
