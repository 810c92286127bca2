package cp

import (
	"context"
	"fmt"
	"math"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
)

// MaxExactPosition is the first global position the top-k merge cannot
// carry: candidates travel as float32 (score, position) pairs, and every
// integer below 2^24 is exact in float32.
const MaxExactPosition = 1 << 24

// TopK selects the exact global top-k of indexer scores under DCP. Each rank
// scores only the keys it owns; TopK takes the local top-k of each row with
// mla.IndexerTopK, turns the local indices into global positions with
// kvcache.Layout.Global, all-gathers the [rows, k] (score, position)
// candidates packed as float32 pairs in one collective, and merges the N
// sorted candidate lists of every row into the global top-k: score
// descending, then lowest global position. The order is total, so every rank
// selects the identical list, and it equals the single-rank
// mla.IndexerTopK over all keys (the global top-k is always inside the union
// of the per-rank top-k lists).
//
// TopK is built for at most maxRows rows and does not allocate per call.
type TopK struct {
	layout      kvcache.Layout
	rank        int
	rows, k     int
	maxLocal    int
	local       []int32   // [rows, k] local top-k indices
	localCounts []int32   // [rows]
	send        []float32 // [rows, k, 2] (score, position)
	recv        []float32 // [N, rows, k, 2]
	cursor      []int     // [N] merge cursors
	maxSeqLen   int
}

// NewTopK returns the merge for DCP rank rank of layout, at most maxRows rows,
// top-k width k and requests of at most maxSeqLen tokens. maxSeqLen must be at
// most MaxExactPosition, so that every global position is exact in the packed
// float32 candidates.
func NewTopK(layout kvcache.Layout, rank, maxRows, k, maxSeqLen int) (*TopK, error) {
	if layout.N < 1 || layout.I < 1 || rank < 0 || rank >= layout.N {
		return nil, fmt.Errorf("cp: top-k merge for rank %d of a DCP layout N=%d I=%d: need N ≥ 1, I ≥ 1 and 0 ≤ rank < N", rank, layout.N, layout.I)
	}
	if maxRows < 1 || k < 1 || maxSeqLen < 1 {
		return nil, fmt.Errorf("cp: top-k merge sizes must be positive: rows=%d k=%d max-model-len=%d", maxRows, k, maxSeqLen)
	}
	if maxSeqLen > MaxExactPosition {
		return nil, fmt.Errorf("cp: the top-k merge packs global positions as float32, exact below %d, but max-model-len is %d; use --max-model-len %d or less",
			MaxExactPosition, maxSeqLen, MaxExactPosition)
	}
	return &TopK{
		layout: layout, rank: rank, rows: maxRows, k: k, maxSeqLen: maxSeqLen,
		maxLocal:    layout.LocalLen(maxSeqLen, rank),
		local:       make([]int32, maxRows*k),
		localCounts: make([]int32, maxRows),
		send:        make([]float32, maxRows*k*2),
		recv:        make([]float32, layout.N*maxRows*k*2),
		cursor:      make([]int, layout.N),
	}, nil
}

// Select computes the global top-k of rows rows. scores is [rows, width]:
// column j of row i is the score of this rank's local key j of the row's
// request (−Inf past the row's causal bound, as mla.IndexerScores writes it).
// dst [rows, k] receives global positions best first, padded with −1, and
// counts [rows] the number selected. rows must be the same on every rank of
// g; width may differ (ranks own different numbers of keys).
func (tk *TopK) Select(ctx context.Context, g comm.Group, dst, counts []int32, scores []float32, rows, width int) error {
	if g.Size() != tk.layout.N {
		return fmt.Errorf("cp: top-k merge built for a DCP group of %d ranks, group %s has %d", tk.layout.N, g.Name(), g.Size())
	}
	if rows < 0 || rows > tk.rows {
		return fmt.Errorf("cp: top-k merge of %d rows, built for at most %d", rows, tk.rows)
	}
	if width < 0 || width > tk.maxLocal {
		return fmt.Errorf("cp: top-k merge over %d local keys, but rank %d owns at most %d of a %d-token request", width, tk.rank, tk.maxLocal, tk.maxSeqLen)
	}
	k := tk.k
	if len(scores) < rows*width || len(dst) < rows*k || len(counts) < rows {
		return fmt.Errorf("cp: top-k merge of %d rows needs scores of %d, dst of %d and counts of %d values, got %d, %d, %d",
			rows, rows*width, rows*k, rows, len(scores), len(dst), len(counts))
	}
	mla.IndexerTopK(tk.local[:rows*k], tk.localCounts[:rows], scores[:rows*width], rows, width, k)
	negInf := float32(math.Inf(-1))
	for i := range rows {
		c := int(tk.localCounts[i])
		for j := range k {
			o := (i*k + j) * 2
			if j >= c {
				tk.send[o], tk.send[o+1] = negInf, -1
				continue
			}
			li := int(tk.local[i*k+j])
			tk.send[o] = scores[i*width+li]
			tk.send[o+1] = float32(tk.layout.Global(li, tk.rank))
		}
	}
	m := rows * k * 2
	if err := comm.AllGather(ctx, g, tk.recv[:tk.layout.N*m], tk.send[:m]); err != nil {
		return fmt.Errorf("cp: top-k candidate all-gather of %d values over %s: %w", m, g.Name(), err)
	}
	for i := range rows {
		counts[i] = int32(tk.merge(dst[i*k:(i+1)*k], i, rows))
	}
	return nil
}

// merge writes the best k candidates of row i of the gathered lists to dst
// and returns how many there are.
func (tk *TopK) merge(dst []int32, i, rows int) int {
	k := tk.k
	clear(tk.cursor)
	n := 0
	for n < k {
		best := -1
		var bs, bp float32
		for r, c := range tk.cursor {
			if c >= k {
				continue
			}
			o := ((r*rows+i)*k + c) * 2
			s, p := tk.recv[o], tk.recv[o+1]
			if p < 0 { // the rest of this list is padding
				continue
			}
			if best < 0 || s > bs || (s == bs && p < bp) {
				best, bs, bp = r, s, p
			}
		}
		if best < 0 {
			break
		}
		dst[n] = int32(bp)
		tk.cursor[best]++
		n++
	}
	for j := n; j < k; j++ {
		dst[j] = -1
	}
	return n
}
