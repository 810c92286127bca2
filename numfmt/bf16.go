package numfmt

import "math"

// BF16FromF32 converts f to bfloat16 with round-to-nearest-even. Values
// beyond the largest finite bfloat16 round to ±Inf; NaN becomes a quiet NaN
// with the sign of f.
func BF16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7FFFFFFF > 0x7F800000 { // NaN
		return uint16(b>>16) | 0x0040
	}
	return uint16((b + 0x7FFF + (b>>16)&1) >> 16)
}

// F32FromBF16 widens a bfloat16 to float32 (exact).
func F32FromBF16(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// RoundBF16 returns f rounded to the nearest bfloat16 value, as float32.
func RoundBF16(f float32) float32 {
	return F32FromBF16(BF16FromF32(f))
}

// BF16ToF32s widens src into dst[:len(src)]. It panics if dst is shorter
// than src.
func BF16ToF32s(dst []float32, src []uint16) {
	checkLen("bf16 widening destination", len(dst), len(src))
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// F32sToBF16 rounds src into dst[:len(src)] with BF16FromF32. It panics if
// dst is shorter than src.
func F32sToBF16(dst []uint16, src []float32) {
	checkLen("bf16 rounding destination", len(dst), len(src))
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = BF16FromF32(f)
	}
}
