package comm

import (
	"sync/atomic"
	"time"
)

// Stats are one member's counters for one group.
type Stats struct {
	Collectives uint64         // collectives completed
	PerOp       [NumOps]uint64 // completed, by op
	BytesSent   uint64         // Σ BytesSent over completed collectives
	Busy        time.Duration  // cumulative wall time inside collectives (completed or not)
	Traced      uint64         // trace entries recorded
	TraceDrop   uint64         // collectives not traced because the trace was full
}

// TraceEntry is one collective as a member issued it.
type TraceEntry struct {
	Seq   uint64
	Op    Op
	DType DType
	Count int
}

// Meter keeps a member's counters and optional trace for one group.
// Transports embed one per group member. Enter and Done are called by the
// member's own goroutine; Stats and Trace may be read from any goroutine.
// None of them allocate.
type Meter struct {
	perOp   [NumOps]atomic.Uint64
	bytes   atomic.Uint64
	busy    atomic.Int64
	trace   []TraceEntry // fixed capacity, written once per entry
	traced  atomic.Uint64
	dropped atomic.Uint64
}

// NewMeter returns a Meter whose trace keeps the first traceCapacity
// collectives (0 disables tracing).
func NewMeter(traceCapacity int) *Meter {
	return &Meter{trace: make([]TraceEntry, max(traceCapacity, 0))}
}

// Enter records that the member entered collective c with sequence number
// seq.
func (m *Meter) Enter(seq uint64, c *Collective) {
	n := m.traced.Load()
	if n >= uint64(len(m.trace)) {
		if len(m.trace) > 0 {
			m.dropped.Add(1)
		}
		return
	}
	m.trace[n] = TraceEntry{Seq: seq, Op: c.Op, DType: c.DType, Count: c.Count}
	m.traced.Store(n + 1)
}

// Done records time spent in c and, if ok, counts c and its bytes sent.
func (m *Meter) Done(c *Collective, rank, size int, spent time.Duration, ok bool) {
	m.busy.Add(int64(spent))
	if !ok || c.Op >= NumOps {
		return
	}
	m.perOp[c.Op].Add(1)
	m.bytes.Add(uint64(BytesSent(c, rank, size)))
}

// Stats returns a snapshot of the counters.
func (m *Meter) Stats() Stats {
	var s Stats
	for i := range m.perOp {
		s.PerOp[i] = m.perOp[i].Load()
		s.Collectives += s.PerOp[i]
	}
	s.BytesSent = m.bytes.Load()
	s.Busy = time.Duration(m.busy.Load())
	s.Traced = m.traced.Load()
	s.TraceDrop = m.dropped.Load()
	return s
}

// Trace appends the recorded entries to dst.
func (m *Meter) Trace(dst []TraceEntry) []TraceEntry {
	return append(dst, m.trace[:m.traced.Load()]...)
}
