package grammar

// A parse position is a set of stacks. A stack is a chain of frames, each
// an automaton state; the top frame is where the next byte is read, the
// frames below are the states to return to when the rule above finishes.
// Frames are hash-consed nodes (state, parent) in a nodeStore, so equal
// stacks are equal node ids and a set of stacks is a sorted list of ids.
// Node 0 is the bottom: a stack whose top is node 0 has finished the root
// rule.

// nodeStore interns stack frames. It releases nodes last in, first out
// (release), which restores its hash table exactly because linear probing
// only ever fills the first free slot of a probe sequence.
type nodeStore struct {
	state  []int32
	parent []int32
	depth  []int32
	table  []int32 // node id + 1; 0 = free
	mask   uint32
	// top is the node of each state over the bottom (0: none yet), the
	// frames walks make most.
	top []int32
}

func newNodeStore(capacity, states int) *nodeStore {
	ns := &nodeStore{top: make([]int32, states)}
	ns.reset(capacity)
	return ns
}

func (ns *nodeStore) reset(capacity int) {
	size := 16
	for size < 2*capacity {
		size *= 2
	}
	if cap(ns.state) < capacity {
		ns.state = make([]int32, 0, capacity)
		ns.parent = make([]int32, 0, capacity)
		ns.depth = make([]int32, 0, capacity)
	}
	ns.state, ns.parent, ns.depth = ns.state[:0], ns.parent[:0], ns.depth[:0]
	if len(ns.table) < size {
		ns.table = make([]int32, size)
	} else {
		clear(ns.table)
	}
	ns.mask = uint32(len(ns.table) - 1)
	clear(ns.top)
	// The bottom.
	ns.state = append(ns.state, -1)
	ns.parent = append(ns.parent, -1)
	ns.depth = append(ns.depth, 0)
}

func frameHash(state, parent int32) uint32 {
	h := uint64(uint32(state))<<32 | uint64(uint32(parent))
	h *= 0x9e3779b97f4a7c15
	return uint32(h >> 32)
}

// intern returns the node of frame state over parent.
func (ns *nodeStore) intern(state, parent int32) int32 {
	if parent == 0 && int(state) < len(ns.top) {
		if n := ns.top[state]; n > 0 {
			return n
		}
	}
	i := frameHash(state, parent) & ns.mask
	for {
		e := ns.table[i]
		if e == 0 {
			break
		}
		n := e - 1
		if ns.state[n] == state && ns.parent[n] == parent {
			return n
		}
		i = (i + 1) & ns.mask
	}
	n := int32(len(ns.state))
	ns.state = append(ns.state, state)
	ns.parent = append(ns.parent, parent)
	ns.depth = append(ns.depth, ns.depth[parent]+1)
	ns.table[i] = n + 1
	if parent == 0 && int(state) < len(ns.top) {
		ns.top[state] = n
	}
	if uint32(len(ns.state))*2 > uint32(len(ns.table)) {
		ns.grow()
	}
	return n
}

// grow doubles the table, inserting the nodes in id order so that release
// stays exact.
func (ns *nodeStore) grow() {
	ns.table = make([]int32, 2*len(ns.table))
	ns.mask = uint32(len(ns.table) - 1)
	for n := 1; n < len(ns.state); n++ {
		i := frameHash(ns.state[n], ns.parent[n]) & ns.mask
		for ns.table[i] != 0 {
			i = (i + 1) & ns.mask
		}
		ns.table[i] = int32(n) + 1
	}
}

// mark is the current number of nodes, for release.
func (ns *nodeStore) mark() int32 { return int32(len(ns.state)) }

// release forgets every node created since mark m, newest first.
func (ns *nodeStore) release(m int32) {
	for n := int32(len(ns.state)) - 1; n >= m; n-- {
		i := frameHash(ns.state[n], ns.parent[n]) & ns.mask
		for ns.table[i] != n+1 {
			i = (i + 1) & ns.mask
		}
		ns.table[i] = 0
		if ns.parent[n] == 0 && int(ns.state[n]) < len(ns.top) {
			ns.top[ns.state[n]] = 0
		}
	}
	ns.state, ns.parent, ns.depth = ns.state[:m], ns.parent[:m], ns.depth[:m]
}

// stepper advances sets of stacks over bytes of one automaton. Its out
// list receives the stacks of the result whose top can read a byte; bottom
// reports that some stack finished the root rule.
type stepper struct {
	a        *automaton
	ns       *nodeStore
	seen     []uint32 // per node: the gen that expanded it
	gen      uint32
	out      []int32
	bottom   bool
	maxDepth int32
	tooDeep  bool
}

func (st *stepper) init(a *automaton, ns *nodeStore, maxDepth int) {
	st.a, st.ns, st.maxDepth = a, ns, int32(maxDepth)
}

// begin starts a new result set.
func (st *stepper) begin() {
	st.gen++
	if st.gen == 0 { // wrapped: forget every stamp
		clear(st.seen)
		st.gen = 1
	}
	st.out = st.out[:0]
	st.bottom = false
}

// expand adds the closure of frame (state over parent): the frame itself
// if it can read a byte, the starts of the rules it calls (over its return
// frames), and, if its state is final, the closure of its parent.
func (st *stepper) expand(state, parent int32) {
	n := st.ns.intern(state, parent)
	if int(n) >= len(st.seen) {
		grown := make([]uint32, 2*int(n)+64)
		copy(grown, st.seen)
		st.seen = grown
	}
	if st.seen[n] == st.gen {
		return
	}
	st.seen[n] = st.gen
	a := st.a
	s := &a.states[state]
	if s.hasBytes {
		st.out = append(st.out, n)
	}
	if s.callN > 0 {
		if st.ns.depth[parent]+1 >= st.maxDepth {
			st.tooDeep = true
		} else {
			for _, c := range a.calls[s.callOff : s.callOff+s.callN] {
				ret := st.ns.intern(c.next, parent)
				st.expand(a.rules[c.rule].start, ret)
			}
		}
	}
	if s.final {
		if parent == 0 {
			st.bottom = true
		} else {
			st.expand(st.ns.state[parent], st.ns.parent[parent])
		}
	}
}

// step reads byte b on every stack of src and leaves the result in out
// (sorted) and bottom.
func (st *stepper) step(src []int32, b byte) {
	a := st.a
	ns := st.ns
	if len(src) == 1 {
		// One stack moving inside its rule: no closure to compute.
		n := src[0]
		if t := a.next(ns.state[n], b); t >= 0 {
			if ts := &a.states[t]; ts.callN == 0 && !ts.final {
				st.out = append(st.out[:0], ns.intern(t, ns.parent[n]))
				st.bottom = false
				return
			}
		}
	}
	st.begin()
	for _, n := range src {
		t := a.next(ns.state[n], b)
		if t >= 0 {
			st.expand(t, ns.parent[n])
		}
	}
	sortSmall(st.out)
}

// sortSmall sorts a short list in place (insertion sort).
func sortSmall(x []int32) {
	for i := 1; i < len(x); i++ {
		v := x[i]
		j := i
		for j > 0 && x[j-1] > v {
			x[j] = x[j-1]
			j--
		}
		x[j] = v
	}
}
