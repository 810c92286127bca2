package mla

import (
	"fmt"
	"math"

	"github.com/cpmla/cpmla/kernels"
)

// Fast paths. When an assembly implementation of package kernels is active
// (kernels.Accelerated), SparseAttention and IndexerScores gather exactly the
// rows and keys the reference reads, in the same order, and hand them to the
// fused kernels (kernels.AttendRows, kernels.WeightedReLUScores). A query
// row's results depend only on that row's query, indices and rows, so they are
// batch-invariant; they agree with the reference within float32 rounding, not
// bit for bit. With CPMLA_KERNELS=ref the reference below runs instead.

// BF16KVSource is a KVSource that stores rows as bfloat16. The fast path
// reads such rows in place, at half the bytes, and widens them in registers
// (kernels.AttendRowsBF16) instead of decoding every row into scratch first.
// RowBF16 returns the RowDim raw bf16 values of slot (a view that must not
// be modified); Row must return exactly those values widened. A source whose
// storage format is chosen at run time (a paged cache) reports with
// BF16Rows whether its rows are bf16 at all.
type BF16KVSource interface {
	KVSource
	BF16Rows() bool
	RowBF16(slot int32) []uint16
}

// DecodingKVSource is a KVSource whose Row decodes stored records into the
// caller's scratch instead of returning views (a quantized paged cache).
// DecodesRows reports whether it does for this source (a cache whose format
// is chosen at run time may hold f32 rows, which Row returns as views);
// DecodeRows(dst, slots, j0, j1) decodes the rows of slots[j0:j1] into dst
// (row j0+i at dst[i·RowDim:], the values Row gives) in one call,
// prefetching the records of later slots of the list as it goes. The fast
// path decodes such rows a block at a time, just before the attention
// kernel uses them (kernels.AttendDecodedRows), so that rows gathered from
// scattered slots neither wait on memory one at a time nor make a round
// trip through a buffer of every selected row.
type DecodingKVSource interface {
	KVSource
	DecodesRows() bool
	DecodeRows(dst []float32, slots []int32, j0, j1 int)
}

// DenseKVBF16 is an in-memory [n, RowDim] row-major buffer of bf16 bits
// whose slot is the row index: the BF16KVSource counterpart of DenseKV.
type DenseKVBF16 []uint16

// Row returns row slot widened exactly to float32 in scratch.
func (kv DenseKVBF16) Row(slot int32, scratch []float32) []float32 {
	src := kv.RowBF16(slot)
	dst := scratch[:RowDim]
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
	return dst
}

// RowBF16 returns row slot of the buffer (a view).
// BF16Rows reports that every row is bf16.
func (kv DenseKVBF16) BF16Rows() bool { return true }

// RowBF16 is slot's row in place.
func (kv DenseKVBF16) RowBF16(slot int32) []uint16 {
	off := int(slot) * RowDim
	if slot < 0 || off+RowDim > len(kv) {
		panic(fmt.Sprintf("mla: slot %d outside a dense bf16 KV buffer of %d rows", slot, len(kv)/RowDim))
	}
	return kv[off : off+RowDim : off+RowDim]
}

// sparseAttentionFast is SparseAttention on the fast kernels; the arguments
// have been checked by the caller.
func sparseAttentionFast(out, lse, maxLogits, q []float32, rows, heads int, kv KVSource, indices []int32, topk int, topkLen []int32, scale float32, ws *Workspace) {
	if src, ok := kv.(BF16KVSource); ok && src.BF16Rows() {
		sparseAttentionFastBF16(out, lse, maxLogits, q, rows, heads, src, indices, topk, topkLen, scale, ws)
		return
	}
	if src, ok := kv.(DecodingKVSource); ok && src.DecodesRows() {
		sparseAttentionFastDecoded(out, lse, maxLogits, q, rows, heads, src, indices, topk, topkLen, scale, ws)
		return
	}
	ws.f32Sel = f32Selection{kv: kv, querySlots: querySlots{indices: indices, topkLen: topkLen, topk: topk}}
	kernels.AttendQueries(out, lse, maxLogits, q, rows, heads, LatentDim, RowDim, &ws.f32Sel, scale, ws.logits, ws.rowBuf, ws.rows)
	ws.f32Sel = f32Selection{}
}

// f32Selection is the kernels.QueryRows of a SparseAttention call over any
// other source: query row r attends to the rows of its valid selected
// slots, in their order (topkLen applied), as Row gives them (views, or
// written to the kernel's scratch).
type f32Selection struct {
	kv KVSource
	querySlots
}

func (s *f32Selection) Rows(r int, rows [][]float32, scratch []float32) [][]float32 {
	n := 0
	for _, slot := range s.selected(r) {
		if slot >= 0 {
			rows[n] = s.kv.Row(slot, scratch[n*RowDim:(n+1)*RowDim])[:RowDim]
			n++
		}
	}
	return rows[:n]
}

// sparseAttentionFastDecoded is sparseAttentionFast over rows that kv
// decodes: one kernels.AttendQueriesDecoded call for all query rows, which
// the kernel threads share query by query, each decoding its queries' rows
// a block at a time inside the kernel.
func sparseAttentionFastDecoded(out, lse, maxLogits, q []float32, rows, heads int, kv DecodingKVSource, indices []int32, topk int, topkLen []int32, scale float32, ws *Workspace) {
	ws.decSel = decodedSelection{kv: kv, querySlots: querySlots{indices: indices, topkLen: topkLen, topk: topk}}
	kernels.AttendQueriesDecoded(out, lse, maxLogits, q, rows, heads, LatentDim, RowDim, &ws.decSel, scale, ws.logits, ws.rowBuf, ws.rows, ws.slots)
	ws.decSel = decodedSelection{}
}

// decodedSelection is the kernels.QueryRowDecoder of a SparseAttention call
// over rows kv decodes: query row r attends to the rows of its valid
// selected slots, in their order (topkLen applied).
type decodedSelection struct {
	kv DecodingKVSource
	querySlots
}

func (s *decodedSelection) Select(r int, sel []int32) []int32 {
	n := 0
	for _, slot := range s.selected(r) {
		if slot >= 0 {
			sel[n] = slot
			n++
		}
	}
	return sel[:n]
}

func (s *decodedSelection) DecodeRows(dst []float32, sel []int32, j0, j1 int) {
	s.kv.DecodeRows(dst[:(j1-j0)*RowDim], sel, j0, j1)
}

// sparseAttentionFastBF16 is sparseAttentionFast over rows read in place as
// bf16: one kernels.AttendQueriesBF16 call for all query rows, which the
// kernel threads share query by query.
func sparseAttentionFastBF16(out, lse, maxLogits, q []float32, rows, heads int, kv BF16KVSource, indices []int32, topk int, topkLen []int32, scale float32, ws *Workspace) {
	ws.sel = bf16Selection{kv: kv, querySlots: querySlots{indices: indices, topkLen: topkLen, topk: topk}}
	kernels.AttendQueriesBF16(out, lse, maxLogits, q, rows, heads, LatentDim, &ws.sel, scale, ws.rowsBF16, ws.logits)
	ws.sel = bf16Selection{}
}

// bf16Selection is the kernels.QueryRowsBF16 of a SparseAttention call over
// bf16 rows: query row r attends to the rows of its valid selected slots,
// in their order (topkLen applied).
type bf16Selection struct {
	kv BF16KVSource
	querySlots
}

// querySlots are the selected slots of a SparseAttention call's query
// rows, shared by the row kinds' selections.
type querySlots struct {
	indices, topkLen []int32
	topk             int
}

// selected is query row r's selected slots (topkLen applied).
func (s *querySlots) selected(r int) []int32 {
	return selectedSlots(r, s.topk, s.indices, s.topkLen)
}

// RowCount is the number of valid slots of query row r.
func (s *querySlots) RowCount(r int) int { return validSlots(s.selected(r)) }

// validSlots is the number of slots that name a row (not negative).
func validSlots(slots []int32) int {
	n := 0
	for _, slot := range slots {
		if slot >= 0 {
			n++
		}
	}
	return n
}

func (s *bf16Selection) RowsBF16(r int, rows [][]uint16) [][]uint16 {
	n := 0
	for _, slot := range s.selected(r) {
		if slot >= 0 {
			rows[n] = s.kv.RowBF16(slot)[:RowDim]
			n++
		}
	}
	return rows[:n]
}

// indexerChunk is the number of gathered keys the fast IndexerScores holds
// at once, shared by the kernel threads (1024 keys of 128 f32 are 512 KiB,
// in L2; each of two threads gathers and scores 512 at a time).
const indexerChunk = 1024

// keyChunk is the gather scratch of the fast IndexerScores.
type keyChunk struct {
	buf     []float32            // [indexerChunk, dim] decode space
	keys    [][]float32          // [indexerChunk] gathered keys
	queries []kernels.ScoreQuery // [block] the block's queries, prepared once
	gathers []keyGatherer        // [seqSets] the gatherer of each set of a call
	sets    []kernels.ScoreSet   // [seqSets] the sets of a call
	one     [1]IndexerSeq        // IndexerScoresRows's sequence
}

// reserve makes room in kc for keys of dim values and returns kc.
func (kc *keyChunk) reserve(dim int) *keyChunk {
	if cap(kc.buf) < indexerChunk*dim {
		kc.buf = make([]float32, indexerChunk*dim)
	}
	return kc
}

// DecodingKeySource is a KeySource whose Key decodes stored records (fp8
// indexer keys) into the caller's scratch: DecodesKeys reports whether it
// does for this source, and DecodeKeys(dst, slots, j0, j1) decodes the keys
// of slots[j0:j1] into dst (key j0+i at dst[i·dim:], the values Key gives)
// in one call, prefetching the records of later slots of the list as it
// goes. The fast IndexerScores decodes a gather chunk at a time through it.
type DecodingKeySource interface {
	KeySource
	DecodesKeys() bool
	DecodeKeys(dst []float32, slots []int32, j0, j1 int)
}

// BF16Keys is a KeySource that can vouch that every key it gives is exact
// in bf16 (fp8 indexer keys: e4m3 codes times power-of-two scales), which
// the AMX tiles then score without splitting the keys (kernels.BF16KeyGatherer).
type BF16Keys interface {
	KeysExactInBF16() bool
}

// keyGatherer is the kernels.KeyGatherer of one IndexerScores call: key j is
// the key at slots[j].
type keyGatherer struct {
	keys  KeySource
	dec   DecodingKeySource // keys, when they are decoded
	slots []int32
	dim   int
}

// KeysExactInBF16 reports whether the source vouches that its keys are
// exact in bf16 (kernels.BF16KeyGatherer).
func (g *keyGatherer) KeysExactInBF16() bool {
	b, ok := g.keys.(BF16Keys)
	return ok && b.KeysExactInBF16()
}

// GatherKeys points dst at the keys of slots[j0:j1], decoding them into
// scratch in one call where the source decodes.
func (g *keyGatherer) GatherKeys(dst [][]float32, scratch []float32, j0, j1 int) {
	if g.dec != nil {
		g.dec.DecodeKeys(scratch[:(j1-j0)*g.dim], g.slots, j0, j1)
		for i := range j1 - j0 {
			dst[i] = scratch[i*g.dim : (i+1)*g.dim : (i+1)*g.dim]
		}
		return
	}
	for j := j0; j < j1; j++ {
		i := j - j0
		dst[i] = g.keys.Key(g.slots[j], scratch[i*g.dim:(i+1)*g.dim])[:g.dim]
	}
}

// indexerScoresFast is the scoring loop of IndexerScoresSeqs (and of
// IndexerScoresRows, one sequence) on the fast kernels; the caller has
// checked the arguments and written the −Inf tails. It fills a block of
// queries with whole sequences (a longer one in pieces of a block), one
// kernels.ScoreSet a piece, and scores each block in one
// kernels.ScoreGatheredSets call: the kernel threads gather (or decode) and
// score disjoint ranges of the keys, every key once for all the queries of
// its sequence in the block.
func indexerScoresFast(kc *keyChunk, scores []float32, stride int, q, w []float32, heads, dim int, keys KeySource, seqs []IndexerSeq) {
	block := indexerBlock(heads, dim)
	if len(kc.queries) < block {
		kc.queries = make([]kernels.ScoreQuery, block)
	}
	maxSets := seqSets(heads, dim)
	if len(kc.gathers) < maxSets {
		kc.gathers = make([]keyGatherer, maxSets)
		kc.sets = make([]kernels.ScoreSet, maxSets)
	}
	var dec DecodingKeySource
	if d, ok := keys.(DecodingKeySource); ok && d.DecodesKeys() {
		dec = d
	}
	nq, ns := 0, 0
	flush := func() {
		if ns > 0 {
			kernels.ScoreGatheredSets(kc.sets[:ns], kc.keys, kc.buf[:indexerChunk*dim])
		}
		clear(kc.sets[:ns])
		clear(kc.gathers[:ns])
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
			*g = keyGatherer{keys: keys, dec: dec, slots: s.Slots, dim: dim}
			kc.sets[ns] = kernels.ScoreSet{Dst: scores[(s.Row+r0)*stride:], Stride: stride, Qs: qs, Ends: s.Ends[r0:r1], G: g}
			nq, ns = nq+r1-r0, ns+1
			r0 = r1
		}
	}
	flush()
}
