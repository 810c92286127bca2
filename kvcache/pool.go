package kvcache

import (
	"errors"
	"fmt"
	"sync"
)

// ErrOutOfBlocks is wrapped by Pool.Alloc when too few blocks are free.
var ErrOutOfBlocks = errors.New("out of KV cache blocks")

// Pool hands out KV block ids [0, capacity). One pool serves all layers of a
// rank, and because every DCP rank's scheduler state is the same replicated
// plan, a block id means the same block on every rank. Pool is safe for
// concurrent use.
type Pool struct {
	mu    sync.Mutex
	free  []int32 // stack of free ids; the next Alloc takes from the end
	inUse []bool  // inUse[id]: handed out and not freed
}

// NewPool returns a pool of numBlocks free blocks. Ids come out in
// ascending order from a fresh pool.
func NewPool(numBlocks int) *Pool {
	p := &Pool{free: make([]int32, numBlocks), inUse: make([]bool, numBlocks)}
	for i := range p.free {
		p.free[i] = int32(numBlocks - 1 - i)
	}
	return p
}

// Alloc takes n blocks and returns dst with their ids appended. When fewer
// than n blocks are free it takes none and returns an error wrapping
// ErrOutOfBlocks.
func (p *Pool) Alloc(n int, dst []int32) ([]int32, error) {
	if n < 0 {
		return dst, fmt.Errorf("allocate %d KV blocks: count must not be negative", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > len(p.free) {
		return dst, fmt.Errorf("allocate %d KV blocks: %d of %d free (finish or preempt requests, or give the KV cache more memory): %w",
			n, len(p.free), len(p.inUse), ErrOutOfBlocks)
	}
	for range n {
		id := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		p.inUse[id] = true
		dst = append(dst, id)
	}
	return dst, nil
}

// Free returns blocks to the pool. Freeing an id that is not allocated
// (out of range, never handed out, or freed twice, also within ids) is a
// bookkeeping bug that would hand one block to two requests; Free panics on
// it and leaves the pool unchanged.
func (p *Pool) Free(ids []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, id := range ids {
		if id < 0 || int(id) >= len(p.inUse) || !p.inUse[id] {
			for _, done := range ids[:i] { // undo, so the panic changes nothing
				p.inUse[done] = true
			}
			panic(fmt.Sprintf("kvcache: free of KV block %d, which is not allocated (pool of %d blocks)", id, len(p.inUse)))
		}
		p.inUse[id] = false
	}
	p.free = append(p.free, ids...)
}

// FreeCount is the number of blocks available to Alloc.
func (p *Pool) FreeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Capacity is the total number of blocks in the pool.
func (p *Pool) Capacity() int { return len(p.inUse) }
