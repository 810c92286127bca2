package inproc

import "github.com/cpmla/cpmla/comm"

// chunkedAllReduceMin is the element count from which AllReduce splits the
// summation among the members (each sums one 1/P chunk, then copies the
// others' chunks) at the price of one more rendezvous. Every element is
// summed in group-rank order either way, so the bits do not depend on it.
const chunkedAllReduceMin = 4096

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
		if c.Count < chunkedAllReduceMin || p == 1 {
			m.sum(c.DType, c.Recv, 0)
			return
		}
		lo, hi := chunk(c.Count, p, r)
		m.sum(c.DType, c.Recv[lo*es:hi*es], lo*es)
		m.rendezvous()
		for j := range p {
			if j != r {
				lo, hi := chunk(c.Count, p, j)
				copy(c.Recv[lo*es:hi*es], s.calls[j].Recv[lo*es:hi*es])
			}
		}
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

// chunk is the element range [lo, hi) of member r when n elements are
// split into p near-equal parts.
func chunk(n, p, r int) (lo, hi int) { return r * n / p, (r + 1) * n / p }

// sum writes Σ_j Send_j[off : off+len(dst)] into dst, adding the members'
// contributions in group-rank order so that every member computes
// bit-identical sums.
func (m *member) sum(dt comm.DType, dst []byte, off int) {
	for j := range m.s.calls {
		m.srcs[j] = m.s.calls[j].Send[off : off+len(dst)]
	}
	// Lengths were validated and the receive buffer overlaps no send
	// buffer, so SumRankOrder cannot fail here.
	_ = comm.SumRankOrder(dt, dst, m.srcs)
	clear(m.srcs)
}
