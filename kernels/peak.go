package kernels

import (
	"fmt"
	"slices"
)

// FMAPeakLoop runs rounds rounds of independent fused multiply-add chains
// with the widest vectors the CPU supports, whatever implementation is
// active (24 chains of 16 lanes for AVX-512, 12 of 8 for AVX2), and returns
// the floating-point operations it executed; timing it gives the core's fp32
// FMA peak, the yardstick of every implementation. Without AVX2 (or off
// amd64) it runs nothing and returns 0. A call of 10⁵ rounds takes well under
// a millisecond.
func FMAPeakLoop(rounds int) (flops float64) { return inChunks(rounds, fmaPeak) }

// inChunks runs a probe loop for rounds rounds, at most 50,000 per assembly
// call so that each call stays far below a millisecond and the scheduler
// and GC are never held up, and sums what the calls report.
func inChunks(rounds int, probe func(rounds int) float64) (work float64) {
	const chunk = 50_000
	for rounds > 0 {
		r := min(rounds, chunk)
		work += probe(r)
		rounds -= r
	}
	return work
}

// FP8DecodeLoop runs rounds rounds of the fp8 tiles' decoding with the
// widest vectors the CPU supports, whatever implementation is active (eight
// independent vectors of 16 codes a round for AVX-512, of 8 for AVX2), on
// codes that stay in L1, and returns the codes it decoded; timing it gives
// the most fp8 weights per second a core can turn into the float32 values a
// product multiplies, with nothing else running. Each weight an fp8 product
// reads is decoded at least once, on the same vector pipes as its FMAs
// (the scale's multiply on the FMA pipes themselves), so next to the read
// bandwidth this rate says how much of a core an fp8 GEMV leaves to its
// FMAs. Without AVX2 (or off amd64) it runs nothing and returns 0. A call
// of 10⁵ rounds takes well under a millisecond.
func FP8DecodeLoop(rounds int) (codes float64) { return inChunks(rounds, fp8DecodePeak) }

// FP8ProductRows are the activation-row counts FP8ProductLoop measures.
var FP8ProductRows = []int{1, 2, 4, 8}

// FP8ProductLoop runs rounds rounds of the instruction mix of an fp8
// product of rows activation rows (one of FP8ProductRows) with the widest
// vectors the CPU supports, and returns the codes it decoded (each one
// multiplied into rows accumulators: 2·rows FLOPs per code). A round
// decodes a few weight vectors with the tiles' exact sequence, then loads
// each activation row's vector once and fuses it with every decoded vector
// into its own accumulator: the dot-product order every fp8 tile keeps
// (each output's lanes sum over the reduction, so a row's bits never depend
// on its batch), with codes and activations in L1 and nothing else
// running. Timing it gives the most fp8 weights per second a core can
// multiply into that many rows: for one row, next to the read bandwidth,
// the ceiling of an fp8 GEMV; for eight, next to the FMA peak, the
// ceiling of a batch's fp8 products. Without AVX2 (or off amd64) it runs
// nothing and returns 0; any other row count panics. A call of 10⁵ rounds
// takes well under a millisecond.
func FP8ProductLoop(rows, rounds int) (codes float64) {
	if !slices.Contains(FP8ProductRows, rows) {
		panic(fmt.Sprintf("kernels: FP8ProductLoop measures %v activation rows, not %d", FP8ProductRows, rows))
	}
	return inChunks(rounds, func(r int) float64 { return fp8ProductPeak(rows, r) })
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

// StreamSumPaired returns Σ x (up to rounding), reading it as 2·pairs equal
// parts, part 2i beside part 2i+1, 512 bytes of each a step, front to back
// with no software prefetch; with two pairs or more the pairs take turns
// every 4 KiB. One pair is the walk of the one-row product of interleaved
// bf16 weights, which reads a group of rows of a weight's first half beside
// one of its second. On some cores these walks read faster than
// StreamSum's eight streams prefetched 1 KiB ahead (a Zen 4 core: up to 30
// against 23–25 GB/s, docs/performance-log.md, "The read probe below the
// products it measures"), so a read probe times them all (ReadProbes).
// Without AVX-512, or with fewer than 256 values a part, it reads as
// StreamSum; pairs below 1 panic.
func StreamSumPaired(x []float32, pairs int) float32 {
	if pairs < 1 {
		panic(fmt.Sprintf("kernels: StreamSumPaired reads x as pairs of parts, not %d pairs", pairs))
	}
	// Each call reads one block of each part of a pair: 32 Ki values of
	// each (as StreamSum's chunks) for one pair, 1 Ki when pairs take turns.
	block := 32 << 10
	if pairs > 1 {
		block = 1 << 10
	}
	part := len(x) / (2 * pairs) &^ 127
	if _, ok := readPairSum(nil, nil); !ok || part < 256 {
		return StreamSum(x)
	}
	var s float32
	for off := 0; off < part; off += block {
		n := min(block, part-off)
		for p := range pairs {
			a := x[2*p*part+off:]
			b := x[(2*p+1)*part+off:]
			v, _ := readPairSum(a[:n], b[:n])
			s += v
		}
	}
	return s + StreamSum(x[2*pairs*part:])
}

// ReadProbes are the ways of reading a buffer a read-bandwidth probe times;
// each returns the buffer's sum. The bandwidth is the fastest of them: a
// roofline counts the time a kernel reading the best way would take, so the
// probe must not be slower than any kernel's walk.
var ReadProbes = []func(x []float32) float32{
	StreamSum,
	func(x []float32) float32 { return StreamSumPaired(x, 1) },
	func(x []float32) float32 { return StreamSumPaired(x, 2) },
	func(x []float32) float32 { return StreamSumPaired(x, 4) },
}

// StreamFMAPerLine are the FMA counts per 64-byte line StreamFMA runs.
var StreamFMAPerLine = []int{2, 4, 8, 16, 32}

// StreamFMA reads x front to back as one stream, loads each 64-byte line
// into a vector once and fuses it fmasPerLine times (one of
// StreamFMAPerLine) with the constant ½ into accumulators of their own,
// prefetching 16 KiB ahead, and returns the accumulators' sum:
// fmasPerLine·½·Σx up to rounding (the values past the last whole 512
// bytes are added once each, times fmasPerLine·½). Timed over a buffer
// far larger than the caches it shows how close one core comes to the
// larger of its read time and its FMA time when it needs both at once:
// the ceiling of a product streaming its weights, whose FMAs wait on the
// lines they multiply as these do. A product of r rows on bf16 weights
// does 2·r FMAs a line (32 values, two vectors), on fp8 weights 4·r
// besides its decoding. ok is false without AVX-512 (nothing runs); any
// other fmasPerLine panics.
func StreamFMA(x []float32, fmasPerLine int) (s float32, ok bool) {
	if !slices.Contains(StreamFMAPerLine, fmasPerLine) {
		panic(fmt.Sprintf("kernels: StreamFMA runs %v FMAs per line, not %d", StreamFMAPerLine, fmasPerLine))
	}
	// Chunks of 32 Ki values per assembly call, as StreamSum.
	const chunk = 32 << 10
	for len(x) > 0 {
		c := x[:min(chunk, len(x))]
		v, ok := streamFMA(c, fmasPerLine)
		if !ok {
			return 0, false
		}
		s += v
		x = x[len(c):]
	}
	return s, true
}
