//go:build mpi

package mpi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cpmla/cpmla/comm"
)

// Message tags on a group's communicator. Point-to-point traffic never
// interferes with the communicator's collectives.
const (
	tagLedger  = 1
	tagRefusal = 2
	tagSplit   = 3
	tagCreate  = 4
	tagData    = 5 // a collective's (first) data round
	tagChunks  = 6 // the all-gather round of a chunked AllReduce
)

const (
	// refusalBytes is the fixed size of a refusal message in the ledger's
	// second round; longer messages are cut.
	refusalBytes = 512
	// splitKeyBytes is the fixed size of a Split handshake message: the
	// sub-group's name with its world ranks.
	splitKeyBytes = 1024
	// smallAllReduceBytes: an AllReduce whose gathered contributions fit in
	// this many bytes all-gathers them and sums locally (one round); larger
	// ones reduce-scatter by all-to-all, sum one chunk each and all-gather
	// the chunks (two rounds). Each element is summed in group-rank order
	// either way.
	smallAllReduceBytes = 64 << 10
)

var errClosed = errors.New("mpi: the process has closed MPI; no collective can run after Close")

// member is one process's handle on a group; it implements comm.Group.
type member struct {
	p     *process
	comm  commHandle
	name  string
	ranks []int // world rank of each member
	rank  int   // group rank
	seq   uint64
	meter *comm.Meter

	words    int  // int64 words per ledger record
	sendRec  cbuf // this member's record
	recvRecs cbuf // every member's record, in group-rank order
	recs     []comm.Record
	counts   [][]int // decoded split counts, two per member
	lastSeq  []int64 // last sequence number received from each member (−1: none)
	reqs     *requests
	xfers    []transfer // what request i of the current round moves
	sendMsg  cbuf
	recvMsg  cbuf

	scratch cbuf // staging for reductions
	srcs    [][]byte
	offs    [2][]int // AllToAllV: byte offset of each member's part in Send, in Recv
	pin     runtime.Pinner
	task    collective
}

func newMember(p *process, c commHandle, name string, ranks []int, rank int) *member {
	n := len(ranks)
	m := &member{p: p, comm: c, name: name, ranks: ranks, rank: rank, meter: comm.NewMeter(p.opts.TraceCapacity),
		words: recordHeader + 2*n, recs: make([]comm.Record, n), counts: make([][]int, 2*n),
		lastSeq: make([]int64, n), reqs: newRequests(2 * n), xfers: make([]transfer, 0, 2*n), srcs: make([][]byte, n),
		offs: [2][]int{make([]int, n), make([]int, n)}}
	m.sendRec.grow(8 * m.words)
	m.recvRecs.grow(8 * m.words * n)
	m.sendMsg.grow(refusalBytes)
	m.recvMsg.grow(refusalBytes * n)
	for i := range m.counts {
		m.counts[i] = make([]int, n)
	}
	for i := range m.lastSeq {
		m.lastSeq[i] = -1
	}
	m.task.m = m
	m.task.done = make(chan struct{}, 1)
	return m
}

func (m *member) Name() string                                  { return m.name }
func (m *member) Rank() int                                     { return m.rank }
func (m *member) Size() int                                     { return len(m.ranks) }
func (m *member) Stats() comm.Stats                             { return m.meter.Stats() }
func (m *member) Trace(dst []comm.TraceEntry) []comm.TraceEntry { return m.meter.Trace(dst) }

// Do runs one collective: the caller hands the member's task to the MPI
// goroutine and waits for it, or for ctx, after which the task ends at its
// next poll with the context's error.
func (m *member) Do(ctx context.Context, c comm.Collective) error {
	start := time.Now()
	err := m.do(ctx, &c, start)
	m.meter.Done(&c, m.rank, len(m.ranks), time.Since(start), err == nil)
	return err
}

func (m *member) do(ctx context.Context, c *comm.Collective, start time.Time) error {
	if f := m.p.failed.Load(); f != nil {
		return f.err
	}
	if m.p.closing.Load() {
		return errClosed
	}
	seq := m.seq
	m.seq++
	m.meter.Enter(seq, c)
	t := &m.task
	t.c, t.seq, t.start, t.deadline = *c, seq, start, start.Add(m.p.opts.Timeout)
	t.stage, t.err, t.cause = stageLedger, nil, nil
	t.argErr = validate(c, m.rank, len(m.ranks))
	t.cancelled.Store(false)
	if err := ctx.Err(); err != nil {
		t.cause = err
		t.cancelled.Store(true)
	}
	m.p.tasks <- t
	select {
	case <-t.done:
	case <-ctx.Done():
		t.cause = ctx.Err()
		t.cancelled.Store(true)
		<-t.done
	}
	return t.err
}

// validate is comm's own shape check plus MPI's limit on one call's byte
// counts.
func validate(c *comm.Collective, rank, size int) error {
	if err := c.Validate(rank, size); err != nil {
		return err
	}
	if !fitsCInt(len(c.Send)) || !fitsCInt(len(c.Recv)) {
		return fmt.Errorf("%s: %d send and %d receive bytes exceed the %d-byte limit of one MPI call; split the collective into smaller ones",
			c.Op, len(c.Send), len(c.Recv), math.MaxInt32)
	}
	return nil
}

// Ledger record layout, in int64 words.
const (
	recordMagic  = 0x63706d6c61_0001 // "cpmla", version 1
	recordHeader = 10                // magic, rank, seq, op, dtype, count, root, flags, #send, #recv
	flagRefused  = 1
)

func (m *member) encode(t *collective) {
	w := m.sendRec.int64s(m.words)
	clear(w)
	c := &t.c
	w[0], w[1], w[2], w[3], w[4], w[5], w[6] = recordMagic, int64(m.ranks[m.rank]), int64(t.seq), int64(c.Op), int64(c.DType), int64(c.Count), int64(c.Root)
	if t.argErr != nil {
		w[7] = flagRefused
	}
	w[8], w[9] = int64(len(c.SendCounts)), int64(len(c.RecvCounts))
	n := len(m.ranks)
	for i, v := range c.SendCounts[:min(len(c.SendCounts), n)] {
		w[recordHeader+i] = int64(v)
	}
	for i, v := range c.RecvCounts[:min(len(c.RecvCounts), n)] {
		w[recordHeader+n+i] = int64(v)
	}
	copy(m.recvRecs.int64s(m.words * n)[m.rank*m.words:], w)
}

// decode turns the received records into m.recs and reports whether any
// member refused its own arguments.
func (m *member) decode() (refused bool, err error) {
	n := len(m.ranks)
	all := m.recvRecs.int64s(m.words * n)
	for j := range n {
		w := all[j*m.words : (j+1)*m.words]
		if w[0] != recordMagic || w[1] != int64(m.ranks[j]) {
			return false, fmt.Errorf("ledger record from world rank %d of group %s is not a cpmla record (magic %#x, rank %d); is every process the same cpmla build?", m.ranks[j], m.name, w[0], w[1])
		}
		r := comm.Record{Rank: int(w[1]), Seq: uint64(w[2]), Op: comm.Op(w[3]), DType: comm.DType(w[4]), Count: int(w[5]), Root: int(w[6])}
		r.SendCounts = m.splitCounts(m.counts[2*j], w[8], w[recordHeader:recordHeader+n])
		r.RecvCounts = m.splitCounts(m.counts[2*j+1], w[9], w[recordHeader+n:recordHeader+2*n])
		m.recs[j] = r
		m.lastSeq[j] = int64(r.Seq)
		refused = refused || w[7]&flagRefused != 0
	}
	return refused, nil
}

// splitCounts fills dst with the first k of the transmitted counts; a
// record carries at most one count per member, so a longer list is cut
// (its own member refuses it anyway).
func (m *member) splitCounts(dst []int, k int64, src []int64) []int {
	if k <= 0 {
		return nil
	}
	k = min(k, int64(len(src)))
	for i := range k {
		dst[i] = int(src[i])
	}
	return dst[:k]
}

// collective is one member's collective as a task of the MPI goroutine.
type collective struct {
	m               *member
	c               comm.Collective
	seq             uint64
	start, deadline time.Time
	stage           int
	argErr          error
	cancelled       atomic.Bool
	cause           error // set before cancelled
	err             error
	pinned          bool
	done            chan struct{}
}

const (
	stageLedger = iota
	stageLedgerWait
	stageRefusalWait
	stageDataWait
	stageAllGatherChunks
)

func (t *collective) poll(now time.Time) bool {
	m, p := t.m, t.m.p
	n := len(m.ranks)
	switch t.stage {
	case stageLedger:
		m.encode(t)
		m.newRound()
		for j := range n {
			if j != m.rank {
				if err := m.post(false, j, m.recvRecs.bytes(8*m.words*j, 8*m.words), tagLedger); err != nil {
					return t.failPending(err)
				}
			}
		}
		for j := range n {
			if j != m.rank {
				if err := m.post(true, j, m.sendRec.bytes(0, 8*m.words), tagLedger); err != nil {
					return t.failPending(err)
				}
			}
		}
		t.stage = stageLedgerWait
		fallthrough
	case stageLedgerWait:
		if done, err := t.wait(now); err != nil || !done {
			return t.stopWaiting(now, err)
		}
		refused, err := m.decode()
		if err != nil {
			return t.finish(p.fail(err))
		}
		// Every member decoded the same records, so every member reaches
		// the same verdict here: all move data, or none does.
		if err := comm.CheckLedger(m.name, m.recs); err != nil {
			return t.finish(p.fail(err))
		}
		if refused {
			return t.startRefusal()
		}
		return t.startData()
	case stageRefusalWait:
		if done, err := t.wait(now); err != nil || !done {
			return t.stopWaiting(now, err)
		}
		return t.finish(p.fail(t.refusal()))
	case stageDataWait:
		if done, err := t.wait(now); err != nil || !done {
			return t.stopWaiting(now, err)
		}
		return t.dataDone()
	case stageAllGatherChunks:
		if done, err := t.wait(now); err != nil || !done {
			return t.stopWaiting(now, err)
		}
		return t.finish(nil)
	}
	return t.finish(fmt.Errorf("mpi: collective in unknown stage %d", t.stage))
}

// wait polls the pending requests for a moment: a few quick yields while a
// collective is young, short sleeps once it has waited a while, so that
// idle ranks leave the processor to busy ones.
func (t *collective) wait(now time.Time) (bool, error) {
	spins, sleep := 32, int64(0)
	switch waited := now.Sub(t.start); {
	case waited > 10*time.Millisecond:
		spins, sleep = 2, 100_000
	case waited > 200*time.Microsecond:
		spins, sleep = 4, 10_000
	}
	return t.m.reqs.poll(spins, sleep)
}

// stopWaiting decides, for a collective whose requests are not complete,
// whether to keep waiting (false) or to end it: on an MPI error, a failed
// world, a cancelled context or a passed deadline.
func (t *collective) stopWaiting(now time.Time, err error) bool {
	p := t.m.p
	switch {
	case err != nil:
		return t.failPending(fmt.Errorf("%s seq %d in group %s: %w", t.c.Op, t.seq, t.m.name, err))
	case p.failed.Load() != nil:
		return t.failPending(nil)
	case t.cancelled.Load():
		return t.abort(t.cause)
	case now.After(t.deadline):
		return t.abort(comm.ErrTimeout)
	}
	return false
}

// abort ends the collective with an *comm.AbortError naming the peers
// whose transfers of the current round are still pending, each request
// tested on its own: in the ledger round the members whose records had not
// arrived (Missing); once they all had, the peers with which a transfer did
// not complete (Unfinished), with the transfers themselves. If every
// request completed after all, the round goes on.
func (t *collective) abort(cause error) bool {
	m := t.m
	pend := m.pending()
	if len(pend) == 0 {
		return false
	}
	e := &comm.AbortError{Group: m.name, Record: t.c.Record(m.ranks[m.rank], t.seq), Timeout: m.p.opts.Timeout, Cause: cause}
	e.Record.SendCounts = slices.Clone(e.Record.SendCounts)
	e.Record.RecvCounts = slices.Clone(e.Record.RecvCounts)
	if t.stage == stageLedgerWait {
		for _, x := range pend {
			if !x.send {
				e.Missing = append(e.Missing, m.ranks[x.peer])
				e.LastSeq = append(e.LastSeq, m.lastSeq[x.peer])
			}
		}
		if len(e.Missing) > 0 {
			return t.failPending(e)
		}
	}
	return t.failPending(stalled(e, t.round(), pend, m.ranks))
}

// failPending ends the collective with err (the world's error if nil)
// while MPI operations on its buffers may still be pending: the world is
// poisoned, the member's buffers stay pinned and reachable for good, and
// Close will have to abort the job.
func (t *collective) failPending(err error) bool {
	p := t.m.p
	p.pending.Add(1)
	p.mu.Lock()
	p.leaked = append(p.leaked, t.m)
	p.mu.Unlock()
	t.pinned = false // deliberately left pinned
	if err == nil {
		return t.finish(p.fail(errors.New("mpi: world failed")))
	}
	return t.finish(p.fail(err))
}

func (t *collective) finish(err error) bool {
	if t.pinned {
		t.m.pin.Unpin()
		t.pinned = false
	}
	t.err = err
	t.done <- struct{}{}
	return true
}

// startRefusal sends this member's refusal message (empty if it accepted
// its arguments) to every peer, so that every member can report the same
// refusal.
func (t *collective) startRefusal() bool {
	m := t.m
	n := len(m.ranks)
	msg := m.sendMsg.bytes(0, refusalBytes)
	clear(msg)
	if t.argErr != nil {
		copy(msg[:refusalBytes-1], t.argErr.Error())
	}
	copy(m.recvMsg.bytes(m.rank*refusalBytes, refusalBytes), msg)
	m.newRound()
	for j := range n {
		if j != m.rank {
			if err := m.post(false, j, m.recvMsg.bytes(j*refusalBytes, refusalBytes), tagRefusal); err != nil {
				return t.failPending(err)
			}
		}
	}
	for j := range n {
		if j != m.rank {
			if err := m.post(true, j, msg, tagRefusal); err != nil {
				return t.failPending(err)
			}
		}
	}
	t.stage = stageRefusalWait
	return false
}

// refusal is the error of the first member (in group order) that refused
// its arguments, the same text on every member.
func (t *collective) refusal() error {
	m := t.m
	all := m.recvRecs.int64s(m.words * len(m.ranks))
	for j := range m.ranks {
		if all[j*m.words+7]&flagRefused == 0 {
			continue
		}
		if j == m.rank {
			return fmt.Errorf("collective refused in group %s seq %d on rank %d: %w", m.name, t.seq, m.ranks[j], t.argErr)
		}
		b := m.recvMsg.bytes(j*refusalBytes, refusalBytes)
		if k := slices.Index(b, 0); k >= 0 {
			b = b[:k]
		}
		return fmt.Errorf("collective refused in group %s seq %d on rank %d: %s", m.name, t.seq, m.ranks[j], b)
	}
	return fmt.Errorf("collective refused in group %s seq %d", m.name, t.seq)
}

// chunk is the element range [lo, hi) of member r when n elements are
// split into p near-equal parts.
func chunk(n, p, r int) (lo, hi int) { return r * n / p, (r + 1) * n / p }

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// startData starts the data movement of a collective whose ledger agreed:
// one round of direct transfers with every peer (see exchange).
func (t *collective) startData() bool {
	m, c := t.m, &t.c
	n := len(m.ranks)
	es := c.DType.Size()
	if c.Op == comm.OpBarrier {
		return t.finish(nil) // the ledger exchange was the barrier
	}
	if len(c.Send) > 0 {
		m.pin.Pin(unsafe.SliceData(c.Send))
		t.pinned = true
	}
	if len(c.Recv) > 0 {
		m.pin.Pin(unsafe.SliceData(c.Recv))
		t.pinned = true
	}
	switch c.Op {
	case comm.OpReduceScatter:
		m.scratch.grow(len(c.Send))
	case comm.OpAllReduce:
		if nb := len(c.Send); nb*n <= smallAllReduceBytes {
			m.scratch.grow(nb * n)
		} else {
			lo, hi := chunk(c.Count, n, m.rank)
			m.scratch.grow((hi - lo) * es * n)
		}
	case comm.OpAllToAllV:
		so, ro := 0, 0
		for j := range n {
			m.offs[0][j], m.offs[1][j] = so, ro
			so += c.SendCounts[j] * es
			ro += c.RecvCounts[j] * es
		}
	}
	t.stage = stageDataWait
	if err := t.exchange(tagData); err != nil {
		return t.failPending(fmt.Errorf("%s seq %d in group %s: %w", c.Op, t.seq, m.name, err))
	}
	return false
}

// dataDone finishes a collective whose data round completed: reductions sum
// the staged contributions in group-rank order; a chunked AllReduce then
// all-gathers the summed chunks in a second round.
func (t *collective) dataDone() bool {
	m, c := t.m, &t.c
	n := len(m.ranks)
	es := c.DType.Size()
	switch c.Op {
	case comm.OpReduceScatter:
		t.sumStaged(c.Recv, len(c.Recv))
	case comm.OpAllReduce:
		nb := len(c.Send)
		if nb*n <= smallAllReduceBytes {
			t.sumStaged(c.Recv, nb)
			break
		}
		lo, hi := chunk(c.Count, n, m.rank)
		t.sumStaged(c.Recv[lo*es:hi*es], (hi-lo)*es)
		t.stage = stageAllGatherChunks
		if err := t.exchange(tagChunks); err != nil {
			return t.failPending(fmt.Errorf("%s seq %d in group %s: %w", c.Op, t.seq, m.name, err))
		}
		return false
	}
	return t.finish(nil)
}

// sumStaged writes into dst the rank-order sum of the n staged parts of
// size bytes each.
func (t *collective) sumStaged(dst []byte, size int) {
	m := t.m
	for j := range m.srcs {
		m.srcs[j] = m.scratch.bytes(j*size, size)
	}
	// Sizes follow from the validated collective, so the sum cannot fail.
	_ = comm.SumRankOrder(t.c.DType, dst, m.srcs)
	clear(m.srcs)
}
