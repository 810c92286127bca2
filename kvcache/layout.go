package kvcache

import (
	"fmt"
	"strings"
)

// Layout is the ownership function of decode context parallelism for a DCP
// group of N ranks and a KV interleave of I tokens
// (--decode-context-parallel-size, --cp-kv-cache-interleave-size).
//
// Positions are request-relative and 0-based. Runs of I consecutive positions
// go to the same rank, and the runs are dealt round-robin over the N ranks.
// With N = 1 every position is local and Local(p) == p.
//
// The methods assume a valid layout (N ≥ 1, I ≥ 1); call Validate once at
// start-up.
type Layout struct {
	N int // DCP group size
	I int // interleave: consecutive positions kept on one rank
}

// Validate checks the layout against the KV block size: N ≥ 1, I ≥ 1,
// I ≤ blockSize and blockSize % I == 0, so that every local block holds B
// whole interleave runs. The error names the values and a setting that works.
func (l Layout) Validate(blockSize int) error {
	switch {
	case l.N < 1:
		return fmt.Errorf("decode context parallel size is %d, must be at least 1 (use --decode-context-parallel-size 1 to disable DCP)", l.N)
	case l.I < 1:
		return fmt.Errorf("cp_kv_cache_interleave_size is %d, must be at least 1 (use --cp-kv-cache-interleave-size 1)", l.I)
	case blockSize < 1:
		return fmt.Errorf("block size is %d, must be at least 1 (use --block-size 64)", blockSize)
	case l.I > blockSize || blockSize%l.I != 0:
		return fmt.Errorf("cp_kv_cache_interleave_size %d must be at most and divide the block size %d (use --cp-kv-cache-interleave-size one of %s, or a --block-size that is a multiple of %d)",
			l.I, blockSize, divisorList(blockSize), l.I)
	}
	return nil
}

// divisorList formats the divisors of n for refusal messages, e.g. "1, 2, 4 or 8".
func divisorList(n int) string {
	var ds []string
	for d := 1; d <= n; d++ {
		if n%d == 0 {
			ds = append(ds, fmt.Sprint(d))
		}
	}
	if len(ds) == 1 {
		return ds[0]
	}
	return strings.Join(ds[:len(ds)-1], ", ") + " or " + ds[len(ds)-1]
}

// Owner is the DCP rank that stores position p: (p / I) mod N.
func (l Layout) Owner(p int) int { return (p / l.I) % l.N }

// Local is the index of position p in its owner's local sequence:
// (p / (N·I))·I + p mod I.
func (l Layout) Local(p int) int { return (p/(l.N*l.I))*l.I + p%l.I }

// Global is the inverse of (Owner, Local): the position whose local index on
// rank is local.
func (l Layout) Global(local, rank int) int {
	return (local/l.I)*(l.N*l.I) + rank*l.I + local%l.I
}

// LocalLen is the number of positions in [0, seqLen) that rank owns, i.e. the
// length of rank's local sequence for a request of seqLen tokens. A rank can
// own nothing: seqLen ≤ rank·I gives 0.
func (l Layout) LocalLen(seqLen, rank int) int {
	span := l.N * l.I
	rem := seqLen%span - rank*l.I
	rem = max(0, min(rem, l.I))
	return seqLen/span*l.I + rem
}

// LocalSeqLens writes LocalLen(seqLens[i], rank) to dst[i]. The bounds are
// per token: a request with several query tokens (chunked prefill, multi-token
// decode rows) must be expanded to one causal bound per token first, because
// local lengths do not commute with subtraction.
func (l Layout) LocalSeqLens(dst, seqLens []int32, rank int) {
	if len(dst) < len(seqLens) {
		panic(fmt.Sprintf("kvcache: LocalSeqLens dst has %d entries for %d sequence lengths", len(dst), len(seqLens)))
	}
	for i, s := range seqLens {
		dst[i] = int32(l.LocalLen(int(s), rank))
	}
}

// Slot is the cache slot of position p of a request on DCP rank, or −1 when
// another rank owns p (or p's block is unallocated, a negative id).
// blockTable holds the request's block ids (the same on every rank); the
// slot is blockTable[Local(p)/B]·B + Local(p)%B. It panics if rank owns p
// and the block table does not reach it.
func (l Layout) Slot(blockTable []int32, blockSize, p, rank int) int32 {
	if l.Owner(p) == rank {
		if blk := l.Local(p) / blockSize; blk >= len(blockTable) {
			panic(fmt.Sprintf("kvcache: position %d (local %d on rank %d) needs block %d, block table has %d", p, l.Local(p), rank, blk, len(blockTable)))
		}
	}
	return l.localSlot(blockTable, blockSize, p, rank)
}

// LocalSlots writes to dst[l] the cache slot of rank's local key l, for
// every l < len(dst): Slot(blockTable, blockSize, Global(l, rank), rank),
// −1 where the block is unallocated (a negative id). Global and Local are
// inverse, so local key l sits at offset l mod blockSize of block
// l / blockSize of the table on every rank: a step fills the slots of a
// whole context block by block, without the divisions of a Slot call per
// key. It panics, as Slot does, when the table has too few blocks.
func (l Layout) LocalSlots(dst []int32, blockTable []int32, blockSize int) {
	if need := (len(dst) + blockSize - 1) / blockSize; need > len(blockTable) {
		panic(fmt.Sprintf("kvcache: %d local keys need %d blocks of %d, block table has %d", len(dst), need, blockSize, len(blockTable)))
	}
	for b := 0; b*blockSize < len(dst); b++ {
		part := dst[b*blockSize : min(len(dst), (b+1)*blockSize)]
		id := blockTable[b]
		if id < 0 {
			for i := range part {
				part[i] = -1
			}
			continue
		}
		base := id * int32(blockSize)
		for i := range part {
			part[i] = base + int32(i)
		}
	}
}

// Localize turns request-relative global positions (top-k indices, −1 or any
// negative value = none) into this rank's cache slots. A position is kept only
// if rank owns it and its block is in blockTable (and allocated, ≥ 0).
//
// With compact the kept slots are packed, in their original order, into
// slots[:valid] and the rest is −1 (for kernels that read a prefix of length
// valid). Without compact every column stays in place and the dropped ones
// become −1 (for kernels that skip interior −1s). slots may alias positions.
func (l Layout) Localize(slots []int32, positions []int32, blockTable []int32, blockSize, rank int, compact bool) (valid int) {
	if len(slots) < len(positions) {
		panic(fmt.Sprintf("kvcache: Localize has %d slots for %d positions", len(slots), len(positions)))
	}
	for i, g := range positions {
		s := l.localSlot(blockTable, blockSize, int(g), rank)
		if compact {
			if s >= 0 {
				slots[valid] = s
				valid++
			}
			continue
		}
		slots[i] = s
		if s >= 0 {
			valid++
		}
	}
	if compact {
		for i := valid; i < len(positions); i++ {
			slots[i] = -1
		}
	}
	return valid
}

// localSlot is Slot without the panic: −1 for negative positions, positions
// owned elsewhere, blocks past the table and unallocated (negative) blocks.
func (l Layout) localSlot(blockTable []int32, blockSize, p, rank int) int32 {
	if p < 0 || l.Owner(p) != rank {
		return -1
	}
	loc := l.Local(p)
	blk := loc / blockSize
	if blk >= len(blockTable) || blockTable[blk] < 0 {
		return -1
	}
	return blockTable[blk]*int32(blockSize) + int32(loc%blockSize)
}
