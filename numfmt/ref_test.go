package numfmt

import (
	"math"
	"sort"
)

// Independent reference implementations used as test oracles. They follow
// the format definitions directly (math.Ldexp, nearest-value search) and
// share no code with the package.

// refE4M3 decodes an e4m3fn code from its definition: S EEEE MMM, bias 7,
// E=0 subnormal M·2^-9, E=15 M=7 NaN.
func refE4M3(b uint8) float64 {
	s := 1.0
	if b&0x80 != 0 {
		s = -1
	}
	e := int(b>>3) & 0xF
	m := float64(b & 7)
	switch {
	case e == 15 && m == 7:
		return math.NaN()
	case e == 0:
		return s * math.Ldexp(m, -9)
	default:
		return s * math.Ldexp(1+m/8, e-7)
	}
}

// refE4M3Positive lists the values of codes 0x00..0x7E in increasing order.
var refE4M3Positive = func() []float64 {
	v := make([]float64, 0x7F)
	for c := range v {
		v[c] = refE4M3(uint8(c))
	}
	return v
}()

// refEncodeE4M3 clamps x to ±448 and picks the nearest code, ties to the
// even code, by searching the sorted list of values. NaN keeps its sign.
func refEncodeE4M3(x float64) uint8 {
	var sign uint8
	if math.Signbit(x) {
		sign = 0x80
	}
	if math.IsNaN(x) {
		return 0x7F | sign
	}
	a := math.Min(math.Abs(x), 448)
	i := sort.SearchFloat64s(refE4M3Positive, a) // first value >= a
	if i == 0 {
		return sign
	}
	lo, hi := refE4M3Positive[i-1], refE4M3Positive[i]
	c := i
	switch {
	case a-lo < hi-a:
		c = i - 1
	case a-lo == hi-a && (i-1)%2 == 0:
		c = i - 1
	}
	return uint8(c) | sign
}

// refBF16 rounds x to the nearest bfloat16 by comparing the two candidates
// around it in float64; an infinity counts as 2^128 (IEEE overflow rule).
func refBF16(x float32) uint16 {
	b := math.Float32bits(x)
	lo := uint16(b >> 16)
	hi := lo + 1
	val := func(h uint16) float64 {
		if h&0x7FFF == 0x7F80 {
			return math.Copysign(math.Ldexp(1, 128), float64(x))
		}
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	if uint32(lo)<<16 == b {
		return lo
	}
	dlo := math.Abs(float64(x) - val(lo))
	dhi := math.Abs(float64(x) - val(hi))
	if dlo < dhi || (dlo == dhi && lo%2 == 0) {
		return lo
	}
	return hi
}

// refPow2Ceil is 2^ceil(log2(v)) in float64.
func refPow2Ceil(v float64) float64 {
	return math.Exp2(math.Ceil(math.Log2(v)))
}

// e4m3HalfULP is half the spacing of the e4m3 grid around |y| (for the
// binade containing y; 2^-10 in the subnormal range).
func e4m3HalfULP(y float64) float64 {
	y = math.Abs(y)
	if y < math.Ldexp(1, -6) {
		return math.Ldexp(1, -10)
	}
	_, e := math.Frexp(y) // y = f·2^e, f in [0.5, 1)
	return math.Ldexp(1, e-1-3-1)
}
