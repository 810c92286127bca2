package kernels

import (
	"math"
	"slices"

	"github.com/cpmla/cpmla/internal/freelist"
)

// A long row's k best are found from a threshold that a sample of the row
// puts just below its k-th best score: one pass keeps the scores at or above
// it (about twice k of them) and a radix sort orders those. The radix
// select (topKRadix) passes over the whole row four times; this passes over
// it once.
const (
	topkSampleMin = 8192     // scores in a row worth sampling
	topkSamples   = 512      // scores in the sample, evenly spaced
	topkCandMax   = 16 << 10 // candidates the pass may keep
)

// topkCands is the candidate buffer of one topKSampled call (the kept
// indices, then the packed keys), with the radix sort's scratch and counts.
type topkCands struct {
	idx         [topkCandMax]uint32
	packed, tmp [topkCandMax]uint64
	counts      [2048]int32
}

// topkCandBufs keeps the candidate buffers of finished calls for the next.
var topkCandBufs = freelist.New[topkCands](16, nil)

// topKSampled is TopK (same selection, same order) for a row of at least
// topkSampleMin scores, or reports false, having written nothing, when the
// sample gives no usable threshold: too few candidates (fewer than k scores at or
// above the threshold, which a binomial count makes unlikely past four
// standard deviations) or too many (more than topkCandMax: heavy ties, or a k
// near n). The caller then selects by radix.
//
// The sample is every (n/topkSamples)-th score; its m selectable keys are
// sorted and the threshold is their r-th best, r = e + 4√e + 8, where
// e = k·topkSamples/n is how many of them lie above the row's k-th best on
// average. Every selectable score whose key is at least the threshold is kept,
// packed as (^key, index) so that the packed order is TopK's order (score
// descending, then index ascending); when at least k are kept, the row's k
// best are among them, and an LSD radix sort of their keys (stable, and the
// pass kept them in index order) gives the first k in order.
func topKSampled(dst []int32, scores []float32) (int, bool) {
	n, k := len(scores), len(dst)
	var sample [topkSamples]uint32
	m := 0
	stride := n / topkSamples
	for j := range topkSamples {
		if s := scores[j*stride]; selectable(s) {
			sample[m] = topkKey(s)
			m++
		}
	}
	// Of the row's selectable scores (about n·m/topkSamples), a fraction k
	// over that lies above its k-th best, so about e = k·topkSamples/n of
	// the m sampled ones do: the rows of a prefill, −Inf past their
	// position, sample fewer selectable scores and need no larger e.
	e := float64(k) * topkSamples / float64(n)
	r := int(e + 4*math.Sqrt(e) + 8)
	// Too many candidates expected (n·r/topkSamples of them): the radix
	// select is the better choice, and the buffer would likely overflow.
	if r >= m || float64(n)*float64(r) > float64(topkCandMax/2)*topkSamples {
		return 0, false
	}
	slices.Sort(sample[:m])
	thr := sample[m-r]

	c := topkCandBufs.Get()
	defer topkCandBufs.Put(c)
	thrScore := topkScore(thr)
	idx := &c.idx
	cnt, ok := topkKeep(idx, scores, thrScore)
	if !ok || cnt < k {
		return 0, false
	}
	for j, i := range idx[:cnt] {
		c.packed[j] = topkPacked(scores[i], i)
	}
	sorted := radixSortPacked(c, cnt)
	for i := range dst {
		dst[i] = int32(uint32(sorted[i]))
	}
	return k, true
}

// topkKeep is topKSampled's candidate pass: it writes to idx the positions
// of the scores at or above thr, in increasing order, and returns how many,
// or false when more than topkCandMax−64 were kept before a block of 64
// (the room a block needs). A float comparison with the threshold's score
// keeps the same scores as comparing keys (both zeros pass a zero
// threshold, and NaN fails every comparison). On AVX-512 topkKeepFast does
// the whole blocks; topkKeepRef does the rest, and everything elsewhere.
func topkKeep(idx *[topkCandMax]uint32, scores []float32, thr float32) (int, bool) {
	cnt, done := topkKeepFast(idx, scores, thr)
	if cnt < 0 {
		return 0, false
	}
	return topkKeepRef(idx, scores, thr, done, cnt)
}

// topkKeepRef is topkKeep from score b on (a multiple of 64), cnt kept
// before it. Branch-free: every position is written at idx[cnt] and cnt
// moves past it when its score is kept; each block of 64 checks the room
// first.
func topkKeepRef(idx *[topkCandMax]uint32, scores []float32, thr float32, b, cnt int) (int, bool) {
	for ; b < len(scores); b += 64 {
		if cnt > topkCandMax-64 {
			return 0, false
		}
		for i, s := range scores[b:min(b+64, len(scores))] {
			idx[cnt] = uint32(b + i)
			cnt += int(b2i(s >= thr))
		}
	}
	return cnt, true
}

// radixSortPacked sorts c.packed[:n] by their high 32 bits (^key), stably,
// 11, 11 and 10 bits at a time, and returns the sorted slice (c.packed or
// c.tmp). The low bits (indices) are in increasing order already, so the
// result is sorted by the whole 64 bits.
func radixSortPacked(c *topkCands, n int) []uint64 {
	src, dst := c.packed[:n], c.tmp[:n]
	for _, shift := range [3]uint{32, 43, 54} {
		width := uint(11)
		if shift == 54 {
			width = 10
		}
		mask := uint64(1)<<width - 1
		counts := c.counts[:1<<width]
		clear(counts)
		for _, p := range src {
			counts[p>>shift&mask]++
		}
		// If one bucket holds everything, this digit orders nothing.
		if int(counts[src[0]>>shift&mask]) == n {
			continue
		}
		var sum int32
		for b, v := range counts {
			counts[b] = sum
			sum += v
		}
		for _, p := range src {
			d := p >> shift & mask
			dst[counts[d]] = p
			counts[d]++
		}
		src, dst = dst, src
	}
	return src
}

// topkScore is the score whose key (topkKey) is key, +0 for the zeros' key.
func topkScore(key uint32) float32 {
	if key&(1<<31) != 0 {
		return math.Float32frombits(key ^ 1<<31)
	}
	return math.Float32frombits(^key)
}
