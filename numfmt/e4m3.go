package numfmt

import "math"

// Bit patterns used by the e4m3 encoder.
const (
	e4m3MaxBits      = 0x43E00000 // float32 bits of 448, the largest finite e4m3 value
	e4m3MinNormBits  = 121 << 23  // float32 bits of 2^-6, the smallest normal e4m3 value
	e4m3SubnormAdder = 141 << 23  // float32 bits of 2^14: its ulp is 2^-9, the e4m3 subnormal step
	f32ExpBiasShift  = 120 << 23  // (127 − 7) << 23: float32 exponent bias minus e4m3 bias
)

// e4m3Table maps every e4m3 code to its float32 value.
var e4m3Table = buildE4M3Table()

func buildE4M3Table() (t [256]float32) {
	for c := range 256 {
		sign := uint32(c&0x80) << 24
		exp := uint32(c>>3) & 0xF
		man := uint32(c) & 0x7
		var v float32
		switch {
		case exp == 0xF && man == 0x7:
			v = float32(math.NaN())
		case exp == 0: // subnormal: man · 2^-9
			v = float32(man) / 512
		default: // (1 + man/8) · 2^(exp−7)
			v = math.Float32frombits((exp+127-7)<<23 | man<<20)
		}
		t[c] = math.Float32frombits(math.Float32bits(v) | sign)
	}
	return t
}

// F32FromE4M3 decodes a float8_e4m3fn code. 0x7F and 0xFF are NaN, 0x7E is
// 448, 0x01 is 2^-9 and 0x80 is −0.
func F32FromE4M3(b uint8) float32 {
	return e4m3Table[b]
}

// E4M3FromF32 encodes f as float8_e4m3fn with round-to-nearest-even after
// clamping to [−448, 448]: finite values and infinities never become NaN.
// Values below 2^-6 in magnitude become subnormals (step 2^-9); magnitudes
// up to 2^-10 round to ±0. NaN encodes to 0x7F, or 0xFF when its sign bit is
// set.
func E4M3FromF32(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7FFFFFFF
	switch {
	case a > 0x7F800000: // NaN
		return 0x7F | sign
	case a >= e4m3MaxBits: // saturate, including ±Inf
		return 0x7E | sign
	case a < e4m3MinNormBits:
		// Adding 2^14 leaves a float32 whose ulp is 2^-9: the hardware
		// addition performs the round-to-nearest-even onto the subnormal grid,
		// and the mantissa of the sum counts the 2^-9 steps (0..8; 8 is 2^-6,
		// the smallest normal code, which follows the subnormals directly).
		sum := float32(math.Float32frombits(a) + math.Float32frombits(e4m3SubnormAdder))
		return uint8(math.Float32bits(sum)-e4m3SubnormAdder) | sign
	default:
		// Rebias the exponent and round the 23-bit mantissa to 3 bits,
		// ties to even (a carry into the exponent is the correct result).
		odd := (a >> 20) & 1
		return uint8((a-f32ExpBiasShift+0x7FFFF+odd)>>20) | sign
	}
}

// pow2Ceil returns the smallest power of two ≥ v for a positive normal
// float32 v: 2^ceil(log2(v)), computed exactly.
func pow2Ceil(v float32) float32 {
	b := math.Float32bits(v)
	if b&0x7FFFFF == 0 {
		return v
	}
	return math.Float32frombits((b & 0x7F800000) + (1 << 23))
}

// absMaxFinite returns the largest |x| over the finite values of xs (0 when
// there are none). NaN and ±Inf are skipped so that one bad value cannot
// turn a whole tile's scale into NaN or Inf.
func absMaxFinite(xs []float32) float32 {
	var m uint32
	for _, x := range xs {
		// For non-negative floats the bit patterns order like the values.
		a := math.Float32bits(x) & 0x7FFFFFFF
		if a > m && a < 0x7F800000 {
			m = a
		}
	}
	return math.Float32frombits(m)
}
