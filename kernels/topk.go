package kernels

import (
	"fmt"
	"math"
)

// TopK writes into dst the indices of the len(dst) largest scores, ordered by
// score descending and, among equal scores, by lowest index first (a total
// order, so the result is deterministic). Entries whose score is −Inf or NaN
// are never selected; −0 and +0 are equal scores. Slots left unused are set to
// −1. It returns the number selected: min(len(dst), number of selectable
// entries). Time O(n log k) for n scores and k = len(dst); dst is the only
// memory used. It panics if len(scores) does not fit in int32.
func TopK(dst []int32, scores []float32) int {
	if len(scores) > math.MaxInt32 {
		panic(fmt.Sprintf("kernels: TopK: %d scores exceed the int32 index range", len(scores)))
	}
	k := len(dst)
	if k == 0 {
		return 0
	}
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
