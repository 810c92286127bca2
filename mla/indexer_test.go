package mla

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/kernels"
)

// countingKeys records how often each slot's key is read.
type countingKeys struct {
	keys  DenseKeys
	reads map[int32]int
}

func (c *countingKeys) Key(slot int32, scratch []float32) []float32 {
	c.reads[slot]++
	return c.keys.Key(slot, scratch)
}

// TestIndexerScores compares with the float64 formula
// Σ_h w[i,h]·ReLU(q[i,h]·k[slot(j)]), −Inf past each query's bound.
func TestIndexerScores(t *testing.T) {
	tests := []struct {
		name             string
		t, heads, dim, n int
		ends             []int32
	}{
		{"prefill causal", 5, 4, 128, 5, []int32{1, 2, 3, 4, 5}},
		{"decode rows", 3, 32, 128, 40, []int32{38, 39, 40}},
		{"chunk with empty query", 4, 2, 16, 9, []int32{0, 9, 3, 7}},
		{"many queries, small dim", 300, 2, 8, 20, nil},
	}
	negInf := float32(math.Inf(-1))
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, uint64(k)))
			ends := tc.ends
			if ends == nil {
				for i := range tc.t {
					ends = append(ends, int32(i%(tc.n+1)))
				}
			}
			maxEnd := slices.Max(ends)
			// Keys live at a permutation of slots; keys no query sees are NaN.
			nslots := tc.n + 3
			perm := rng.Perm(nslots)
			slots := make([]int32, tc.n)
			data := filled(nslots*tc.dim, float32(math.NaN()))
			for j := range slots {
				slots[j] = int32(perm[j])
				if j < int(maxEnd) {
					copy(data[perm[j]*tc.dim:], randVec(rng, tc.dim))
				}
			}
			src := &countingKeys{keys: DenseKeys{Dim: tc.dim, Data: data}, reads: map[int32]int{}}
			q := randVec(rng, tc.t*tc.heads*tc.dim)
			w := randVec(rng, tc.t*tc.heads)
			want := make([]float32, tc.t*tc.n)
			for i := range tc.t {
				for j := range tc.n {
					if j >= int(ends[i]) {
						want[i*tc.n+j] = negInf
						continue
					}
					var s float64
					for h := range tc.heads {
						var d float64
						for c := range tc.dim {
							d += float64(q[(i*tc.heads+h)*tc.dim+c]) * float64(data[int(slots[j])*tc.dim+c])
						}
						s += float64(w[i*tc.heads+h]) * max(d, 0)
					}
					want[i*tc.n+j] = float32(s)
				}
			}
			got := filled(tc.t*tc.n, float32(math.NaN()))
			IndexerScores(got, q, w, tc.t, tc.heads, tc.dim, src, slots, ends)
			diffF32(t, "scores", want, got, approx(1e-4, 1e-6))
			for j := int(maxEnd); j < tc.n; j++ {
				if src.reads[slots[j]] != 0 {
					t.Errorf("key %d (slot %d) is past every bound but was read", j, slots[j])
				}
			}
			// The same queries in rows of a wider buffer, all at once, and
			// each alone: the same bits, the cells past each row's keys
			// untouched.
			const pad = 7
			stride := tc.n + pad
			rows := filled(tc.t*stride, 42)
			sc := NewIndexerScratch(tc.heads, tc.dim)
			IndexerScoresRows(sc, rows, stride, q, w, tc.t, tc.heads, tc.dim, src, slots, ends)
			for i := range tc.t {
				alone := filled(tc.n, float32(math.NaN()))
				IndexerScoresScratch(sc, alone, q[i*tc.heads*tc.dim:(i+1)*tc.heads*tc.dim], w[i*tc.heads:(i+1)*tc.heads], 1, tc.heads, tc.dim, src, slots, ends[i:i+1])
				if d := cmp.Diff(bits(got[i*tc.n:(i+1)*tc.n]), bits(rows[i*stride:i*stride+tc.n])); d != "" {
					t.Fatalf("query %d: rows of %d vs rows of %d (-want +got):\n%s", i, tc.n, stride, d)
				}
				if d := cmp.Diff(bits(alone), bits(rows[i*stride:i*stride+tc.n])); d != "" {
					t.Fatalf("query %d: scored alone vs with the others (-want +got):\n%s", i, d)
				}
				if d := cmp.Diff(filled(pad, 42), rows[i*stride+tc.n:(i+1)*stride]); i+1 < tc.t && d != "" {
					t.Fatalf("query %d: the cells past its keys changed (-want +got):\n%s", i, d)
				}
			}
		})
	}
}

// refTopK sorts positions by score descending, then position ascending, and
// keeps the first k selectable ones (−Inf and NaN never selected).
func refTopK(scores []float32, k int) ([]int32, int32) {
	var pos []int32
	for j, s := range scores {
		if !math.IsNaN(float64(s)) && !math.IsInf(float64(s), -1) {
			pos = append(pos, int32(j))
		}
	}
	slices.SortStableFunc(pos, func(a, b int32) int {
		switch sa, sb := scores[a], scores[b]; {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return int(a - b)
	})
	pos = pos[:min(k, len(pos))]
	count := int32(len(pos))
	for len(pos) < k {
		pos = append(pos, -1)
	}
	return pos, count
}

// TestIndexerTopKTies: integer-valued scores with heavy ties (3 distinct
// values), causal −Inf tails and NaN entries; ties go to the lowest position.
func TestIndexerTopKTies(t *testing.T) {
	const tq, n, k = 7, 50, 16
	rng := rand.New(rand.NewPCG(6, 0))
	scores := make([]float32, tq*n)
	for i := range tq {
		end := []int{0, 3, 16, 17, 30, 50, 50}[i]
		for j := range n {
			switch {
			case j >= end:
				scores[i*n+j] = float32(math.Inf(-1))
			case i == 6 && j%7 == 0:
				scores[i*n+j] = float32(math.NaN())
			default:
				scores[i*n+j] = float32(rng.IntN(3))
			}
		}
	}
	var want, wantCounts []int32
	for i := range tq {
		idx, c := refTopK(scores[i*n:(i+1)*n], k)
		want, wantCounts = append(want, idx...), append(wantCounts, c)
	}
	got := make([]int32, tq*k)
	counts := make([]int32, tq)
	IndexerTopK(got, counts, scores, tq, n, k)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("indices (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantCounts, counts); d != "" {
		t.Errorf("counts (-want +got):\n%s", d)
	}
	// counts = min(k, ends) for rows without NaN.
	if d := cmp.Diff([]int32{0, 3, 16, 16, 16, 16}, counts[:6]); d != "" {
		t.Errorf("counts are not min(k, ends) (-want +got):\n%s", d)
	}
}

// TestIndexerScoresSeqs: the rows of several sequences scored at once, each
// over its own keys, have the bits of IndexerScoresRows on each sequence
// alone, on one thread and on two; the cells past each row's keys are left
// alone and keys past every bound are never read. The cases cover a
// sequence longer than a block of queries and more sequences than one
// kernel call takes.
func TestIndexerScoresSeqs(t *testing.T) {
	tests := []struct {
		name       string
		heads, dim int
		rows, n    []int // each sequence's rows and keys
	}{
		{"decode batch", 32, 128, []int{1, 1, 1, 1, 1, 1, 1, 1}, []int{300, 40, 1, 513, 64, 200, 9, 300}},
		{"prompt between decode rows", 32, 128, []int{1, 11, 1, 2}, []int{50, 30, 77, 12}},
		{"more sequences than a call takes", 1, 8, slices.Repeat([]int{1}, 70), slices.Repeat([]int{17}, 70)},
		{"a sequence with no rows", 4, 16, []int{2, 0, 3}, []int{10, 5, 8}},
	}
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(31, uint64(k)))
			const pad = 5
			stride := slices.Max(tc.n) + pad
			total := 0
			for _, r := range tc.rows {
				total += r
			}
			q := randVec(rng, total*tc.heads*tc.dim)
			w := randVec(rng, total*tc.heads)
			var seqs []IndexerSeq
			var data []float32
			row := 0
			for s, r := range tc.rows {
				// Each sequence's keys in its own slots; keys no row of it
				// sees are NaN.
				ends := make([]int32, r)
				var maxEnd int32
				for i := range ends {
					ends[i] = int32(rng.IntN(tc.n[s] + 1))
					maxEnd = max(maxEnd, ends[i])
				}
				slots := make([]int32, tc.n[s])
				for j := range slots {
					slots[j] = int32(len(data) / tc.dim)
					key := filled(tc.dim, float32(math.NaN()))
					if j < int(maxEnd) {
						key = randVec(rng, tc.dim)
					}
					data = append(data, key...)
				}
				seqs = append(seqs, IndexerSeq{Row: row, Rows: r, Slots: slots, Ends: ends})
				row += r
			}
			src := &lockedCountingKeys{c: countingKeys{keys: DenseKeys{Dim: tc.dim, Data: data}, reads: map[int32]int{}}}
			want := filled(total*stride, 42)
			sc := NewIndexerScratch(tc.heads, tc.dim)
			for _, s := range seqs {
				IndexerScoresRows(sc, want[s.Row*stride:], stride, q[s.Row*tc.heads*tc.dim:(s.Row+s.Rows)*tc.heads*tc.dim], w[s.Row*tc.heads:(s.Row+s.Rows)*tc.heads], s.Rows, tc.heads, tc.dim, src, s.Slots, s.Ends)
			}
			for _, threads := range []int{1, 2} {
				prev := kernels.SetThreads(threads)
				clear(src.c.reads)
				got := filled(total*stride, 42)
				IndexerScoresSeqs(sc, got, stride, q, w, tc.heads, tc.dim, src, seqs)
				kernels.SetThreads(prev)
				if d := cmp.Diff(bits(want), bits(got)); d != "" {
					t.Fatalf("%d threads: all sequences at once vs each alone (-want +got):\n%s", threads, d)
				}
				for _, s := range seqs {
					maxEnd := int32(0)
					for _, e := range s.Ends {
						maxEnd = max(maxEnd, e)
					}
					for j := int(maxEnd); j < len(s.Slots); j++ {
						if src.c.reads[s.Slots[j]] != 0 {
							t.Fatalf("%d threads: a key past every bound of its sequence (slot %d) was read", threads, s.Slots[j])
						}
					}
				}
			}
		})
	}
}

// lockedCountingKeys is countingKeys for keys read by several threads.
type lockedCountingKeys struct {
	mu sync.Mutex
	c  countingKeys
}

func (l *lockedCountingKeys) Key(slot int32, scratch []float32) []float32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Key(slot, scratch)
}
