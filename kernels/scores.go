package kernels

import "fmt"

// WeightedReLUScores computes the lightning-indexer score of each key against
// one query of heads heads:
//
//	dim    = len(q) / heads; q is [heads, dim], w is [heads]
//	dst[j] = Σ_h w[h] · max(0, q[h]·keys[j][:dim])   for j < len(keys)
//
// The reference uses Dot, skips non-positive (and NaN) dot products and adds
// the heads in ascending order. The assembly implementations transpose the
// query once per call (heads padded to a multiple of 32 with zero queries
// and weights) and score eight keys (AVX2: six) per tile: each head's dot
// product is a chain of fused multiply-adds over d of the broadcast key
// value and a 16-head query row (AVX2: two 8-head vectors), so no dot
// product needs a horizontal reduction; the heads' terms are summed
// lane-wise (head h in lane h mod 16) and the lanes by a fixed tree. AVX2
// performs the AVX-512 operations in the same order, so both give the same
// bits. A key's score depends
// only on the query and that key, never on the other keys of the call, so
// keys are split across threads (SetThreads) without changing a bit. It
// does not allocate once its pooled query scratch has grown to the
// largest heads × dim seen.
func WeightedReLUScores(dst, q, w []float32, heads int, keys [][]float32) {
	if heads <= 0 || len(q)%heads != 0 || len(w) != heads || len(dst) != len(keys) {
		panic(fmt.Sprintf("kernels: WeightedReLUScores: heads=%d needs len(q) a multiple of heads, len(w)=heads and len(dst)=len(keys); got len(q)=%d, len(w)=%d, len(dst)=%d, %d keys",
			heads, len(q), len(w), len(dst), len(keys)))
	}
	dim := len(q) / heads
	for j, k := range keys {
		if len(k) < dim {
			panic(fmt.Sprintf("kernels: WeightedReLUScores: key %d has %d values, needs %d", j, len(k), dim))
		}
	}
	if fastScores(activeLevel(), dim) {
		var sq *ScoreQuery
		select {
		case sq = <-scoreQueries:
		default:
			sq = new(ScoreQuery)
		}
		sq.Prepare(q, w, heads)
		ScoreKeys(dst, sq, keys)
		sq.Release()
		select {
		case scoreQueries <- sq:
		default:
		}
		return
	}
	scoreKeysRef(dst, q, w, heads, dim, keys)
}

// fastScores reports whether level l scores keys of dim values in assembly.
func fastScores(l level, dim int) bool {
	return l != levelRef && dim > 0
}

var scoreQueries = make(chan *ScoreQuery, 64)

// ScoreQuery is one lightning-indexer query (q [heads, dim] and the head
// weights w) prepared for ScoreKeys, so that a query scored against its keys
// a chunk at a time is prepared once: on AVX-512 and AVX2 the query is transposed to
// qT[d·hp + h] with the heads padded to hp, a multiple of 32, by zero
// queries and weights. The zero value is ready for Prepare; it keeps its
// buffers across Prepare calls, so it allocates only while they grow.
type ScoreQuery struct {
	q, w       []float32
	heads, dim int
	c          choice
	qT, wP     []float32
	// qB is the query's bf16 pieces in the AMX tiles' layout, when the
	// keys are scored on AMX tiles (amxScores).
	qB []uint16
}

// ScoreQueryBytes is the most memory a ScoreQuery holds for heads heads of
// dim values under the active implementation, for start-up memory budgets:
// the transposed query and the padded weights, and under avx512-amx the
// query's pieces.
func ScoreQueryBytes(heads, dim int) int64 {
	hp := int64(paddedHeads(heads))
	n := 4 * (hp*int64(dim) + hp)
	if amxActive() && amxScoresFit(dim) {
		n += 2 * int64(amxScoreQueryWords(heads, dim))
	}
	return n
}

// paddedHeads is heads rounded up to the 32 heads of a score tile.
func paddedHeads(heads int) int { return (heads + 31) &^ 31 }

// Reserve grows sq's buffers to hold a query of heads heads of dim values,
// so that Prepare with those sizes does not allocate.
func (sq *ScoreQuery) Reserve(heads, dim int) {
	hp := paddedHeads(heads)
	if cap(sq.qT) < hp*dim {
		sq.qT = make([]float32, 0, hp*dim)
	}
	if cap(sq.wP) < hp {
		sq.wP = make([]float32, 0, hp)
	}
	if amxActive() && amxScoresFit(dim) && cap(sq.qB) < amxScoreQueryWords(heads, dim) {
		sq.qB = make([]uint16, 0, amxScoreQueryWords(heads, dim))
	}
}

// Prepare makes sq the query q ([heads, dim]) with head weights w; q and w
// are referenced, not copied, until the next Prepare, and must not change
// in between. It panics on inconsistent sizes.
func (sq *ScoreQuery) Prepare(q, w []float32, heads int) {
	if heads <= 0 || len(q)%heads != 0 || len(w) != heads {
		panic(fmt.Sprintf("kernels: ScoreQuery.Prepare: heads=%d needs len(q) a multiple of heads and len(w)=heads; got len(q)=%d, len(w)=%d",
			heads, len(q), len(w)))
	}
	sq.q, sq.w, sq.heads, sq.dim, sq.c = q, w, heads, len(q)/heads, choiceOf(active.Load())
	if !fastScores(sq.c.l, sq.dim) {
		return
	}
	sq.Reserve(heads, sq.dim)
	hp := paddedHeads(heads)
	sq.qT, sq.wP = sq.qT[:hp*sq.dim], sq.wP[:hp]
	clear(sq.qT)
	clear(sq.wP)
	copy(sq.wP, w)
	for h := range heads {
		for d, v := range q[h*sq.dim : (h+1)*sq.dim] {
			sq.qT[d*hp+h] = v
		}
	}
	if sq.amxScores() {
		sq.prepareAMX()
	}
}

// Bytes is the memory sq's buffers hold (at most ScoreQueryBytes of the
// largest query reserved).
func (sq *ScoreQuery) Bytes() int64 {
	return 4*int64(cap(sq.qT)+cap(sq.wP)) + 2*int64(cap(sq.qB))
}

// Release drops sq's references to the q and w of the last Prepare, keeping
// its buffers.
func (sq *ScoreQuery) Release() { sq.q, sq.w = nil, nil }

// ScoreKeys is WeightedReLUScores with a prepared query: the same results,
// bit for bit. It panics if sq was prepared under another implementation
// (SetImpl in between) or a key is shorter than the query's dim.
func ScoreKeys(dst []float32, sq *ScoreQuery, keys [][]float32) {
	if len(dst) != len(keys) {
		panic(fmt.Sprintf("kernels: ScoreKeys: len(dst)=%d for %d keys", len(dst), len(keys)))
	}
	if c := choiceOf(active.Load()); c != sq.c {
		panic(fmt.Sprintf("kernels: ScoreKeys: query prepared for %s, %s is active", sq.c, c))
	}
	for j, k := range keys {
		if len(k) < sq.dim {
			panic(fmt.Sprintf("kernels: ScoreKeys: key %d has %d values, needs %d", j, len(k), sq.dim))
		}
	}
	n := len(keys)
	if !fastScores(sq.c.l, sq.dim) {
		WeightedReLUScores(dst, sq.q, sq.w, sq.heads, keys)
		return
	}
	if n == 0 {
		return
	}
	var t *scoreTask
	select {
	case t = <-scoreTasks:
	default:
		t = new(scoreTask)
	}
	t.dst, t.sq, t.keys = dst, sq, keys
	runParts(t, planParts((n+7)/8, 2*float64(n)*float64(sq.heads*sq.dim)), &t.join)
	t.dst, t.sq, t.keys = nil, nil, nil
	select {
	case scoreTasks <- t:
	default:
	}
}

// KeyGatherer supplies the keys of ScoreGatheredKeys a chunk at a time:
// GatherKeys(dst, scratch, j0, j1) points dst[i] at key j0+i for j0 ≤ j0+i <
// j1 (at least the query's dim values), decoding into scratch (dim values
// per key, key j0+i at scratch[i·dim:]) when the key is not stored as
// float32. Calls for disjoint ranges run concurrently.
type KeyGatherer interface {
	GatherKeys(dst [][]float32, scratch []float32, j0, j1 int)
}

// BF16KeyGatherer is a KeyGatherer that can vouch that every key it gathers
// is exact in bf16: each value finite with its low sixteen bits zero, or a
// NaN (fp8 codes times power-of-two scales are). Under avx512-amx
// ScoreGatheredKeys scores such keys on AMX tiles, which read only a
// value's high half.
type BF16KeyGatherer interface {
	KeyGatherer
	KeysExactInBF16() bool
}

// ScoreGatheredKeys is ScoreKeys for every query of qs (prepared for the
// same heads and dim) over keys that g gathers: query i's scores of keys
// j < ends[i] go to dst[i·stride + j]. The keys are split across the threads
// in contiguous ranges; each thread gathers its range a chunk at a time into
// its share of keys and scratch (len(keys) headers and len(keys)·dim values
// between them, at least one key per thread) and scores each chunk against
// every query before it gathers the next, so a key is read once for all the
// queries and the gathering is parallel too. Results have the bits of
// ScoreKeys, except for keys a BF16KeyGatherer vouches for under
// avx512-amx, which are scored on AMX tiles (see amx_scores.go): their
// scores depend, as ScoreKeys's do, only on the query and the key. It
// panics on inconsistent sizes.
func ScoreGatheredKeys(dst []float32, stride int, qs []ScoreQuery, ends []int32, g KeyGatherer, keys [][]float32, scratch []float32) {
	t := takeGatherTask()
	t.one[0] = ScoreSet{Dst: dst, Stride: stride, Qs: qs, Ends: ends, G: g}
	t.run(t.one[:], keys, scratch)
	t.one[0] = ScoreSet{}
	putGatherTask(t)
}

// ScoreSet is one group of queries of ScoreGatheredSets: the queries Qs
// over the keys G gathers, query i's scores of keys j < Ends[i] at
// Dst[i·Stride + j].
type ScoreSet struct {
	Dst    []float32
	Stride int
	Qs     []ScoreQuery
	Ends   []int32
	G      KeyGatherer
}

// ScoreGatheredSets is ScoreGatheredKeys for several sets of queries, each
// over its own keys (the decode rows of different sequences), in one
// parallel call: the threads split the sets' keys, weighted by their
// queries, so that rows too short to be worth splitting alone share the
// threads without a hand-off each. Every score has the bits
// ScoreGatheredKeys gives it, whatever the split. All queries must be
// prepared for the same heads and dim; sets is not kept.
func ScoreGatheredSets(sets []ScoreSet, keys [][]float32, scratch []float32) {
	t := takeGatherTask()
	t.run(sets, keys, scratch)
	putGatherTask(t)
}

func takeGatherTask() *gatherTask {
	select {
	case t := <-gatherTasks:
		return t
	default:
		return new(gatherTask)
	}
}

func putGatherTask(t *gatherTask) {
	select {
	case gatherTasks <- t:
	default:
	}
}

// gatherTask is one ScoreGatheredSets call; part p scores a contiguous
// range of the sets' keys (in units of align keys, each weighted by its
// set's queries) with its share of the gather space.
type gatherTask struct {
	sets    []ScoreSet
	one     [1]ScoreSet // ScoreGatheredKeys's set
	span    [ScoreSetsMax]setSpan
	cost    int // Σ units·queries over the sets
	keys    [][]float32
	scratch []float32
	join    joiner
}

// ScoreSetsMax is the most sets one ScoreGatheredSets call takes.
const ScoreSetsMax = 64

// setSpan is a set's place in the split: n keys to score (the largest of
// its ends), align keys a unit, and the cost before it.
type setSpan struct {
	n, align, base int
	exact          bool // the keys are exact in bf16 (BF16KeyGatherer)
}

var gatherTasks = make(chan *gatherTask, 16)

func (t *gatherTask) run(sets []ScoreSet, keys [][]float32, scratch []float32) {
	if len(sets) > ScoreSetsMax {
		panic(fmt.Sprintf("kernels: ScoreGatheredSets: %d sets, at most ScoreSetsMax (%d) a call", len(sets), ScoreSetsMax))
	}
	dim, heads := -1, 0
	units, cost := 0, 0
	var flops float64
	for s := range sets {
		set := &sets[s]
		n := 0
		if len(set.Ends) < len(set.Qs) {
			panic(fmt.Sprintf("kernels: ScoreGatheredKeys: %d ends for %d queries", len(set.Ends), len(set.Qs)))
		}
		for i, e := range set.Ends[:len(set.Qs)] {
			if e < 0 || len(set.Dst) < i*set.Stride+int(e) {
				panic(fmt.Sprintf("kernels: ScoreGatheredKeys: query %d sees %d keys; dst of %d values with stride %d is too short", i, e, len(set.Dst), set.Stride))
			}
			if dim < 0 {
				dim, heads = set.Qs[i].dim, set.Qs[i].heads
			}
			if set.Qs[i].dim != dim || set.Qs[i].heads != heads {
				panic(fmt.Sprintf("kernels: ScoreGatheredKeys: query %d has %d heads of %d values, the first query %d of %d", i, set.Qs[i].heads, set.Qs[i].dim, heads, dim))
			}
			n = max(n, int(e))
		}
		sp := setSpan{n: n, align: 8, base: cost}
		if bg, ok := set.G.(BF16KeyGatherer); ok && n > 0 {
			sp.exact = bg.KeysExactInBF16()
		}
		if sp.exact {
			sp.align = amxScoreTileKeys
		}
		t.span[s] = sp
		u := (n + sp.align - 1) / sp.align
		units += (n + 7) / 8
		cost += u * len(set.Qs)
		flops += 2 * float64(n) * float64(len(set.Qs)*heads*dim)
	}
	if dim < 0 {
		return
	}
	if len(keys) == 0 || len(scratch) < len(keys)*dim {
		panic(fmt.Sprintf("kernels: ScoreGatheredKeys: %d key headers need len(scratch) ≥ %d (dim %d) and at least one header; got %d", len(keys), len(keys)*dim, dim, len(scratch)))
	}
	if cost == 0 {
		return
	}
	t.sets, t.keys, t.scratch, t.cost = sets, keys, scratch, cost
	runParts(t, min(len(keys), planParts(units, flops)), &t.join)
	t.sets, t.keys, t.scratch = nil, nil, nil
}

func (t *gatherTask) runPart(p, parts int) {
	lo, hi := t.cost*p/parts, t.cost*(p+1)/parts
	c0, c1 := partRange(len(t.keys), 1, p, parts)
	keys := t.keys[c0:c1]
	for s := range t.sets {
		set, sp := &t.sets[s], &t.span[s]
		q := len(set.Qs)
		if sp.n == 0 || q == 0 {
			continue
		}
		dim := set.Qs[0].dim
		// Unit u of the set is in this part when its cost base+u·q lies
		// in [lo, hi).
		u0, u1 := ceilDiv(max(0, lo-sp.base), q), ceilDiv(max(0, hi-sp.base), q)
		j0, j1 := min(sp.n, u0*sp.align), min(sp.n, u1*sp.align)
		if j0 >= j1 {
			continue
		}
		t.scoreSet(set, sp.exact, keys, t.scratch[c0*dim:c1*dim], j0, j1)
	}
	clear(keys)
}

// scoreSet scores the keys [lo, hi) of set, gathered a chunk of len(keys)
// at a time into keys and scratch.
func (t *gatherTask) scoreSet(set *ScoreSet, exact bool, keys [][]float32, scratch []float32, lo, hi int) {
	chunk := len(keys)
	for j0 := lo; j0 < hi; j0 += chunk {
		j1 := min(hi, j0+chunk)
		set.G.GatherKeys(keys[:j1-j0], scratch, j0, j1)
		for i := range set.Qs {
			e := min(int(set.Ends[i]), j1)
			if e <= j0 {
				continue
			}
			scoreRange(set.Dst[i*set.Stride+j0:i*set.Stride+e], &set.Qs[i], keys[:e-j0], exact)
		}
	}
}

// scoreRange scores keys on the calling thread (a part of a parallel call).
// Keys exact in bf16 are scored on AMX tiles under avx512-amx.
func scoreRange(dst []float32, sq *ScoreQuery, keys [][]float32, exact bool) {
	switch {
	case exact && sq.amxScores():
		scoreKeysAMX(dst, sq, keys)
	case sq.c.l == levelAVX512:
		scoreKeysT(dst, sq, keys)
	case fastScores(sq.c.l, sq.dim):
		scoreKeysT6(dst, sq, keys)
	default:
		scoreKeysRef(dst, sq.q, sq.w, sq.heads, sq.dim, keys)
	}
}

// scoreKeysRef is the reference WeightedReLUScores loop.
func scoreKeysRef(dst, q, w []float32, heads, dim int, keys [][]float32) {
	for j, key := range keys {
		var s float32
		for h := range heads {
			if d := Dot(q[h*dim:(h+1)*dim], key[:dim]); d > 0 {
				s += w[h] * d
			}
		}
		dst[j] = s
	}
}

// scoreTask is one ScoreKeys call on the assembly kernels; parts split the
// keys (each key's score depends only on the query and that key).
type scoreTask struct {
	dst  []float32
	sq   *ScoreQuery
	keys [][]float32
	join joiner
}

var scoreTasks = make(chan *scoreTask, 64)

func (t *scoreTask) runPart(p, parts int) {
	sq := t.sq
	if sq.c.l == levelAVX512 {
		j0, j1 := partRange(len(t.keys), 8, p, parts)
		scoreKeysT(t.dst[j0:j1], sq, t.keys[j0:j1])
		return
	}
	j0, j1 := partRange(len(t.keys), 6, p, parts)
	scoreKeysT6(t.dst[j0:j1], sq, t.keys[j0:j1])
}

// scoreKeysT is the AVX-512 WeightedReLUScores over keys, eight per tile
// (a short tile repeats its last key), 32 heads per assembly call, each
// call prefetching the next eight keys (they live in scattered cache slots)
// a line at a time as it reads its own. A query of one 32-head group (GLM-5's
// indexer) takes its whole tiles in one call of scoreTiles8T32, which reads
// the keys from their slice headers and keeps each tile's sums in registers:
// the same arithmetic without a call, a Go loop and a round trip of the sums
// through memory per tile.
func scoreKeysT(dst []float32, t *ScoreQuery, keys [][]float32) {
	hp, dim := len(t.wP), t.dim
	var run [8 * 16]float32
	var out [8]float32
	n := len(keys)
	var next [8]*float32
	j := 0
	if hp == 32 && n >= 16 && scoreTilesOneCall {
		// One 32-head group (GLM-5's indexer): every whole tile whose
		// next tile is whole too in one call; the last whole tile and a
		// short one below.
		j = (n/8 - 1) * 8
		scoreTiles8T32(&t.qT[0], 4*dim, &t.wP[0], &keys[0], &keys[j], &dst[0])
	}
	for ; j < n; j += 8 {
		nj := min(8, n-j)
		k := func(c int) *float32 { return &keys[j+min(c, nj-1)][0] }
		nextTileKeys(next[:], keys, j)
		clear(run[:])
		for g := 0; g < hp; g += 32 {
			var o *float32
			if g+32 == hp {
				o = &out[0]
			}
			scoreTile8T(&t.qT[g], 4*hp, dim, &t.wP[g], k(0), k(1), k(2), k(3), k(4), k(5), k(6), k(7), &next, &run[0], o)
		}
		copy(dst[j:j+nj], out[:nj])
	}
}

// scoreTilesOneCall sends a 32-head query's whole tiles through one
// scoreTiles8T32 call (a test turns it off to compare with one call per
// tile, bit for bit).
var scoreTilesOneCall = true

// nextTileKeys points next at the keys of the tile after the one at j (a
// tile of len(next) keys; a short tile repeats the last key), which the
// score tile prefetches a line at a time as it reads its own; after the last
// tile, at that tile's own keys.
func nextTileKeys(next []*float32, keys [][]float32, j int) {
	t, n := len(next), len(keys)
	if j+t >= n {
		j -= t
	}
	for c := range next {
		next[c] = &keys[min(j+t+c, n-1)][0]
	}
}

// scoreKeysT6 is scoreKeysT for AVX2: six keys per tile (a short tile
// repeats its last key), each 32-head group in two 16-head calls, the next
// keys prefetched a line at a time by the calls.
func scoreKeysT6(dst []float32, t *ScoreQuery, keys [][]float32) {
	hp, dim := len(t.wP), t.dim
	var run [6 * 16]float32
	var out [6]float32
	n := len(keys)
	var next [6]*float32
	for j := 0; j < n; j += 6 {
		nj := min(6, n-j)
		k := func(c int) *float32 { return &keys[j+min(c, nj-1)][0] }
		k0, k1, k2, k3, k4, k5 := k(0), k(1), k(2), k(3), k(4), k(5)
		// The second call of a group finds the lines the first requested.
		nextTileKeys(next[:], keys, j)
		clear(run[:])
		for g := 0; g < hp; g += 32 {
			scoreTile6T(&t.qT[g], 4*hp, dim, &t.wP[g], k0, k1, k2, k3, k4, k5, &next, &run[0], nil)
			var o *float32
			if g+32 == hp {
				o = &out[0]
			}
			scoreTile6T(&t.qT[g+16], 4*hp, dim, &t.wP[g+16], k0, k1, k2, k3, k4, k5, &next, &run[0], o)
		}
		copy(dst[j:j+nj], out[:nj])
	}
}
