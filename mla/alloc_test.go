package mla

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/cpmla/cpmla/kernels"
)

// TestHotPathsDoNotAllocate pins invariant 8 for the attention math: with a
// workspace (and pre-boxed sources) the per-step calls allocate nothing.
func TestHotPathsDoNotAllocate(t *testing.T) {
	const rows, heads, topk, nkv = 2, 4, 16, 64
	rng := rand.New(rand.NewPCG(7, 0))
	var kv KVSource = DenseKV(randVec(rng, nkv*RowDim))
	q := randVec(rng, rows*heads*RowDim)
	indices := make([]int32, rows*topk)
	for i := range indices {
		indices[i] = int32(rng.IntN(nkv+1)) - 1
	}
	out := make([]float32, rows*heads*LatentDim)
	lse := make([]float32, rows*heads)
	maxL := make([]float32, rows*heads)
	topkLen := []int32{topk, topk / 2}
	ws := NewWorkspace(topk, heads)

	const ih, dim, tq = 4, 128, 3
	var keys KeySource = DenseKeys{Dim: dim, Data: randVec(rng, nkv*dim)}
	iq := randVec(rng, tq*ih*dim)
	w := randVec(rng, tq*ih)
	slots := make([]int32, nkv)
	for i := range slots {
		slots[i] = int32(nkv - 1 - i)
	}
	ends := []int32{1, 30, nkv}
	scores := make([]float32, tq*nkv)
	picked := make([]int32, tq*topk)
	counts := make([]int32, tq)
	isc := NewIndexerScratch(ih, dim)
	// Each row its own sequence, over the same keys.
	seqs := []IndexerSeq{{Row: 0, Rows: 1, Slots: slots, Ends: ends[0:1]}, {Row: 1, Rows: 1, Slots: slots, Ends: ends[1:2]}, {Row: 2, Rows: 1, Slots: slots, Ends: ends[2:3]}}

	const n = 3
	part := randVec(rng, n*rows*heads*LatentDim)
	partLSE := randVec(rng, n*rows*heads)

	tests := []struct {
		name string
		fn   func()
	}{
		{"SparseAttention", func() {
			SparseAttention(out, lse, maxL, q, rows, heads, kv, indices, topk, topkLen, 0.0625, ws)
		}},
		{"IndexerScores", func() { IndexerScores(scores, iq, w, tq, ih, dim, keys, slots, ends) }},
		// Its pooled scratch must survive a garbage collection.
		{"IndexerScores after a collection", func() { runtime.GC(); IndexerScores(scores, iq, w, tq, ih, dim, keys, slots, ends) }},
		{"IndexerScoresScratch", func() { IndexerScoresScratch(isc, scores, iq, w, tq, ih, dim, keys, slots, ends) }},
		{"IndexerScoresSeqs", func() { IndexerScoresSeqs(isc, scores, nkv, iq, w, ih, dim, keys, seqs) }},
		{"IndexerTopK", func() { IndexerTopK(picked, counts, scores, tq, nkv, topk) }},
		{"CombineLSE", func() { CombineLSE(out, lse, part, partLSE, n, rows, heads, LatentDim) }},
	}
	for _, tc := range tests {
		if a := testing.AllocsPerRun(20, tc.fn); a != 0 {
			t.Errorf("%s allocates %v times per call", tc.name, a)
		}
	}
}

// TestWorkspaceBytes: the reported size is what NewWorkspace allocates,
// counted from the buffers themselves.
func TestWorkspaceBytes(t *testing.T) {
	for _, c := range []struct{ topk, heads int }{{2048, 64}, {16, 8}, {0, 4}} {
		ws := NewWorkspace(c.topk, c.heads)
		held := int64(cap(ws.rowBuf)+cap(ws.logits)+cap(ws.slots))*4 + int64(cap(ws.rows)+cap(ws.rowsBF16))*24
		if got := WorkspaceBytes(c.topk, c.heads); got != held || ws.Bytes() != held {
			t.Errorf("WorkspaceBytes(%d, %d) = %d, Bytes() = %d, buffers hold %d", c.topk, c.heads, got, ws.Bytes(), held)
		}
	}
}

// TestIndexerScratchBytes: the reported size is what NewIndexerScratch
// holds, counted from its buffers.
func TestIndexerScratchBytes(t *testing.T) {
	for _, c := range []struct{ heads, dim int }{{32, 128}, {64, 128}, {4, 64}, {3, 7}} {
		sc := NewIndexerScratch(c.heads, c.dim)
		held := int64(cap(sc.kc.buf))*4 + int64(cap(sc.kc.keys))*24
		for i := range sc.kc.queries {
			held += sc.kc.queries[i].Bytes() + int64(unsafe.Sizeof(sc.kc.queries[i]))
		}
		held += int64(cap(sc.kc.gathers))*int64(unsafe.Sizeof(keyGatherer{})) + int64(cap(sc.kc.sets))*int64(unsafe.Sizeof(kernels.ScoreSet{}))
		if got := IndexerScratchBytes(c.heads, c.dim); got != held {
			t.Errorf("IndexerScratchBytes(%d, %d) = %d, buffers hold %d", c.heads, c.dim, got, held)
		}
	}
}
