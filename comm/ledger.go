package comm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Record is the ledger entry one member declares when it enters a
// collective: everything the members must agree on before data moves.
type Record struct {
	Rank  int    // world rank of the member
	Seq   uint64 // index of this collective among the member's calls on the group, from 0
	Op    Op
	DType DType
	Count int // elements this member contributes (see Collective)
	Root  int // Broadcast only
	// AllToAllV only: elements sent to and received from each member.
	SendCounts, RecvCounts []int
}

// Record returns the ledger record of c for the member with the given
// world rank and sequence number.
func (c *Collective) Record(worldRank int, seq uint64) Record {
	return Record{Rank: worldRank, Seq: seq, Op: c.Op, DType: c.DType, Count: c.Count, Root: c.Root,
		SendCounts: c.SendCounts, RecvCounts: c.RecvCounts}
}

// String is the record without its rank and sequence number, e.g.
// "AllGather f32 count 4608".
func (r Record) String() string {
	switch r.Op {
	case OpBarrier:
		if r.Count != 0 || r.DType != DTypeNone {
			return fmt.Sprintf("Barrier %s count %d", r.DType, r.Count)
		}
		return "Barrier"
	case OpBroadcast:
		return fmt.Sprintf("Broadcast %s count %d root %d", r.DType, r.Count, r.Root)
	case OpAllToAllV:
		return fmt.Sprintf("AllToAllV %s send %v recv %v", r.DType, r.SendCounts, r.RecvCounts)
	}
	return fmt.Sprintf("%s %s count %d", r.Op, r.DType, r.Count)
}

// agrees reports whether r and o describe the same collective (apart from
// the split counts of AllToAllV, which are checked pairwise).
func (r *Record) agrees(o *Record) bool {
	if r.Seq != o.Seq || r.Op != o.Op || r.DType != o.DType {
		return false
	}
	switch r.Op {
	case OpAllToAllV:
		return true
	case OpBroadcast:
		return r.Count == o.Count && r.Root == o.Root
	}
	return r.Count == o.Count
}

// CheckLedger compares the records of every member of group (indexed by
// group rank) and returns a *MismatchError if they do not describe the same
// collective, or, for AllToAllV, if some member i sends a different number
// of elements to member j than j expects from i. It allocates only when it
// reports a mismatch.
func CheckLedger(group string, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	for i := 1; i < len(recs); i++ {
		if !recs[i].agrees(&recs[0]) {
			return newMismatch(group, recs, "")
		}
	}
	if recs[0].Op != OpAllToAllV {
		return nil
	}
	n := len(recs)
	for i := range recs {
		if len(recs[i].SendCounts) != n || len(recs[i].RecvCounts) != n {
			return newMismatch(group, recs, fmt.Sprintf("AllToAllV split counts disagree: rank %d has %d send and %d receive counts for a group of %d",
				recs[i].Rank, len(recs[i].SendCounts), len(recs[i].RecvCounts), n))
		}
	}
	var bad []string
	for i := range recs {
		for j := range recs {
			if s, r := recs[i].SendCounts[j], recs[j].RecvCounts[i]; s != r {
				bad = append(bad, fmt.Sprintf("rank %d sends %d to rank %d but rank %d expects %d from rank %d",
					recs[i].Rank, s, recs[j].Rank, recs[j].Rank, r, recs[i].Rank))
			}
		}
	}
	if bad != nil {
		return newMismatch(group, recs, "AllToAllV split counts disagree: "+strings.Join(bad, "; "))
	}
	return nil
}

// MismatchError reports members of a group that entered different
// collectives. Every member of the group receives the same value.
type MismatchError struct {
	Group   string
	Records []Record // one per member, in group-rank order (deep copies)
	Detail  string   // what disagrees beyond the records themselves, if anything
}

func newMismatch(group string, recs []Record, detail string) *MismatchError {
	e := &MismatchError{Group: group, Records: make([]Record, len(recs)), Detail: detail}
	for i, r := range recs {
		r.SendCounts = slices.Clone(r.SendCounts)
		r.RecvCounts = slices.Clone(r.RecvCounts)
		e.Records[i] = r
	}
	return e
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "collective mismatch in group %s", e.Group)
	sameSeq := true
	for _, r := range e.Records {
		sameSeq = sameSeq && r.Seq == e.Records[0].Seq
	}
	if sameSeq && len(e.Records) > 0 {
		fmt.Fprintf(&b, " seq %d", e.Records[0].Seq)
	}
	b.WriteString(": ")
	if e.Detail != "" {
		b.WriteString(e.Detail)
		b.WriteString("; ")
	}
	for i, r := range e.Records {
		if i > 0 {
			b.WriteString(", ")
		}
		if sameSeq {
			fmt.Fprintf(&b, "rank %d %s", r.Rank, r)
		} else {
			fmt.Fprintf(&b, "rank %d seq %d %s", r.Rank, r.Seq, r)
		}
	}
	return b.String()
}

// ErrTimeout is the cause of an *AbortError when a collective's deadline
// passed.
var ErrTimeout = errors.New("collective deadline exceeded")

// AbortError reports a collective that one member gave up on because its
// deadline passed (Cause is ErrTimeout) or its context ended (Cause is
// ctx.Err()), with the members that had not arrived.
type AbortError struct {
	Group   string
	Record  Record        // the collective of the member that gave up
	Timeout time.Duration // the deadline that passed (for ErrTimeout)
	// Missing lists the world ranks that had not reached the point this
	// member waited for; LastSeq[i] is the sequence number of the last
	// collective Missing[i] had entered on the group (−1: none).
	Missing []int
	LastSeq []int64
	// Unfinished, when every member's record had arrived but the data did
	// not, lists the other members of the group, with one of which (a
	// transport with per-peer requests knows which) the exchange stalled:
	// for a group of two, the unreachable rank.
	Unfinished []int
	Cause      error
}

func (e *AbortError) Error() string {
	var b strings.Builder
	if errors.Is(e.Cause, ErrTimeout) {
		fmt.Fprintf(&b, "collective timeout after %v", e.Timeout)
	} else {
		fmt.Fprintf(&b, "collective cancelled (%v)", e.Cause)
	}
	fmt.Fprintf(&b, " in group %s seq %d (%s) on rank %d: ", e.Group, e.Record.Seq, e.Record, e.Record.Rank)
	if len(e.Missing) == 0 && len(e.Unfinished) == 1 {
		fmt.Fprintf(&b, "every member arrived, but the data exchange with rank %d did not finish (rank %d is unreachable or stopped)", e.Unfinished[0], e.Unfinished[0])
		return b.String()
	}
	if len(e.Missing) == 0 && len(e.Unfinished) > 1 {
		fmt.Fprintf(&b, "every member arrived, but the data exchange with one or more of ranks %v did not finish", e.Unfinished)
		return b.String()
	}
	if len(e.Missing) == 0 {
		fmt.Fprintf(&b, "every member arrived as the wait ended")
		return b.String()
	}
	fmt.Fprintf(&b, "ranks %v did not arrive (", e.Missing)
	for i, r := range e.Missing {
		if i > 0 {
			b.WriteString(", ")
		}
		if e.LastSeq[i] < 0 {
			fmt.Fprintf(&b, "rank %d entered no collective", r)
		} else {
			fmt.Fprintf(&b, "rank %d last entered seq %d", r, e.LastSeq[i])
		}
	}
	b.WriteString(")")
	return b.String()
}

func (e *AbortError) Unwrap() error { return e.Cause }
