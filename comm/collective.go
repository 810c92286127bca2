package comm

import (
	"context"
	"fmt"
)

// Op names a collective operation.
type Op uint8

// The collective operations. NumOps is the number of operations, for
// per-op tables.
const (
	OpAllGather Op = iota
	OpReduceScatter
	OpAllReduce
	OpAllToAll
	OpAllToAllV
	OpBroadcast
	OpBarrier
	NumOps
)

var opNames = [NumOps]string{"AllGather", "ReduceScatter", "AllReduce", "AllToAll", "AllToAllV", "Broadcast", "Barrier"}

func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Collective is one member's side of one collective call, at byte level.
// The typed functions (AllGather, ReduceScatter, ...) build it; a transport
// validates it, records it in the ledger and moves the data.
//
// Count is the ledger's element count: the number of elements this member
// contributes, which is len(Send)/DType.Size() for every op (0 for
// Barrier). Buffer shapes per op, with P = group size and n = Count:
//
//	AllGather      Send n,   Recv n·P  (member j's Send lands at Recv[j·n:])
//	ReduceScatter  Send n,   Recv n/P  (n % P == 0; Recv = Σ_j Send_j[rank·n/P:][:n/P])
//	AllReduce      Send n,   Recv n    (Recv = Σ_j Send_j)
//	AllToAll       Send n,   Recv n    (n % P == 0; part j of Send goes to member j)
//	AllToAllV      Send Σ SendCounts, Recv Σ RecvCounts (parts contiguous in rank order)
//	Broadcast      Send = Recv = the same n-element buffer on every member
//	Barrier        no buffers
//
// Send and Recv must not overlap (except for Broadcast, where they are the
// same buffer), and must stay untouched until the call returns.
type Collective struct {
	Op    Op
	DType DType
	Count int
	// Root is the group rank whose buffer Broadcast copies; 0 for other ops.
	Root int
	// SendCounts[j] and RecvCounts[j] are the elements sent to and received
	// from member j (AllToAllV only; nil otherwise).
	SendCounts, RecvCounts []int
	Send, Recv             []byte
}

// Group is one member's handle on a set of ranks that run collectives
// together. Rank and Size are relative to the group. Every member must issue
// the same collectives in the same order with the same op, dtype and count;
// the transport checks this (the ledger) before any data moves.
//
// A Group value is used by one goroutine (or thread of control) at a time.
// Nothing in the contract assumes the members share an address space.
type Group interface {
	// Name identifies the group in errors and metrics, e.g. "dcp[0 1]":
	// a role name followed by the world ranks of the members.
	Name() string
	// Rank is this member's rank within the group, in [0, Size()).
	Rank() int
	// Size is the number of members.
	Size() int
	// Do runs one collective. It returns when this member's part is done,
	// the deadline passes, ctx is cancelled, or the group's world has failed.
	// A failure fails every member of the group and poisons the world.
	Do(ctx context.Context, c Collective) error
	// Split returns a sub-group whose members are the listed ranks of this
	// group (group-relative, in the order given; the caller must be one of
	// them). Every listed member must call Split with the same name and
	// members; a transport may block until they do.
	Split(name string, members []int) (Group, error)
	// Stats returns this member's counters for this group without
	// allocating.
	Stats() Stats
	// Trace appends the collectives this member has issued on this group (if
	// tracing is enabled by the transport) to dst and returns it.
	Trace(dst []TraceEntry) []TraceEntry
}

// Split is g.Split(name, members): a sub-group of g made of the listed
// group-relative ranks.
func Split(g Group, name string, members []int) (Group, error) {
	sub, err := g.Split(name, members)
	if err != nil {
		return nil, fmt.Errorf("split %s from %s: %w", name, g.Name(), err)
	}
	return sub, nil
}

// AllGather concatenates every member's src into dst in group-rank order:
// len(dst) must be len(src)·g.Size().
func AllGather[T Elem](ctx context.Context, g Group, dst, src []T) error {
	return g.Do(ctx, Collective{Op: OpAllGather, DType: DTypeOf[T](), Count: len(src), Send: Bytes(src), Recv: Bytes(dst)})
}

// ReduceScatter sums every member's src element-wise (in group-rank order)
// and gives member r the r-th of Size equal parts: len(src) must be
// len(dst)·g.Size().
func ReduceScatter[T Elem](ctx context.Context, g Group, dst, src []T) error {
	return g.Do(ctx, Collective{Op: OpReduceScatter, DType: DTypeOf[T](), Count: len(src), Send: Bytes(src), Recv: Bytes(dst)})
}

// AllReduce sums every member's src element-wise in group-rank order into
// dst (len(dst) == len(src)); every member gets bit-identical results.
// dst and src must not overlap.
func AllReduce[T Elem](ctx context.Context, g Group, dst, src []T) error {
	return g.Do(ctx, Collective{Op: OpAllReduce, DType: DTypeOf[T](), Count: len(src), Send: Bytes(src), Recv: Bytes(dst)})
}

// AllToAll splits src into g.Size() equal parts and sends part j to member
// j; dst receives the parts in group-rank order. len(dst) == len(src), a
// multiple of g.Size().
func AllToAll[T Elem](ctx context.Context, g Group, dst, src []T) error {
	return g.Do(ctx, Collective{Op: OpAllToAll, DType: DTypeOf[T](), Count: len(src), Send: Bytes(src), Recv: Bytes(dst)})
}

// AllToAllV is AllToAll with variable splits: sendCounts[j] elements of src
// (contiguous, in rank order) go to member j, and recvCounts[j] elements
// from member j land in dst (contiguous, in rank order). The ledger checks
// that sendCounts on member i equals recvCounts on member j for every pair.
func AllToAllV[T Elem](ctx context.Context, g Group, dst, src []T, sendCounts, recvCounts []int) error {
	return g.Do(ctx, Collective{Op: OpAllToAllV, DType: DTypeOf[T](), Count: len(src),
		SendCounts: sendCounts, RecvCounts: recvCounts, Send: Bytes(src), Recv: Bytes(dst)})
}

// Broadcast copies buf of member root (a group rank) into buf of every other
// member. All members pass buffers of the same length.
func Broadcast[T Elem](ctx context.Context, g Group, buf []T, root int) error {
	b := Bytes(buf)
	return g.Do(ctx, Collective{Op: OpBroadcast, DType: DTypeOf[T](), Count: len(buf), Root: root, Send: b, Recv: b})
}

// Barrier returns once every member has entered it.
func Barrier(ctx context.Context, g Group) error {
	return g.Do(ctx, Collective{Op: OpBarrier})
}

// Validate checks c against its own shape rules for a member of rank rank in
// a group of size members. Transports call it before the rendezvous; it
// never looks at other members.
func (c *Collective) Validate(rank, size int) error {
	if c.Op >= NumOps {
		return fmt.Errorf("unknown collective op %d", uint8(c.Op))
	}
	if c.Op == OpBarrier {
		if c.Count != 0 || len(c.Send) != 0 || len(c.Recv) != 0 {
			return fmt.Errorf("Barrier carries no data, got count %d, %d send bytes, %d recv bytes", c.Count, len(c.Send), len(c.Recv))
		}
		return nil
	}
	es := c.DType.Size()
	if es == 0 {
		return fmt.Errorf("%s: unknown dtype %s", c.Op, c.DType)
	}
	if c.Count < 0 {
		return fmt.Errorf("%s: negative count %d", c.Op, c.Count)
	}
	if len(c.Send) != c.Count*es {
		return fmt.Errorf("%s %s count %d: send buffer has %d bytes, want %d", c.Op, c.DType, c.Count, len(c.Send), c.Count*es)
	}
	wantRecv := c.Count
	switch c.Op {
	case OpAllGather:
		wantRecv = c.Count * size
	case OpReduceScatter, OpAllToAll:
		if c.Count%size != 0 {
			return fmt.Errorf("%s %s: count %d is not a multiple of the group size %d; pad to %d", c.Op, c.DType, c.Count, size, (c.Count+size-1)/size*size)
		}
		if c.Op == OpReduceScatter {
			wantRecv = c.Count / size
		}
	case OpAllToAllV:
		if len(c.SendCounts) != size || len(c.RecvCounts) != size {
			return fmt.Errorf("AllToAllV: %d send counts and %d receive counts for a group of %d members; want one per member", len(c.SendCounts), len(c.RecvCounts), size)
		}
		sent, recv := 0, 0
		for j := range size {
			if c.SendCounts[j] < 0 || c.RecvCounts[j] < 0 {
				return fmt.Errorf("AllToAllV: negative count for member %d (send %d, receive %d)", j, c.SendCounts[j], c.RecvCounts[j])
			}
			sent += c.SendCounts[j]
			recv += c.RecvCounts[j]
		}
		if sent != c.Count {
			return fmt.Errorf("AllToAllV: send counts sum to %d, count is %d", sent, c.Count)
		}
		wantRecv = recv
	case OpBroadcast:
		if c.Root < 0 || c.Root >= size {
			return fmt.Errorf("Broadcast: root %d outside the group of %d members", c.Root, size)
		}
		if len(c.Recv) != len(c.Send) || (len(c.Send) > 0 && &c.Recv[0] != &c.Send[0]) {
			return fmt.Errorf("Broadcast: send and receive must be the same buffer")
		}
		return nil
	}
	if len(c.Recv) != wantRecv*es {
		return fmt.Errorf("%s %s count %d in a group of %d: receive buffer has %d elements, want %d", c.Op, c.DType, c.Count, size, len(c.Recv)/es, wantRecv)
	}
	if overlaps(c.Send, c.Recv) {
		return fmt.Errorf("%s: send and receive buffers overlap; peers read the send buffer while the receive buffer is written, use separate buffers", c.Op)
	}
	return nil
}

// BytesSent is the number of bytes member rank of a group of size members
// sends to other members in collective c, by the op's definition and
// independent of the transport's algorithm (n = Count, s = DType.Size(),
// P = size):
//
//	AllGather      n·s·(P−1)         its src to every peer
//	ReduceScatter  n·s·(P−1)/P       the P−1 parts that belong to peers
//	AllReduce      2·n·s·(P−1)/P     a reduce-scatter then an all-gather
//	AllToAll       n·s·(P−1)/P       the P−1 parts for peers
//	AllToAllV      Σ_{j≠rank} SendCounts[j]·s
//	Broadcast      n·s·(P−1) on the root, 0 elsewhere
//	Barrier        0
func BytesSent(c *Collective, rank, size int) int64 {
	n, s, p := int64(c.Count), int64(c.DType.Size()), int64(size)
	switch c.Op {
	case OpAllGather:
		return n * s * (p - 1)
	case OpReduceScatter, OpAllToAll:
		return n * s * (p - 1) / p
	case OpAllReduce:
		return 2 * n * s * (p - 1) / p
	case OpAllToAllV:
		var sum int64
		for j, k := range c.SendCounts {
			if j != rank {
				sum += int64(k)
			}
		}
		return sum * s
	case OpBroadcast:
		if rank == c.Root {
			return n * s * (p - 1)
		}
	}
	return 0
}
