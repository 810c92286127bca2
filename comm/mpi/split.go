//go:build mpi

package mpi

import (
	"bytes"
	"fmt"
	"time"

	"github.com/cpmla/cpmla/comm"
)

// Split returns the sub-group made of the listed ranks of m's group, as a
// new MPI communicator created by its members only.
func (m *member) Split(name string, members []int) (comm.Group, error) {
	key, ranks, self, err := comm.SplitMembers(m.name, m.ranks, m.rank, name, members)
	if err != nil {
		return nil, err
	}
	if len(key) >= splitKeyBytes {
		return nil, fmt.Errorf("group %s: name and member list take %d bytes, at most %d fit the split handshake; use a shorter name", name, len(key), splitKeyBytes-1)
	}
	p := m.p
	if f := p.failed.Load(); f != nil {
		return nil, f.err
	}
	if p.closing.Load() {
		return nil, errClosed
	}
	claim := m.name + "/" + key // a group may be split once from each parent
	p.mu.Lock()
	held := p.claimed[claim]
	p.mu.Unlock()
	if held {
		return nil, fmt.Errorf("group %s: world rank %d already holds a handle; split each group once per rank", key, ranks[self])
	}
	t := &splitTask{parent: m, key: key, members: members, self: self, deadline: time.Now().Add(p.opts.Timeout), done: make(chan struct{})}
	p.tasks <- t
	<-t.done
	if t.err != nil {
		return nil, t.err
	}
	p.mu.Lock()
	p.claimed[claim] = true
	p.mu.Unlock()
	return newMember(p, t.comm, key, ranks, self), nil
}

// splitTask is the Split handshake: every listed member sends the
// sub-group's key (name and world ranks) to every other listed member on the
// parent's communicator, and once all keys have arrived and agree, the
// members create the communicator. The handshake has the collective
// deadline; the creation only starts once every member is known to be
// there.
type splitTask struct {
	parent   *member
	key      string
	members  []int // parent-relative ranks
	self     int
	deadline time.Time
	started  bool
	reqs     *requests
	send     cbuf
	recv     cbuf
	recvReq  []int
	comm     commHandle
	err      error
	leaked   bool // MPI may still use the buffers
	done     chan struct{}
}

func (t *splitTask) poll(now time.Time) bool {
	m, p := t.parent, t.parent.p
	n := len(t.members)
	if !t.started {
		t.started = true
		t.reqs = newRequests(2 * n)
		t.send.grow(splitKeyBytes)
		copy(t.send.bytes(0, splitKeyBytes), t.key)
		t.recv.grow(splitKeyBytes * n)
		t.recvReq = make([]int, n)
		for i, r := range t.members {
			t.recvReq[i] = -1
			if i != t.self {
				t.recvReq[i] = t.reqs.n
				if err := irecv(t.recv.ptr(i*splitKeyBytes), splitKeyBytes, r, tagSplit, m.comm, t.reqs.next()); err != nil {
					return t.fail(err)
				}
			}
		}
		for i, r := range t.members {
			if i != t.self {
				if err := isend(t.send.p, splitKeyBytes, r, tagSplit, m.comm, t.reqs.next()); err != nil {
					return t.fail(err)
				}
			}
		}
	}
	done, err := t.reqs.poll(8, 20_000)
	if err != nil {
		return t.fail(err)
	}
	if !done {
		if f := p.failed.Load(); f != nil {
			return t.fail(f.err)
		}
		if !now.After(t.deadline) {
			return false
		}
		var missing []int
		for i, q := range t.recvReq {
			if q >= 0 && !t.reqs.completed(q) {
				missing = append(missing, m.ranks[t.members[i]])
			}
		}
		return t.fail(fmt.Errorf("world ranks %v did not split within %v; every listed member must call Split with the same name and members", missing, p.opts.Timeout))
	}
	for i := range t.members {
		if i == t.self {
			continue
		}
		b := t.recv.bytes(i*splitKeyBytes, splitKeyBytes)
		if k := bytes.IndexByte(b, 0); k >= 0 {
			b = b[:k]
		}
		if string(b) != t.key {
			t.err = fmt.Errorf("world rank %d asked for group %s in the same split; every listed member must split with the same name and members", m.ranks[t.members[i]], b)
			return t.end()
		}
	}
	c, rank, size, err := createGroup(m.comm, t.members, tagCreate)
	if err != nil {
		return t.fail(err)
	}
	if rank != t.self || size != n {
		t.err = fmt.Errorf("MPI made world rank %d member %d of %d, want %d of %d", m.ranks[m.rank], rank, size, t.self, n)
		return t.end()
	}
	t.comm = c
	return t.end()
}

// fail ends the handshake with MPI operations possibly pending: the world
// is poisoned and Close will abort the job.
func (t *splitTask) fail(err error) bool {
	p := t.parent.p
	p.pending.Add(1)
	t.leaked = true
	t.err = p.fail(fmt.Errorf("group %s: %w", t.key, err))
	return t.end()
}

func (t *splitTask) end() bool {
	if !t.leaked {
		t.send.free()
		t.recv.free()
		if t.reqs != nil {
			t.reqs.buf.free()
		}
	}
	close(t.done)
	return true
}
