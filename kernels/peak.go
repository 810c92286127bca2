package kernels

// FMAPeakLoop runs rounds rounds of independent fused multiply-add chains
// with the widest vectors the CPU supports, whatever implementation is
// active (24 chains of 16 lanes for AVX-512, 12 of 8 for AVX2), and returns
// the floating-point operations it executed; timing it gives the core's fp32
// FMA peak, the yardstick of every implementation. Without AVX2 (or off
// amd64) it runs nothing and returns 0. A call of 10⁵ rounds takes well under
// a millisecond.
func FMAPeakLoop(rounds int) (flops float64) {
	if rounds <= 0 {
		return 0
	}
	return fmaPeak(rounds)
}

// StreamSum returns Σ x, reading every element once with the widest loads the
// CPU supports (whatever implementation is active) as four concurrent streams (one per quarter of
// x, each with its own vector accumulator, combined in a fixed tree), the
// way a GEMV streams four weight rows; timing it over a buffer far larger
// than the caches gives the memory read bandwidth of one core. Without AVX2
// it is a plain ordered loop.
func StreamSum(x []float32) float32 {
	if s, ok := readSum(x); ok {
		return s
	}
	var s float32
	for _, v := range x {
		s += v
	}
	return s
}
