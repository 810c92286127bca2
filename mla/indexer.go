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
	nkeys := len(slots)
	if stride < nkeys {
		panic(fmt.Sprintf("mla: IndexerScores: rows of %d scores for %d keys", stride, nkeys))
	}
	if t > 0 {
		checkLen("IndexerScores", "scores", len(scores), (t-1)*stride+nkeys)
	}
	checkLen("IndexerScores", "q", len(q), t*heads*dim)
	checkLen("IndexerScores", "w", len(w), t*heads)
	checkLen("IndexerScores", "ends", len(ends), t)
	negInf := float32(math.Inf(-1))
	for i, e := range ends[:t] {
		if e < 0 || int(e) > nkeys {
			panic(fmt.Sprintf("mla: IndexerScores: query %d sees %d keys, %d are given", i, e, nkeys))
		}
		row := scores[i*stride : i*stride+nkeys]
		for j := int(e); j < nkeys; j++ {
			row[j] = negInf
		}
	}
	kc := &sc.kc
	if cap(kc.buf) < indexerChunk*dim {
		kc.buf = make([]float32, indexerChunk*dim)
	}
	if kernels.Accelerated() {
		indexerScoresFast(kc, scores, stride, q, w, t, heads, dim, keys, slots, ends)
		return
	}
	scratch := kc.buf[:dim]

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
	if !kernels.Accelerated() {
		for _, s := range seqs {
			IndexerScoresRows(sc, scores[s.Row*stride:], stride, q[s.Row*heads*dim:(s.Row+s.Rows)*heads*dim], w[s.Row*heads:(s.Row+s.Rows)*heads], s.Rows, heads, dim, keys, s.Slots, s.Ends)
		}
		return
	}
	negInf := float32(math.Inf(-1))
	for _, s := range seqs {
		nkeys := len(s.Slots)
		if nkeys > stride {
			panic(fmt.Sprintf("mla: IndexerScores: rows of %d scores for %d keys", stride, nkeys))
		}
		if s.Rows > 0 {
			checkLen("IndexerScores", "scores", len(scores), (s.Row+s.Rows-1)*stride+nkeys)
		}
		checkLen("IndexerScores", "q", len(q), (s.Row+s.Rows)*heads*dim)
		checkLen("IndexerScores", "w", len(w), (s.Row+s.Rows)*heads)
		checkLen("IndexerScores", "ends", len(s.Ends), s.Rows)
		for i, e := range s.Ends[:s.Rows] {
			if e < 0 || int(e) > nkeys {
				panic(fmt.Sprintf("mla: IndexerScores: query %d sees %d keys, %d are given", i, e, nkeys))
			}
			row := scores[(s.Row+i)*stride : (s.Row+i)*stride+nkeys]
			for j := int(e); j < nkeys; j++ {
				row[j] = negInf
			}
		}
	}
	kc := &sc.kc
	if cap(kc.buf) < indexerChunk*dim {
		kc.buf = make([]float32, indexerChunk*dim)
	}
	block := indexerBlock(heads, dim)
	if len(kc.queries) < block {
		kc.queries = make([]kernels.ScoreQuery, block)
	}
	maxSets := seqSets(heads, dim)
	if len(kc.gathers) < maxSets {
		kc.gathers = make([]keyGatherer, maxSets)
		kc.sets = make([]kernels.ScoreSet, maxSets)
	}
	// Fill a block of queries with whole sequences (a longer one in
	// pieces of a block), one set a piece, and score each block in one call.
	nq, ns := 0, 0
	flush := func() {
		if ns > 0 {
			kernels.ScoreGatheredSets(kc.sets[:ns], kc.keys, kc.buf[:indexerChunk*dim])
		}
		for i := range kc.sets[:ns] {
			kc.sets[i] = kernels.ScoreSet{}
			kc.gathers[i] = keyGatherer{}
		}
		for i := range kc.queries[:nq] {
			kc.queries[i].Release()
		}
		nq, ns = 0, 0
	}
	for _, s := range seqs {
		for r0 := 0; r0 < s.Rows; {
			if nq == block || ns == maxSets {
				flush()
			}
			r1 := min(s.Rows, r0+block-nq)
			qs := kc.queries[nq : nq+r1-r0]
			for i := range qs {
				t := s.Row + r0 + i
				qs[i].Prepare(q[t*heads*dim:(t+1)*heads*dim], w[t*heads:(t+1)*heads], heads)
			}
			g := &kc.gathers[ns]
			*g = keyGatherer{keys: keys, slots: s.Slots, dim: dim}
			if dec, ok := keys.(DecodingKeySource); ok && dec.DecodesKeys() {
				g.dec = dec
			}
			kc.sets[ns] = kernels.ScoreSet{Dst: scores[(s.Row+r0)*stride:], Stride: stride, Qs: qs, Ends: s.Ends[r0:r1], G: g}
			nq, ns = nq+r1-r0, ns+1
			r0 = r1
		}
	}
	flush()
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
