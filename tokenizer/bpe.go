package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// bpeModel is a byte-pair-encoding model: a vocabulary and a ranked list of
// merges. Encoding a word starts from its single symbols and repeatedly
// merges the adjacent pair with the lowest rank (leftmost first among equal
// ranks) until no adjacent pair has a merge.
type bpeModel struct {
	vocab map[string]int
	// merges maps the pair (left id, right id) to its rank and the id of
	// the merged token.
	merges map[uint64]bpeMerge
	unkID  int // -1 when the model has no unknown token
	// byteLevel means words are spelled in the byte-level alphabet before
	// lookup, one symbol per input byte.
	byteLevel    bool
	byteSymbols  [256]int32 // id of each single-byte symbol, -1 when absent
	ignoreMerges bool

	cacheMu sync.RWMutex
	cache   map[string][]int
}

type bpeMerge struct{ rank, id int32 }

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// wordCacheLimit bounds the word → ids cache; it is cleared when full, which
// keeps the common words of the current traffic.
const wordCacheLimit = 1 << 15

// words longer than this (in bytes) bypass the cache.
const wordCacheMaxLen = 256

// appendWord appends the ids of one pre-tokenized piece.
func (m *bpeModel) appendWord(dst []int, word string) []int {
	if len(word) <= wordCacheMaxLen {
		m.cacheMu.RLock()
		ids, ok := m.cache[word]
		m.cacheMu.RUnlock()
		if ok {
			return append(dst, ids...)
		}
	}
	start := len(dst)
	dst = m.encodeWord(dst, word)
	if len(word) <= wordCacheMaxLen {
		ids := append([]int(nil), dst[start:]...)
		m.cacheMu.Lock()
		if len(m.cache) >= wordCacheLimit {
			clear(m.cache)
		}
		m.cache[word] = ids
		m.cacheMu.Unlock()
	}
	return dst
}

// bpeScratch holds the per-word working memory of the merge loop.
type bpeScratch struct {
	ids        []int32
	prev, next []int32
	queue      mergeQueue
	spelled    []byte
}

var scratchPool = sync.Pool{New: func() any { return new(bpeScratch) }}

func (m *bpeModel) encodeWord(dst []int, word string) []int {
	sc := scratchPool.Get().(*bpeScratch)
	defer scratchPool.Put(sc)
	ids := sc.ids[:0]
	if m.byteLevel {
		if m.ignoreMerges {
			sc.spelled = appendByteLevel(sc.spelled[:0], word)
			if id, ok := m.vocab[string(sc.spelled)]; ok {
				return append(dst, id)
			}
		}
		for i := 0; i < len(word); i++ {
			ids = m.appendSymbol(ids, m.byteSymbols[word[i]])
		}
	} else {
		if m.ignoreMerges {
			if id, ok := m.vocab[word]; ok {
				return append(dst, id)
			}
		}
		for i := 0; i < len(word); {
			_, w := utf8.DecodeRuneInString(word[i:])
			id, ok := m.vocab[word[i:i+w]]
			if !ok {
				id = -1
			}
			ids = m.appendSymbol(ids, int32(id))
			i += w
		}
	}
	ids = m.merge(sc, ids)
	sc.ids = ids
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}

// appendSymbol appends a starting symbol; an unknown one becomes the
// unknown token when the model has one and is dropped otherwise.
func (m *bpeModel) appendSymbol(ids []int32, id int32) []int32 {
	if id < 0 {
		if m.unkID < 0 {
			return ids
		}
		id = int32(m.unkID)
	}
	return append(ids, id)
}

// merge runs the merge loop over ids with a doubly linked list of symbols
// and a priority queue of candidate pairs; stale queue entries are skipped
// when popped. It returns the surviving symbols in order.
func (m *bpeModel) merge(sc *bpeScratch, ids []int32) []int32 {
	n := len(ids)
	if n < 2 {
		return ids
	}
	prev := growInt32(sc.prev, n)
	next := growInt32(sc.next, n)
	sc.prev, sc.next = prev, next
	for i := range n {
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
	}
	next[n-1] = -1
	q := sc.queue[:0]
	for i := 0; i+1 < n; i++ {
		if mg, ok := m.merges[pairKey(ids[i], ids[i+1])]; ok {
			q = append(q, queued{rank: mg.rank, pos: int32(i), left: ids[i], right: ids[i+1], merged: mg.id})
		}
	}
	q.init()
	for len(q) > 0 {
		top := q.pop()
		l := top.pos
		r := next[l]
		// The entry is stale when either symbol changed or was absorbed.
		if ids[l] != top.left || r < 0 || ids[r] != top.right || ids[l] < 0 {
			continue
		}
		ids[l] = top.merged
		ids[r] = -1
		nr := next[r]
		next[l] = nr
		if nr >= 0 {
			prev[nr] = l
		}
		if p := prev[l]; p >= 0 {
			if mg, ok := m.merges[pairKey(ids[p], ids[l])]; ok {
				q.push(queued{rank: mg.rank, pos: p, left: ids[p], right: ids[l], merged: mg.id})
			}
		}
		if nr >= 0 {
			if mg, ok := m.merges[pairKey(ids[l], ids[nr])]; ok {
				q.push(queued{rank: mg.rank, pos: l, left: ids[l], right: ids[nr], merged: mg.id})
			}
		}
	}
	sc.queue = q
	out := ids[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, ids[i])
	}
	return out
}

func growInt32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// queued is a candidate merge of the symbols at pos and next[pos].
type queued struct {
	rank, pos, left, right, merged int32
}

// mergeQueue is a binary min-heap of candidates ordered by rank, then by
// position (leftmost first). It is typed to keep the merge loop free of
// interface conversions.
type mergeQueue []queued

func (q mergeQueue) less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].pos < q[j].pos
}

func (q mergeQueue) down(i int) {
	n := len(q)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && q.less(r, l) {
			c = r
		}
		if !q.less(c, i) {
			return
		}
		q[i], q[c] = q[c], q[i]
		i = c
	}
}

func (q mergeQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (q mergeQueue) init() {
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

func (q *mergeQueue) push(x queued) {
	*q = append(*q, x)
	q.up(len(*q) - 1)
}

func (q *mergeQueue) pop() queued {
	old := *q
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	*q = old[:last]
	q.down(0)
	return top
}
