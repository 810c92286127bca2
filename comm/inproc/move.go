package inproc

import "github.com/cpmla/cpmla/comm"

// move fills this member's receive buffer from the peers' published send
// buffers. The ledger has agreed and every buffer has been validated.
func (m *member) move(c *comm.Collective) {
	s := m.s
	p := len(s.ranks)
	r := m.rank
	es := c.DType.Size()
	switch c.Op {
	case comm.OpAllGather:
		nb := c.Count * es
		for j := range p {
			copy(c.Recv[j*nb:(j+1)*nb], s.calls[j].Send)
		}
	case comm.OpReduceScatter:
		nb := c.Count / p * es
		m.sum(c.DType, c.Recv, r*nb)
	case comm.OpAllReduce:
		m.sum(c.DType, c.Recv, 0)
	case comm.OpAllToAll:
		nb := c.Count / p * es
		for j := range p {
			copy(c.Recv[j*nb:(j+1)*nb], s.calls[j].Send[r*nb:(r+1)*nb])
		}
	case comm.OpAllToAllV:
		off := 0
		for j := range p {
			peer := &s.calls[j]
			from := 0
			for k := range r {
				from += peer.SendCounts[k]
			}
			nb := c.RecvCounts[j] * es
			copy(c.Recv[off:off+nb], peer.Send[from*es:from*es+nb])
			off += nb
		}
	case comm.OpBroadcast:
		if r != c.Root {
			copy(c.Recv, s.calls[c.Root].Send)
		}
	}
}

// sum writes Σ_j Send_j[off : off+len(dst)] into dst, adding the members'
// contributions in group-rank order so that every member computes
// bit-identical sums.
func (m *member) sum(dt comm.DType, dst []byte, off int) {
	calls := m.s.calls
	copy(dst, calls[0].Send[off:off+len(dst)])
	for j := 1; j < len(calls); j++ {
		// Lengths were validated, so AddInto cannot fail here.
		_ = comm.AddInto(dt, dst, calls[j].Send[off:off+len(dst)])
	}
}
