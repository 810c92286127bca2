package mla

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/cpmla/cpmla/internal/freelist"
	"github.com/cpmla/cpmla/kernels"
)

// indexerBlockFloats bounds the queries scored against one pass over the
// keys (t·heads·dim floats), so the block stays in the L2 cache while every
// key is loaded once per block.
const indexerBlockFloats = 32 << 10

// IndexerScratch holds the key decode buffers IndexerScoresScratch hands to
// KeySource. A caller on a hot path owns one, built at start-up, so that no
// call allocates; IndexerScores borrows one from a pool instead.
type IndexerScratch struct {
	kc keyChunk
}

// NewIndexerScratch returns scratch for queries of heads heads and keys of
// dim values.
func NewIndexerScratch(heads, dim int) *IndexerScratch {
	sc := &IndexerScratch{kc: keyChunk{
		buf:     make([]float32, indexerChunk*dim),
		keys:    make([][]float32, indexerChunk),
		queries: make([]kernels.ScoreQuery, indexerBlock(heads, dim)),
		gathers: make([]keyGatherer, seqSets(heads, dim)),
		sets:    make([]kernels.ScoreSet, seqSets(heads, dim)),
	}}
	for i := range sc.kc.queries {
		sc.kc.queries[i].Reserve(heads, dim)
	}
	return sc
}

// IndexerScratchBytes is the memory NewIndexerScratch(heads, dim) holds: the
// key decode space, the gathered keys' headers and one prepared query per
// query of a block, and IndexerScoresSeqs's gatherers and sets.
func IndexerScratchBytes(heads, dim int) int64 {
	return int64(indexerChunk*dim*4+indexerChunk*24) +
		int64(indexerBlock(heads, dim))*(kernels.ScoreQueryBytes(heads, dim)+int64(unsafe.Sizeof(kernels.ScoreQuery{}))) +
		int64(seqSets(heads, dim))*int64(unsafe.Sizeof(keyGatherer{})+unsafe.Sizeof(kernels.ScoreSet{}))
}

// seqSets is the most sets one IndexerScoresSeqs call hands the kernels at
// once: a block of queries, each its own sequence, within what
// kernels.ScoreGatheredSets takes.
func seqSets(heads, dim int) int { return min(indexerBlock(heads, dim), kernels.ScoreSetsMax) }

// indexerBlock is the number of queries scored against one pass over the
// keys.
func indexerBlock(heads, dim int) int { return max(1, indexerBlockFloats/max(1, heads*dim)) }

// scratchPool keeps the scratch of finished IndexerScores calls for the
// next ones (a free list, not a sync.Pool: a collection does not empty it).
var scratchPool = freelist.New(8, func() *IndexerScratch {
	return &IndexerScratch{kc: keyChunk{keys: make([][]float32, indexerChunk)}}
})

// IndexerScores computes the lightning-indexer scores of t queries against
// the keys at slots (position j of the request is in slot slots[j]):
//
//	scores[i, j] = Σ_h w[i,h] · ReLU(q[i,h]·key(slots[j]))   for j < ends[i]
//	scores[i, j] = −Inf                                       for ends[i] ≤ j < nkeys
//
// q is [t, heads, dim], w is [t, heads] with the H_I^-0.5·d_I^-0.5 scale
// already folded in, nkeys = len(slots), scores is [t, nkeys]. ends[i] is the
// number of keys query i may see (its causal bound, 0..nkeys). Keys past every
// query's bound are never read. Steady-state calls do not allocate. Under an
// assembly implementation of package kernels the scores come from
// kernels.WeightedReLUScores (see fast.go).
func IndexerScores(scores, q, w []float32, t, heads, dim int, keys KeySource, slots []int32, ends []int32) {
	sc := scratchPool.Get()
	IndexerScoresScratch(sc, scores, q, w, t, heads, dim, keys, slots, ends)
	scratchPool.Put(sc)
}

// IndexerScoresScratch is IndexerScores with caller-owned scratch; it never
// allocates once sc holds room for dim-value keys.
func IndexerScoresScratch(sc *IndexerScratch, scores, q, w []float32, t, heads, dim int, keys KeySource, slots []int32, ends []int32) {
	checkLen("IndexerScores", "scores", len(scores), t*len(slots))
	IndexerScoresRows(sc, scores, len(slots), q, w, t, heads, dim, keys, slots, ends)
}

// IndexerScoresRows is IndexerScoresScratch with query i's scores at
// scores[i·stride : i·stride+len(slots)] (stride ≥ len(slots)), so that the
// queries of one sequence — a prompt's rows, which share its keys — are
// scored in one call inside a buffer of rows as wide as the longest
// sequence's. A key's score depends only on the query and that key, so the
// bits are those of scoring each query alone.
func IndexerScoresRows(sc *IndexerScratch, scores []float32, stride int, q, w []float32, t, heads, dim int, keys KeySource, slots []int32, ends []int32) {
	indexerRows(scores, stride, q, w, 0, t, heads, dim, len(slots), ends)
	kc := sc.kc.reserve(dim)
	if kernels.Accelerated() {
		kc.one[0] = IndexerSeq{Rows: t, Slots: slots, Ends: ends}
		indexerScoresFast(kc, scores, stride, q, w, heads, dim, keys, kc.one[:])
		kc.one[0] = IndexerSeq{}
		return
	}
	indexerScoresRef(kc.buf[:dim], scores, stride, q, w, t, heads, dim, keys, slots, ends)
}

// indexerRows checks the arguments of rows [row, row+t) of an
// IndexerScoresRows or IndexerScoresSeqs call over nkeys keys and writes
// their −Inf tails (the scores of the keys past each row's end).
func indexerRows(scores []float32, stride int, q, w []float32, row, t, heads, dim, nkeys int, ends []int32) {
	if stride < nkeys {
		panic(fmt.Sprintf("mla: IndexerScores: rows of %d scores for %d keys", stride, nkeys))
	}
	if t > 0 {
		checkLen("IndexerScores", "scores", len(scores), (row+t-1)*stride+nkeys)
	}
	checkLen("IndexerScores", "q", len(q), (row+t)*heads*dim)
	checkLen("IndexerScores", "w", len(w), (row+t)*heads)
	checkLen("IndexerScores", "ends", len(ends), t)
	negInf := float32(math.Inf(-1))
	for i, e := range ends[:t] {
		if e < 0 || int(e) > nkeys {
			panic(fmt.Sprintf("mla: IndexerScores: query %d sees %d keys, %d are given", i, e, nkeys))
		}
		r := scores[(row+i)*stride : (row+i)*stride+nkeys]
		for j := int(e); j < nkeys; j++ {
			r[j] = negInf
		}
	}
}

// indexerScoresRef is the reference scoring loop of IndexerScoresRows (the
// arguments checked and the −Inf tails written), decoding keys into scratch
// (dim values).
func indexerScoresRef(scratch, scores []float32, stride int, q, w []float32, t, heads, dim int, keys KeySource, slots []int32, ends []int32) {
	block := indexerBlock(heads, dim)
	for i0 := 0; i0 < t; i0 += block {
		i1 := min(t, i0+block)
		var maxEnd int32
		for _, e := range ends[i0:i1] {
			maxEnd = max(maxEnd, e)
		}
		for j := range int(maxEnd) {
			key := keys.Key(slots[j], scratch)[:dim]
			for i := i0; i < i1; i++ {
				if j >= int(ends[i]) {
					continue
				}
				var s float32
				for h := range heads {
					if d := kernels.Dot(q[(i*heads+h)*dim:(i*heads+h+1)*dim], key); d > 0 {
						s += w[i*heads+h] * d
					}
				}
				scores[i*stride+j] = s
			}
		}
	}
}

// IndexerSeq is one sequence's rows for IndexerScoresSeqs: rows [Row,
// Row+Rows) of q, w and the scores, over the keys at Slots (position j of
// the sequence in slot Slots[j]), row Row+i seeing the first Ends[i].
type IndexerSeq struct {
	Row, Rows int
	Slots     []int32
	Ends      []int32
}

// IndexerScoresSeqs is IndexerScoresRows for the rows of several
// sequences, each over its own keys: sequence s's row i has its scores at
// scores[(Row+i)·stride:] (−Inf from Ends[i] to len(Slots)). Under the
// assembly kernels the rows of consecutive sequences are scored in one
// parallel call while they fit a block of queries, so that the decode rows
// of a batch, each too short to be worth splitting over the threads alone,
// take the threads together. The bits are those of IndexerScoresRows for
// each sequence alone.
func IndexerScoresSeqs(sc *IndexerScratch, scores []float32, stride int, q, w []float32, heads, dim int, keys KeySource, seqs []IndexerSeq) {
	for _, s := range seqs {
		indexerRows(scores, stride, q, w, s.Row, s.Rows, heads, dim, len(s.Slots), s.Ends)
	}
	kc := sc.kc.reserve(dim)
	if kernels.Accelerated() {
		indexerScoresFast(kc, scores, stride, q, w, heads, dim, keys, seqs)
		return
	}
	for _, s := range seqs {
		indexerScoresRef(kc.buf[:dim], scores[s.Row*stride:], stride, q[s.Row*heads*dim:], w[s.Row*heads:], s.Rows, heads, dim, keys, s.Slots, s.Ends)
	}
}

// IndexerTopK selects, for each of t queries, the k best positions of its
// score row (scores is [t, nkeys]): score descending, then lowest position,
// −Inf and NaN never selected. indices [t, k] receives positions (not slots)
// best first, padded with −1 at the end; counts[i] is the number selected,
// min(k, ends[i]) for rows written by IndexerScores. The order is a total
// order, so every rank given the same scores selects the same set. It does
// not allocate.
func IndexerTopK(indices, counts []int32, scores []float32, t, nkeys, k int) {
	checkLen("IndexerTopK", "indices", len(indices), t*k)
	checkLen("IndexerTopK", "counts", len(counts), t)
	checkLen("IndexerTopK", "scores", len(scores), t*nkeys)
	for i := range t {
		counts[i] = int32(kernels.TopK(indices[i*k:(i+1)*k], scores[i*nkeys:(i+1)*nkeys]))
	}
}

// IndexerTopKRows is IndexerTopK over rows of different lengths, selected
// at once over the threads: row i is scores[i·stride : i·stride+lens[i]]
// (lens[i] = 0 for a row that selects nothing), its positions go to
// indices[i·k:(i+1)·k] and its count to counts[i], k = len(indices)/len(lens).
// Each row gets exactly IndexerTopK's selection, whatever the thread count.
// It does not allocate after warm-up.
func IndexerTopKRows(indices, counts []int32, scores []float32, stride int, lens []int32) {
	kernels.TopKRows(indices, counts, scores, stride, lens)
}
