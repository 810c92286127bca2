package model

import (
	"fmt"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/kernels"
)

// expertDispatch is the part of a MoE block that exists only when expert
// parallelism spreads the experts over more than one PCP rank: the routing
// gathered over the PCP group, the rows sent to and received from each
// peer, the partial sums sent back, and the rows every PCP rank holds,
// whose experts run where they are and are summed over the group. Its
// buffers are sized once, for the worst step.
type expertDispatch struct {
	allIdx                 []int32   // [P, T, K]
	allW                   []float32 // [P, T, K]
	recvIdx                []int32   // [P·T, K] routing of the received rows
	recvW                  []float32
	sendRows               []int32 // local rows sent, peer by peer
	sendCounts, recvCounts []int   // floats per peer
	send, recv, acc, back  []float32
	// rows every PCP rank holds (decodes): computed where they are, summed
	// over the PCP group
	replIdx                    []int32
	replAcc, replPack, replSum []float32
}

// size makes the buffers for P PCP ranks of at most T rows each, K experts
// a row and rows of D values.
func (x *expertDispatch) size(P, T, K, D int, bufs *bufferList) {
	f, i32 := bufs.f32, bufs.i32
	x.allIdx, x.allW = i32("routing gather", P*T*K), f("routing weight gather", P*T*K)
	x.recvIdx, x.recvW = i32("received routing", P*T*K), f("received routing weights", P*T*K)
	x.sendRows = i32("dispatched rows", P*T)
	x.sendCounts, x.recvCounts = make([]int, P), make([]int, P)
	x.send, x.recv = f("expert dispatch send", P*T*D), f("expert dispatch recv", P*T*D)
	x.acc, x.back = f("expert partial sums", P*T*D), f("expert combine recv", P*T*D)
	x.replIdx = i32("replicated row routing", T*K)
	x.replAcc, x.replPack, x.replSum = f("replicated row experts", T*D), f("replicated row pack", T*D), f("replicated row sum", T*D)
}

// owner is the world rank holding global expert e under expert parallelism.
func (b *moeBlock) owner(e int32) int { return int(e) / b.perRank }

// exchange runs the routed experts of the local rows when they live on other
// PCP ranks. Rows of a split prefill are dispatched: the routing is
// all-gathered over the PCP group; each rank sends to every PCP peer (its TP
// peer index) the rows of its block that route to that peer's experts,
// computes its experts over the rows it received, and sends the partial sums
// back; a row's partials add in PCP rank order. Rows every PCP rank holds
// (decodes) are not sent: each rank computes its own experts over them and
// the partials are all-reduced over the PCP group, so every expert runs once
// per row. The TP all-reduce that follows adds the experts held by the other
// TP ranks.
func (b *moeBlock) exchange(li int, L *MoE, x, out []float32) error {
	s, ctx, g := b.steps, b.par.ctx(), b.par.Groups.PCP
	M, K, D := s.nLocal, b.K, b.D
	P, TP := s.pcp(), b.par.Layout.TP
	tp, me := b.m.Shard.TPRank, b.par.Groups.World.Rank()
	replicated := func(br int32) bool { return br >= 0 && !s.partPrefill[s.rowSeq[br]] }
	allIdx, allW := b.dispatch.allIdx[:P*M*K], b.dispatch.allW[:P*M*K]
	if err := comm.AllGather(ctx, g, allIdx, b.idx[:M*K]); err != nil {
		return fmt.Errorf("expert routing gather: %w", err)
	}
	if err := comm.AllGather(ctx, g, allW, b.w[:M*K]); err != nil {
		return fmt.Errorf("expert routing weight gather: %w", err)
	}
	routesTo := func(idx []int32, rank int) bool {
		for _, e := range idx {
			if e >= 0 && b.owner(e) == rank {
				return true
			}
		}
		return false
	}
	// Rows this rank sends: to peer p, the rows of its block routed to the
	// experts of world rank p·TP + tp.
	nsend := 0
	for p := 0; p < P; p++ {
		c := 0
		for t := 0; t < M; t++ {
			if !replicated(s.lrow[t]) && routesTo(b.idx[t*K:(t+1)*K], p*TP+tp) {
				copy(b.dispatch.send[nsend*D:(nsend+1)*D], x[t*D:(t+1)*D])
				b.dispatch.sendRows[nsend] = int32(t)
				nsend++
				c++
			}
		}
		b.dispatch.sendCounts[p] = c * D
	}
	// Rows it receives: from peer p, the rows of p's block routed to its own
	// experts, in the order p sends them.
	nrecv := 0
	for p := 0; p < P; p++ {
		c := 0
		for t, br := range s.part.Tokens(p)[:M] {
			ri := allIdx[(p*M+t)*K : (p*M+t+1)*K]
			if !replicated(br) && routesTo(ri, me) {
				copy(b.dispatch.recvIdx[nrecv*K:(nrecv+1)*K], ri)
				copy(b.dispatch.recvW[nrecv*K:(nrecv+1)*K], allW[(p*M+t)*K:(p*M+t+1)*K])
				nrecv++
				c++
			}
		}
		b.dispatch.recvCounts[p] = c * D
	}
	recv := b.dispatch.recv[:nrecv*D]
	if err := comm.AllToAllV(ctx, g, recv, b.dispatch.send[:nsend*D], b.dispatch.sendCounts, b.dispatch.recvCounts); err != nil {
		return fmt.Errorf("expert dispatch: %w", err)
	}
	acc := b.dispatch.acc[:nrecv*D]
	clear(acc)
	b.runExperts(li, L, recv, nrecv, b.dispatch.recvIdx, b.dispatch.recvW, acc)
	back := b.dispatch.back[:nsend*D]
	if err := comm.AllToAllV(ctx, g, back, acc, b.dispatch.recvCounts, b.dispatch.sendCounts); err != nil {
		return fmt.Errorf("expert combine: %w", err)
	}
	for i, t := range b.dispatch.sendRows[:nsend] {
		kernels.Axpy(1, back[i*D:(i+1)*D], out[int(t)*D:(int(t)+1)*D])
	}
	return b.replicatedRows(li, L, x, out, replicated)
}

// replicatedRows adds to out the routed experts of the rows every PCP rank
// holds: each rank computes its own experts over them, and the partials are
// all-reduced over the PCP group (every rank holds the same such rows in the
// same order, so the count agrees).
func (b *moeBlock) replicatedRows(li int, L *MoE, x, out []float32, replicated func(int32) bool) error {
	s, K, D := b.steps, b.K, b.D
	M := s.nLocal
	n := 0
	for t := 0; t < M; t++ {
		ri := b.dispatch.replIdx[t*K : (t+1)*K]
		if replicated(s.lrow[t]) {
			copy(ri, b.idx[t*K:(t+1)*K])
			n++
		} else {
			for k := range ri {
				ri[k] = -1
			}
		}
	}
	if n == 0 {
		return nil
	}
	acc := b.dispatch.replAcc[:M*D]
	clear(acc)
	b.runExperts(li, L, x, M, b.dispatch.replIdx, b.w, acc)
	pack, sum := b.dispatch.replPack[:n*D], b.dispatch.replSum[:n*D]
	i := 0
	for t := 0; t < M; t++ {
		if replicated(s.lrow[t]) {
			copy(pack[i*D:(i+1)*D], acc[t*D:(t+1)*D])
			i++
		}
	}
	if err := comm.AllReduce(b.par.ctx(), b.par.Groups.PCP, sum, pack); err != nil {
		return fmt.Errorf("replicated-row expert all-reduce: %w", err)
	}
	i = 0
	for t := 0; t < M; t++ {
		if replicated(s.lrow[t]) {
			kernels.Axpy(1, sum[i*D:(i+1)*D], out[t*D:(t+1)*D])
			i++
		}
	}
	return nil
}
