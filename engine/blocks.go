package engine

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cpmla/cpmla/kvcache"
)

// blockManager hands KV block ids to requests on top of a kvcache.Pool and
// keeps the prefix cache: full blocks whose contents are known, keyed by the
// chain hash of every token id up to and including the block.
//
// A block is in exactly one of three states: free (in the pool), held (ref ≥
// 1, owned by one or more running requests that share a cached prefix), or
// evictable (ref 0 but still cached; it sits on an LRU list and goes back to
// the pool only when an allocation needs it). Nothing here allocates after
// construction: the prefix index is an open-addressing table sized for every
// block.
type blockManager struct {
	pool    *kvcache.Pool
	block   int // tokens per block id (the scheduler's block)
	caching bool

	ref    []int32
	cached []bool
	hash   []uint64 // chain hash of a cached block
	parent []uint64 // chain hash of the block before it (0 for the first)
	tokens []int32  // token ids of each cached block, block·B apart
	index  prefixIndex

	// LRU list of evictable blocks: least recently released at head.
	prev, next []int32
	head, tail int32
	evictable  int

	one []int32 // one-id scratch for Pool.Free
}

func newBlockManager(numBlocks, block int, caching bool) *blockManager {
	m := &blockManager{
		pool:    kvcache.NewPool(numBlocks),
		block:   block,
		caching: caching,
		ref:     make([]int32, numBlocks),
		cached:  make([]bool, numBlocks),
		prev:    make([]int32, numBlocks),
		next:    make([]int32, numBlocks),
		head:    -1,
		tail:    -1,
		one:     make([]int32, 1),
	}
	if caching {
		m.hash = make([]uint64, numBlocks)
		m.parent = make([]uint64, numBlocks)
		m.tokens = make([]int32, numBlocks*block)
		m.index = newPrefixIndex(numBlocks)
	}
	return m
}

// capacity is the number of blocks of the pool.
func (m *blockManager) capacity() int { return m.pool.Capacity() }

// available is the number of blocks an allocation can get: free plus evictable.
func (m *blockManager) available() int { return m.pool.FreeCount() + m.evictable }

// held is the number of blocks owned by running requests.
func (m *blockManager) held() int { return m.capacity() - m.available() }

// alloc appends n fresh blocks (ref 1) to dst, evicting cached blocks in LRU
// order when the pool alone has too few.
func (m *blockManager) alloc(n int, dst []int32) ([]int32, error) {
	if n > m.available() {
		return dst, fmt.Errorf("allocate %d KV blocks: %d free and %d evictable of %d: %w",
			n, m.pool.FreeCount(), m.evictable, m.capacity(), kvcache.ErrOutOfBlocks)
	}
	for m.pool.FreeCount() < n {
		m.evict(m.head)
	}
	start := len(dst)
	dst, err := m.pool.Alloc(n, dst)
	if err != nil {
		return dst, fmt.Errorf("block manager: %w", err)
	}
	for _, id := range dst[start:] {
		m.ref[id] = 1
	}
	return dst, nil
}

// acquire adds a reference to a cached block found by lookup.
func (m *blockManager) acquire(id int32) {
	if m.ref[id] == 0 {
		m.lruRemove(id)
	}
	m.ref[id]++
}

// release drops one reference; an unreferenced block stays evictable when it
// is cached and returns to the pool otherwise.
func (m *blockManager) release(id int32) {
	if m.ref[id] <= 0 {
		panic(fmt.Sprintf("engine: release of KV block %d with reference count %d", id, m.ref[id]))
	}
	m.ref[id]--
	if m.ref[id] > 0 {
		return
	}
	if m.cached[id] {
		m.lruPush(id)
		return
	}
	m.one[0] = id
	m.pool.Free(m.one)
}

// releaseAll releases a request's blocks, last block first, so that the tail
// of a prefix is evicted before its head.
func (m *blockManager) releaseAll(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		m.release(ids[i])
	}
}

// lookup finds the cached block with chain hash h whose parent hash and
// token ids match, so that a 64-bit hash collision cannot alias two prefixes
// unless their parents collide too.
func (m *blockManager) lookup(h, parent uint64, toks []int32) (int32, bool) {
	if !m.caching {
		return -1, false
	}
	id, ok := m.index.get(h)
	if !ok || m.parent[id] != parent || !slices.Equal(m.tokens[int(id)*m.block:(int(id)+1)*m.block], toks) {
		return -1, false
	}
	return id, true
}

// register records a full, computed block under its chain hash. A block
// whose contents another cached block already holds stays uncached.
func (m *blockManager) register(id int32, h, parent uint64, toks []int32) {
	if !m.caching || m.cached[id] {
		return
	}
	if _, dup := m.index.get(h); dup {
		return
	}
	m.index.put(h, id)
	m.cached[id] = true
	m.hash[id], m.parent[id] = h, parent
	copy(m.tokens[int(id)*m.block:(int(id)+1)*m.block], toks)
}

func (m *blockManager) evict(id int32) {
	m.lruRemove(id)
	m.index.del(m.hash[id])
	m.cached[id] = false
	m.one[0] = id
	m.pool.Free(m.one)
}

func (m *blockManager) lruPush(id int32) {
	m.prev[id], m.next[id] = m.tail, -1
	if m.tail >= 0 {
		m.next[m.tail] = id
	} else {
		m.head = id
	}
	m.tail = id
	m.evictable++
}

func (m *blockManager) lruRemove(id int32) {
	p, n := m.prev[id], m.next[id]
	if p >= 0 {
		m.next[p] = n
	} else {
		m.head = n
	}
	if n >= 0 {
		m.prev[n] = p
	} else {
		m.tail = p
	}
	m.evictable--
}

// chainHash extends the prefix hash parent by one block of token ids:
// 64-bit FNV-1a over the parent hash and the ids in little-endian order.
// It is the same on every rank and in every process.
func chainHash(parent uint64, toks []int32) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], parent)
	for _, c := range b {
		h = (h ^ uint64(c)) * prime
	}
	for _, t := range toks {
		binary.LittleEndian.PutUint32(b[:4], uint32(t))
		for _, c := range b[:4] {
			h = (h ^ uint64(c)) * prime
		}
	}
	return h
}

// prefixIndex maps chain hashes to cached block ids: linear probing in a
// table of at least twice as many slots as blocks, with backward-shift
// deletion, so that it never allocates after construction.
type prefixIndex struct {
	keys []uint64
	ids  []int32 // -1: empty slot
	mask uint64
}

func newPrefixIndex(numBlocks int) prefixIndex {
	size := 16
	for size < 2*numBlocks {
		size *= 2
	}
	x := prefixIndex{keys: make([]uint64, size), ids: make([]int32, size), mask: uint64(size - 1)}
	for i := range x.ids {
		x.ids[i] = -1
	}
	return x
}

func (x *prefixIndex) slot(h uint64) uint64 { return (h * 0x9e3779b97f4a7c15) >> 32 & x.mask }

func (x *prefixIndex) get(h uint64) (int32, bool) {
	for i := x.slot(h); x.ids[i] >= 0; i = (i + 1) & x.mask {
		if x.keys[i] == h {
			return x.ids[i], true
		}
	}
	return -1, false
}

// put inserts h (not present); the table never fills, since it holds at
// most one entry per block.
func (x *prefixIndex) put(h uint64, id int32) {
	i := x.slot(h)
	for x.ids[i] >= 0 {
		i = (i + 1) & x.mask
	}
	x.keys[i], x.ids[i] = h, id
}

func (x *prefixIndex) del(h uint64) {
	i := x.slot(h)
	for x.ids[i] >= 0 && x.keys[i] != h {
		i = (i + 1) & x.mask
	}
	if x.ids[i] < 0 {
		return
	}
	// Backward shift: move later entries of the run into the hole when
	// their home slot does not lie after it.
	for j := (i + 1) & x.mask; x.ids[j] >= 0; j = (j + 1) & x.mask {
		home := x.slot(x.keys[j])
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.keys[i], x.ids[i] = x.keys[j], x.ids[j]
			i = j
		}
	}
	x.ids[i] = -1
}
