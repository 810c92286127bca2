//go:build mpi

package mpi

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/cpmla/cpmla/comm"
)

// transfer is what one request of a round moves: bytes to (send) or from
// member peer (a group rank).
type transfer struct {
	peer  int
	send  bool
	bytes int
}

// newRound forgets the requests of the previous round.
func (m *member) newRound() {
	m.reqs.reset()
	m.xfers = m.xfers[:0]
}

// post starts one transfer of b with member peer, remembering what its
// request moves. A round holds at most one receive and one send per peer,
// within the capacity newMember gave reqs and xfers.
func (m *member) post(send bool, peer int, b []byte, tag int) error {
	m.xfers = append(m.xfers, transfer{peer: peer, send: send, bytes: len(b)})
	if send {
		return isend(ptr(b), len(b), peer, tag, m.comm, m.reqs.next())
	}
	return irecv(ptr(b), len(b), peer, tag, m.comm, m.reqs.next())
}

// exchange starts a data round of the collective in t.stage: this member's
// own part is copied locally, and with every peer j one receive of what j
// sends here and one send of what j takes from here, both direct, so that
// no transfer waits on a third member and a stall is pinned to the peers
// whose own requests are pending. Receives are posted before sends, and
// member r receives first from r−1 and sends first to r+1, so the members
// do not all send to member 0 first. Empty parts move nothing; the ledger
// agreed on every size, so both ends skip the same ones.
func (t *collective) exchange(tag int) error {
	m := t.m
	n, me := len(m.ranks), m.rank
	m.newRound()
	copy(t.part(false, me), t.part(true, me))
	for k := 1; k < n; k++ {
		j := (me - k + n) % n
		if b := t.part(false, j); len(b) > 0 {
			if err := m.post(false, j, b, tag); err != nil {
				return err
			}
		}
	}
	for k := 1; k < n; k++ {
		j := (me + k) % n
		if b := t.part(true, j); len(b) > 0 {
			if err := m.post(true, j, b, tag); err != nil {
				return err
			}
		}
	}
	return nil
}

// part is, in the current data round, the bytes this member sends to member
// j (send) or the place of the bytes it receives from j; for j = m.rank the
// two are what it keeps of its own.
func (t *collective) part(send bool, j int) []byte {
	m, c := t.m, &t.c
	n, me := len(m.ranks), m.rank
	es := c.DType.Size()
	switch c.Op {
	case comm.OpAllGather:
		nb := len(c.Send)
		if send {
			return c.Send
		}
		return c.Recv[j*nb : (j+1)*nb]
	case comm.OpAllToAll:
		nb := len(c.Send) / n
		if send {
			return c.Send[j*nb : (j+1)*nb]
		}
		return c.Recv[j*nb : (j+1)*nb]
	case comm.OpReduceScatter:
		nb := len(c.Send) / n
		if send {
			return c.Send[j*nb : (j+1)*nb]
		}
		return m.scratch.bytes(j*nb, nb)
	case comm.OpAllReduce:
		if nb := len(c.Send); nb*n <= smallAllReduceBytes {
			// Every member gathers every contribution and sums them all.
			if send {
				return c.Send
			}
			return m.scratch.bytes(j*nb, nb)
		}
		lo, hi := chunk(c.Count, n, me)
		jlo, jhi := chunk(c.Count, n, j)
		if t.stage == stageAllGatherChunks {
			// Second round: this member's summed chunk to every peer,
			// theirs into place.
			if send {
				return c.Recv[lo*es : hi*es]
			}
			return c.Recv[jlo*es : jhi*es]
		}
		// First round: member j's chunk of the contribution to j, every
		// member's contribution to this member's chunk staged in rank
		// order.
		if send {
			return c.Send[jlo*es : jhi*es]
		}
		mine := (hi - lo) * es
		return m.scratch.bytes(j*mine, mine)
	case comm.OpAllToAllV:
		if send {
			return c.Send[m.offs[0][j] : m.offs[0][j]+c.SendCounts[j]*es]
		}
		return c.Recv[m.offs[1][j] : m.offs[1][j]+c.RecvCounts[j]*es]
	case comm.OpBroadcast:
		// The root sends to every member directly: a tree would make a
		// member's receive wait on its parent's, and a stall would be
		// blamed on the parent.
		if me == c.Root && send || me != c.Root && !send && j == c.Root {
			return c.Recv
		}
	}
	return nil
}

// pending tests every request of the current round on its own and returns
// the transfers not complete, in group-rank order of their peers, receives
// first.
func (m *member) pending() []transfer {
	var out []transfer
	for i, x := range m.xfers {
		if !m.reqs.completed(i) {
			out = append(out, x)
		}
	}
	slices.SortStableFunc(out, func(a, b transfer) int {
		if c := cmp.Compare(a.peer, b.peer); c != 0 {
			return c
		}
		return cmp.Compare(b2i(a.send), b2i(b.send))
	})
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// round names the collective's current round in an error.
func (t *collective) round() string {
	switch {
	case t.stage == stageLedgerWait:
		return "ledger round"
	case t.stage == stageRefusalWait:
		return "refusal round"
	case t.stage == stageAllGatherChunks:
		return "second data round (all-gather of the summed chunks)"
	case t.c.Op == comm.OpAllReduce && len(t.c.Send)*len(t.m.ranks) > smallAllReduceBytes:
		return "first data round (reduce-scatter)"
	}
	return "data round"
}

// maxListed bounds the transfers a stall error lists.
const maxListed = 8

// stalled completes e, an abort in which every member had arrived, with the
// peers of the pending transfers (world ranks, in group order) and returns
// it wrapped with the transfers themselves: sizes are those of whole
// messages, since MPI reports no progress of a request before it
// completes.
func stalled(e *comm.AbortError, round string, pend []transfer, ranks []int) error {
	var b strings.Builder
	for i, x := range pend {
		if len(e.Unfinished) == 0 || e.Unfinished[len(e.Unfinished)-1] != ranks[x.peer] {
			e.Unfinished = append(e.Unfinished, ranks[x.peer])
		}
		switch {
		case i == maxListed:
			fmt.Fprintf(&b, " and %d more", len(pend)-maxListed)
		case i > maxListed:
		case x.send:
			fmt.Fprintf(&b, ", sending %d bytes to rank %d", x.bytes, ranks[x.peer])
		default:
			fmt.Fprintf(&b, ", receiving %d bytes from rank %d", x.bytes, ranks[x.peer])
		}
	}
	return fmt.Errorf("%w; still pending in its %s: %s", e, round, strings.TrimPrefix(b.String(), ", "))
}
