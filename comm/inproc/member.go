package inproc

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/cpmla/cpmla/comm"
)

// member is one rank's handle on a group; it implements comm.Group.
type member struct {
	w     *world
	s     *shared
	rank  int // group rank
	seq   uint64
	timer *time.Timer
	meter *comm.Meter
	srcs  [][]byte // per-peer views for reductions, cleared after use
}

func newMember(w *world, s *shared, rank int) *member {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &member{w: w, s: s, rank: rank, timer: t, meter: comm.NewMeter(w.opts.TraceCapacity),
		srcs: make([][]byte, len(s.ranks))}
}

func (m *member) Name() string                                  { return m.s.name }
func (m *member) Rank() int                                     { return m.rank }
func (m *member) Size() int                                     { return len(m.s.ranks) }
func (m *member) Stats() comm.Stats                             { return m.meter.Stats() }
func (m *member) Trace(dst []comm.TraceEntry) []comm.TraceEntry { return m.meter.Trace(dst) }

// Split returns the sub-group made of the listed ranks of m's group.
func (m *member) Split(name string, members []int) (comm.Group, error) {
	key, ranks, self, err := comm.SplitMembers(m.s.name, m.s.ranks, m.rank, name, members)
	if err != nil {
		return nil, err
	}
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	s := m.w.groups[key]
	if s == nil {
		s = newShared(key, ranks)
		m.w.groups[key] = s
	}
	if s.claimed[self] {
		return nil, fmt.Errorf("group %s: world rank %d already holds a handle; split each group once per rank", key, ranks[self])
	}
	s.claimed[self] = true
	return newMember(m.w, s, self), nil
}

// Do runs one collective.
func (m *member) Do(ctx context.Context, c comm.Collective) error {
	start := time.Now()
	err := m.do(ctx, &c, start)
	m.meter.Done(&c, m.rank, len(m.s.ranks), time.Since(start), err == nil)
	return err
}

func (m *member) do(ctx context.Context, c *comm.Collective, start time.Time) error {
	if f := m.w.err.Load(); f != nil {
		return f.err
	}
	s := m.s
	seq := m.seq
	m.seq++
	m.meter.Enter(seq, c)
	s.records[m.rank] = c.Record(s.ranks[m.rank], seq)
	s.calls[m.rank] = *c
	s.argErr[m.rank] = c.Validate(m.rank, len(s.ranks))
	s.entered[m.rank].Store(seq + 1)
	if err := ctx.Err(); err != nil {
		return m.abort(seq, err)
	}

	if err := m.arrive(ctx, seq, start); err != nil {
		return err
	}
	// Every member that gets here sees the same records and reaches the
	// same verdict, so either all move data and finish, or none does.
	if err := comm.CheckLedger(s.name, s.records); err != nil {
		return m.w.fail(err)
	}
	for i, e := range s.argErr {
		if e != nil {
			return m.w.fail(fmt.Errorf("collective refused in group %s seq %d on rank %d: %w", s.name, seq, s.ranks[i], e))
		}
	}
	m.move(c)
	m.rendezvous()
	return nil
}

// arrive waits until every member has entered the collective. On a
// timeout, a cancelled ctx or a failed world it withdraws its arrival
// atomically, so that no member can complete the rendezvous without it,
// unless the rendezvous has completed already, in which case it proceeds.
func (m *member) arrive(ctx context.Context, seq uint64, start time.Time) error {
	s := m.s
	n := uint64(len(s.ranks))
	v := s.arrivals.Add(1)
	if v%n == 0 {
		m.wakeOthers()
		return nil
	}
	if m.spin() {
		return nil
	}
	target := (v + n - 1) / n * n
	var cause error
	m.timer.Reset(m.w.opts.Timeout - time.Since(start))
	select {
	case <-s.wake[m.rank]:
		m.timer.Stop()
		return nil
	case <-m.timer.C:
		cause = comm.ErrTimeout
	case <-ctx.Done():
		cause = ctx.Err()
	case <-m.w.failed:
	}
	m.timer.Stop()
	for {
		c := s.arrivals.Load()
		if c >= target { // completed after all: the wake token is on its way
			<-s.wake[m.rank]
			return nil
		}
		if s.arrivals.CompareAndSwap(c, c-1) {
			break
		}
	}
	if cause == nil {
		return m.w.err.Load().err
	}
	return m.abort(seq, cause)
}

// spinRounds is how many times a waiting member yields its processor and
// looks for its wake-up before it blocks: a rendezvous usually completes
// within a few scheduling rounds, and blocking costs more than that.
const spinRounds = 16

// spin polls for this member's wake-up for a few scheduling rounds.
func (m *member) spin() bool {
	for range spinRounds {
		select {
		case <-m.s.wake[m.rank]:
			return true
		default:
			runtime.Gosched()
		}
	}
	return false
}

// rendezvous waits until every member has reached the same point after
// arrive. Every member that completed arrive gets here after bounded
// copying work, so the wait needs no deadline of its own.
func (m *member) rendezvous() {
	s := m.s
	if s.arrivals.Add(1)%uint64(len(s.ranks)) == 0 {
		m.wakeOthers()
		return
	}
	if !m.spin() {
		<-s.wake[m.rank]
	}
}

func (m *member) wakeOthers() {
	for i, ch := range m.s.wake {
		if i != m.rank {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// abort poisons the world with an *comm.AbortError naming the members that
// had not entered collective seq, and returns the world's error.
func (m *member) abort(seq uint64, cause error) error {
	s := m.s
	e := &comm.AbortError{Group: s.name, Record: s.records[m.rank], Timeout: m.w.opts.Timeout, Cause: cause}
	e.Record.SendCounts = slices.Clone(e.Record.SendCounts)
	e.Record.RecvCounts = slices.Clone(e.Record.RecvCounts)
	for i := range s.ranks {
		if s.entered[i].Load() < seq+1 {
			e.Missing = append(e.Missing, s.ranks[i])
			e.LastSeq = append(e.LastSeq, int64(s.entered[i].Load())-1)
		}
	}
	return m.w.fail(e)
}
