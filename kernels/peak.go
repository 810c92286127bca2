package kernels

// FMAPeakLoop runs rounds rounds of independent fused multiply-add chains
// with the widest vectors the CPU supports, whatever implementation is
// active (24 chains of 16 lanes for AVX-512, 12 of 8 for AVX2), and returns
// the floating-point operations it executed; timing it gives the core's fp32
// FMA peak, the yardstick of every implementation. Without AVX2 (or off
// amd64) it runs nothing and returns 0. A call of 10⁵ rounds takes well under
// a millisecond.
func FMAPeakLoop(rounds int) (flops float64) {
	// At most peakChunk rounds per assembly call keep each call far below a
	// millisecond, so the scheduler and GC are never held up.
	const peakChunk = 50_000
	for rounds > 0 {
		r := min(rounds, peakChunk)
		flops += fmaPeak(r)
		rounds -= r
	}
	return flops
}

// StreamSum returns Σ x, reading every element once with the widest loads the
// CPU supports (whatever implementation is active): chunks of 32 Ki values,
// each read as eight concurrent streams of 16 KiB (one per eighth, each with
// its own vector accumulator, combined in a fixed tree) and prefetched 1 KiB
// ahead — the access pattern of the one-row GEMV, which streams eight
// adjacent weight rows of a projection at once and prefetches them the same
// distance ahead; the chunk sums are added in order. Timing it over a
// buffer far larger than the caches gives the memory read bandwidth of one
// core. Without AVX2 it is a plain ordered loop.
func StreamSum(x []float32) float32 {
	// Chunks of 32 Ki values (128 KiB) per assembly call; their sums are
	// added in order.
	const chunk = 32 << 10
	if _, ok := readSum(nil); ok {
		var s float32
		for len(x) > 0 {
			c := x[:min(chunk, len(x))]
			v, _ := readSum(c)
			s += v
			x = x[len(c):]
		}
		return s
	}
	var s float32
	for _, v := range x {
		s += v
	}
	return s
}
