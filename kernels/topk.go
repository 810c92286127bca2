package kernels

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// TopK writes into dst the indices of the len(dst) largest scores, ordered by
// score descending and, among equal scores, by lowest index first (a total
// order, so the result is deterministic). Entries whose score is −Inf or NaN
// are never selected; −0 and +0 are equal scores. Slots left unused are set to
// −1. It returns the number selected: min(len(dst), number of selectable
// entries). It panics if len(scores) does not fit in int32.
//
// A row with no more scores than k is sorted whole. Short rows and small k
// use a heap of k entries (O(n log k)). Long rows
// with a large k (useRadix) use a radix select instead: up to three histogram
// passes over the scores' order-preserving 32-bit keys find the k-th best
// key, one pass collects the entries above it and the lowest-index ties at
// it, and the k selected are sorted (O(n + k log k)). Rows of topkSampleMin
// scores or more first try topKSampled, one pass over the row from a
// sampled threshold, and fall back to the radix select when the sample's
// threshold does not hold. None allocates after warm-up: the radix select's
// histograms and, for k ≤ 2048, its sort buffer live on the stack, and the
// sampled pass's candidates in pooled buffers.
func TopK(dst []int32, scores []float32) int {
	return topK(dst, scores, Threads() > 1)
}

// topK is TopK; split says whether a long row may be split over two
// threads (never inside a part of a parallel call, whose pool it would wait
// on).
func topK(dst []int32, scores []float32, split bool) int {
	if len(scores) > math.MaxInt32 {
		panic(fmt.Sprintf("kernels: TopK: %d scores exceed the int32 index range", len(scores)))
	}
	k := len(dst)
	if k == 0 {
		return 0
	}
	if k >= len(scores) && len(scores) > 64 {
		return topKAll(dst, scores)
	}
	if useRadix(len(scores), k) {
		if len(scores) >= topkSampleMin {
			if cnt, ok := topKSampled(dst, scores); ok {
				return cnt
			}
		}
		if split && len(scores) >= topkSplitMin && k <= topkSplitMaxK {
			return topKSplit(dst, scores)
		}
		return topKRadix(dst, scores)
	}
	return topKHeap(dst, scores)
}

// TopKRows is TopK over rows of scores at once: row i is
// scores[i·stride : i·stride+lens[i]], its indices go to dst[i·k:(i+1)·k]
// and its count to counts[i], k = len(dst)/len(lens). On two or more threads
// the rows are spread over the threads (row i on part i mod parts, so that
// rows of growing length, as a causal prompt's are, share out evenly); each
// row's result is TopK's whatever the thread count. It panics on
// inconsistent sizes.
func TopKRows(dst, counts []int32, scores []float32, stride int, lens []int32) {
	rows := len(lens)
	if rows == 0 {
		return
	}
	if len(dst)%rows != 0 || len(counts) < rows {
		panic(fmt.Sprintf("kernels: TopKRows: %d rows need len(dst) a multiple of %d and %d counts; got %d and %d", rows, rows, rows, len(dst), len(counts)))
	}
	for i, n := range lens {
		if n < 0 || int(n) > stride || len(scores) < i*stride+int(n) {
			panic(fmt.Sprintf("kernels: TopKRows: row %d of %d scores with stride %d does not fit %d scores", i, n, stride, len(scores)))
		}
	}
	parts := min(Threads(), rows)
	if parts <= 1 {
		k := len(dst) / rows
		for i, n := range lens {
			counts[i] = int32(TopK(dst[i*k:(i+1)*k], scores[i*stride:i*stride+int(n)]))
		}
		return
	}
	var t *topkRowsTask
	select {
	case t = <-topkRowsTasks:
	default:
		t = new(topkRowsTask)
	}
	t.dst, t.counts, t.scores, t.stride, t.lens = dst, counts, scores, stride, lens
	runParts(t, parts, &t.join)
	t.dst, t.counts, t.scores, t.lens = nil, nil, nil, nil
	select {
	case topkRowsTasks <- t:
	default:
	}
}

// topkRowsTask is one TopKRows call on several threads: part p selects rows
// p, p+parts, p+2·parts, …
type topkRowsTask struct {
	dst, counts, lens []int32
	scores            []float32
	stride            int
	join              joiner
}

var topkRowsTasks = make(chan *topkRowsTask, 16)

func (t *topkRowsTask) runPart(p, parts int) {
	k := len(t.dst) / len(t.lens)
	for i := p; i < len(t.lens); i += parts {
		t.counts[i] = int32(topK(t.dst[i*k:(i+1)*k], t.scores[i*t.stride:i*t.stride+int(t.lens[i])], false))
	}
}

// A long row on two or more threads is split in two halves selected
// concurrently (each half's best k contain every entry of the row's best k
// from that half) and the two ordered lists are merged.
const (
	topkSplitMin  = 32 << 10 // scores in a row worth splitting
	topkSplitMaxK = 2048     // k the task's buffers hold
)

// topkTask is one split TopK: part p selects from half p into best[p].
type topkTask struct {
	scores []float32
	k      int
	best   [2][topkSplitMaxK]int32
	cnt    [2]int
	join   joiner
}

var topkTasks = make(chan *topkTask, 16)

func (t *topkTask) runPart(p, parts int) {
	lo, hi := partRange(len(t.scores), 1, p, parts)
	t.cnt[p] = topKRadix(t.best[p][:t.k], t.scores[lo:hi])
	for i := range t.cnt[p] {
		t.best[p][i] += int32(lo)
	}
}

// topKSplit is TopK over two halves selected on two threads and merged in
// the total order (score descending, then index ascending).
func topKSplit(dst []int32, scores []float32) int {
	var t *topkTask
	select {
	case t = <-topkTasks:
	default:
		t = new(topkTask)
	}
	t.scores, t.k = scores, len(dst)
	runParts(t, 2, &t.join)
	a, b := t.best[0][:t.cnt[0]], t.best[1][:t.cnt[1]]
	cnt := 0
	for cnt < len(dst) && (len(a) > 0 || len(b) > 0) {
		// Every index of a is below every index of b, so a wins ties.
		if len(b) == 0 || (len(a) > 0 && topkKey(scores[a[0]]) >= topkKey(scores[b[0]])) {
			dst[cnt], a = a[0], a[1:]
		} else {
			dst[cnt], b = b[0], b[1:]
		}
		cnt++
	}
	for i := cnt; i < len(dst); i++ {
		dst[i] = -1
	}
	t.scores = nil
	select {
	case topkTasks <- t:
	default:
	}
	return cnt
}

// topKAll is TopK when every selectable score is selected (k ≥ n): the
// selectable indices, sorted.
func topKAll(dst []int32, scores []float32) int {
	cnt := 0
	for i, s := range scores {
		if selectable(s) {
			dst[cnt] = int32(i)
			cnt++
		}
	}
	sortTopK(dst[:cnt], scores)
	for i := cnt; i < len(dst); i++ {
		dst[i] = -1
	}
	return cnt
}

// useRadix reports whether the radix select beats the heap for k of n: it
// has a fixed cost (about 7 µs of histogram clearing and scanning) and a
// cost per score, the heap a cost per insertion that grows with k. Measured
// here: n = 3000, k = 2048: heap 128 µs, radix 51 µs; n = 65536, k = 2048:
// 867 µs and 464 µs; n = 1024, k = 256: 9 µs and 16 µs.
func useRadix(n, k int) bool {
	return k < n && (n >= 16384 || (n >= 2048 && k >= 256))
}

// topkKey maps a selectable score (not NaN, not −Inf) to a key whose
// unsigned order is the score order, with −0 and +0 equal; keys are ≥ 1.
func topkKey(s float32) uint32 {
	// s + 0 is +0 for both zeros (IEEE 754 rounding to nearest) and s for
	// every other score, so −0 and +0 map alike without a branch: rows of
	// ReLU scores hold zeros at random places. Negative: all bits flipped;
	// positive: the sign bit set. Branch-free, since signs are random in a
	// row of scores.
	b := math.Float32bits(s + 0)
	return b ^ (uint32(int32(b)>>31) | 1<<31)
}

// topkPacked packs score s at index i so that the packed values' unsigned
// order is TopK's order: score descending (the key inverted above), then
// index ascending.
func topkPacked(s float32, i uint32) uint64 { return uint64(^topkKey(s))<<32 | uint64(i) }

// b2i is 1 for true and 0 for false.
func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// selectable reports whether TopK may select a score (not NaN, not −Inf).
func selectable(s float32) bool { return s == s && s >= -math.MaxFloat32 }

// topKRadix is TopK by radix select (see TopK); k < len(scores).
func topKRadix(dst []int32, scores []float32) int {
	k := len(dst)
	// Find the k-th best key 11, 11 and 10 bits at a time: prefix holds the
	// bits found so far; above counts the selectable keys whose prefix is
	// larger.
	// Four interleaved histograms, so that runs of keys in one bucket (scores
	// of one binade) do not serialize on a single counter.
	var hists [4][2048]int32
	hist := &hists[0]
	var prefix uint32
	above := 0
	cut := -1 // keys ≥ cut are selected whole once a bucket fills k exactly
	total := 0
	for level, shift := range [3]uint{21, 10, 0} {
		for c := range hists {
			clear(hists[c][:])
		}
		width := uint(11)
		if shift == 0 {
			width = 10
		}
		mask := uint32(1)<<width - 1
		for i, s := range scores {
			if !selectable(s) {
				continue
			}
			// Branch-free: a key outside the prefix adds 0 (the prefix
			// test is a coin toss near the k-th key).
			key := topkKey(s)
			hists[i&3][key>>shift&mask] += b2i(key>>(shift+width) == prefix)
		}
		for b := range hist {
			hist[b] += hists[1][b] + hists[2][b] + hists[3][b]
		}
		if level == 0 {
			for _, c := range hist {
				total += int(c)
			}
			if total <= k {
				break // every selectable score is selected
			}
		}
		b := int(mask)
		for ; b > 0 && above+int(hist[b]) < k; b-- {
			above += int(hist[b])
		}
		prefix = prefix<<width | uint32(b)
		if above+int(hist[b]) == k {
			cut = int(prefix << shift)
			break
		}
	}
	var threshold uint32 // keys above it are selected; ties at it fill the rest
	ties := 0
	switch {
	case total <= k:
		threshold = 0
	case cut >= 0:
		threshold = uint32(cut) - 1 // ≥ cut; cut ≥ 1 since keys are ≥ 1
	default:
		threshold = prefix
		ties = k - above
	}
	cnt := 0
	for i, s := range scores {
		if !selectable(s) {
			continue
		}
		key := topkKey(s)
		if key > threshold || (key == threshold && ties > 0) {
			if key == threshold {
				ties--
			}
			dst[cnt] = int32(i)
			cnt++
		}
	}
	sortTopK(dst[:cnt], scores)
	for i := cnt; i < k; i++ {
		dst[i] = -1
	}
	return cnt
}

// sortTopK orders selected indices best first: score descending, then index
// ascending. The indices arrive in increasing order (both callers select in
// one pass over the row), so a stable sort by score alone gives that order:
// the radix sort of topKSampled, three passes over the packed keys, where a
// comparison sort of a prompt's 2,048 selected positions took longer than
// selecting them; short lists, whose histograms would cost more than their
// comparisons, are sorted by comparison.
func sortTopK(idx []int32, scores []float32) {
	switch {
	case len(idx) <= topkSortMin:
		var buf [topkSortMin]uint64
		packed := buf[:len(idx)]
		for j, i := range idx {
			packed[j] = topkPacked(scores[i], uint32(i))
		}
		slices.Sort(packed)
		for j, p := range packed {
			idx[j] = int32(uint32(p))
		}
	case len(idx) <= topkCandMax:
		c := topkCandBufs.Get()
		defer topkCandBufs.Put(c)
		for j, i := range idx {
			c.packed[j] = topkPacked(scores[i], uint32(i))
		}
		for j, p := range radixSortPacked(c, len(idx)) {
			idx[j] = int32(uint32(p))
		}
	default:
		slices.SortFunc(idx, func(a, b int32) int {
			ka, kb := topkKey(scores[a]), topkKey(scores[b])
			switch {
			case ka != kb:
				return cmp.Compare(kb, ka)
			default:
				return cmp.Compare(a, b)
			}
		})
	}
}

// topkSortMin is the longest list sortTopK sorts by comparison.
const topkSortMin = 128

// topKHeap is TopK with a heap of k entries.
func topKHeap(dst []int32, scores []float32) int {
	k := len(dst)
	// dst[:cnt] is a heap whose root is the worst kept entry. Indices arrive in
	// increasing order, so a candidate whose score equals the root's loses the
	// tie and only strictly larger scores enter once the heap is full.
	cnt := 0
	var floor float32 // score of the heap root once the heap is full
	for i, s := range scores {
		if s != s || s < -math.MaxFloat32 { // NaN or −Inf
			continue
		}
		if cnt < k {
			dst[cnt] = int32(i)
			topkSiftUp(dst, scores, cnt)
			cnt++
			if cnt == k {
				floor = scores[dst[0]]
			}
			continue
		}
		if s <= floor {
			continue
		}
		dst[0] = int32(i)
		topkSiftDown(dst[:cnt], scores, 0)
		floor = scores[dst[0]]
	}
	// Heap sort: moving the worst to the end each time leaves dst[:cnt]
	// ordered best first.
	for end := cnt - 1; end > 0; end-- {
		dst[0], dst[end] = dst[end], dst[0]
		topkSiftDown(dst[:end], scores, 0)
	}
	for i := cnt; i < k; i++ {
		dst[i] = -1
	}
	return cnt
}

// topkWorse reports whether index a ranks below index b: a lower score, or an
// equal score at a higher index.
func topkWorse(scores []float32, a, b int32) bool {
	sa, sb := scores[a], scores[b]
	return sa < sb || (sa == sb && a > b)
}

func topkSiftUp(h []int32, scores []float32, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !topkWorse(scores, h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func topkSiftDown(h []int32, scores []float32, i int) {
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && topkWorse(scores, h[c+1], h[c]) {
			c++
		}
		if !topkWorse(scores, h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
