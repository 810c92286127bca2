package comm

import "context"

// WithMismatch wraps g so that its atSeq-th collective (counting from 0 the
// collectives issued through the wrapper, which is the ledger's sequence
// number when every collective on g goes through it) declares a wrong
// element count: Count+delta, or for AllToAllV a receive count from the
// next member off by delta. The buffers are passed unchanged, so the
// ledger sees the disagreement before any data moves. It exists for tests
// and for fault-injection runs; sub-groups split from it are not affected.
func WithMismatch(g Group, atSeq uint64, delta int) Group {
	return &mismatchGroup{Group: g, at: atSeq, delta: delta}
}

type mismatchGroup struct {
	Group
	at     uint64
	delta  int
	seq    uint64
	counts []int // AllToAllV receive counts with the fault applied
}

func (m *mismatchGroup) Do(ctx context.Context, c Collective) error {
	seq := m.seq
	m.seq++
	if seq == m.at {
		if c.Op == OpAllToAllV && len(c.RecvCounts) > 0 {
			m.counts = append(m.counts[:0], c.RecvCounts...)
			m.counts[(m.Rank()+1)%len(m.counts)] += m.delta
			c.RecvCounts = m.counts
		} else {
			c.Count += m.delta
		}
	}
	return m.Group.Do(ctx, c)
}
