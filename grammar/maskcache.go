package grammar

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"
)

// The mask of a state depends only on the states it can reach in its rule
// and the rules those call (a token that leaves the rule is left open), so
// it is the same in every grammar that contains the same sub-automaton:
// the content of a JSON string, a number, the free JSON value are in
// almost every schema's grammar, inside different rules. Masks are
// therefore cached per vocabulary under a structural key of the state: a
// hash of the states reachable from it within its rule (numbered breadth
// first), the rule's byte classes, and the rules they call (by the hash of
// their strongly connected component of the call graph).

type stateKey [16]byte

// maxKeyStates bounds the sub-automaton a state's key describes; a state
// that reaches more is keyed by its rule's key and its index in the rule.
const maxKeyStates = 64

// maskCache holds the masks computed for one vocabulary.
type maskCache struct {
	mu    sync.Mutex
	m     map[stateKey]*stateMask
	bytes int64
	limit int64
}

func (c *maskCache) get(k stateKey) *stateMask {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *maskCache) put(k stateKey, m *stateMask, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[stateKey]*stateMask{}
	}
	if _, ok := c.m[k]; ok {
		return
	}
	if c.bytes+size > c.limit {
		// Start over rather than track recency: grammars hold their own
		// masks, so dropping the cache only costs recomputation.
		clear(c.m)
		c.bytes = 0
	}
	c.m[k] = m
	c.bytes += size
}

// stateKeys computes the structural key of every state of a.
func (a *automaton) stateKeys() []stateKey {
	n := len(a.rules)
	// Tarjan's strongly connected components of the call graph; they come
	// out callees first.
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int32
	var comps [][]int32
	next := 0
	callees := func(r int32) []int32 {
		var out []int32
		ri := &a.rules[r]
		end := int32(len(a.states))
		if int(r)+1 < n {
			end = a.rules[r+1].start
		}
		for s := ri.start; s < end; s++ {
			for _, c := range a.callsOf(s) {
				if !slices.Contains(out, c.rule) {
					out = append(out, c.rule)
				}
			}
		}
		return out
	}
	var visit func(r int32)
	visit = func(r int32) {
		index[r], low[r] = next, next
		next++
		stack = append(stack, r)
		onStack[r] = true
		for _, c := range callees(r) {
			if index[c] < 0 {
				visit(c)
				low[r] = min(low[r], low[c])
			} else if onStack[c] {
				low[r] = min(low[r], index[c])
			}
		}
		if low[r] == index[r] {
			var comp []int32
			for {
				x := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[x] = false
				comp = append(comp, x)
				if x == r {
					break
				}
			}
			slices.Sort(comp)
			comps = append(comps, comp)
		}
	}
	for r := range n {
		if index[r] < 0 {
			visit(int32(r))
		}
	}
	type ruleRef struct {
		scc  [16]byte
		rule int
	}
	ruleKey := make([]ruleRef, n)
	var buf []byte
	put := func(v int64) { buf = binary.AppendVarint(buf, v) }
	ruleEnd := func(r int32) int32 {
		if int(r)+1 < n {
			return a.rules[r+1].start
		}
		return int32(len(a.states))
	}
	// serialize writes the states of rule r reachable from s, numbered
	// breadth first; calls of rules in comp are written by their index in
	// it (comp's hash must then be part of the key), others by their key.
	var order []int32
	num := map[int32]int64{}
	// serialize returns false (writing nothing more) when more than limit
	// states are reachable from s.
	serialize := func(r int32, s int32, comp []int32, limit int) (selfCalls, ok bool) {
		ri := &a.rules[r]
		order = append(order[:0], s)
		clear(num)
		num[s] = 0
		visit := func(t int32) {
			if _, ok := num[t]; !ok {
				num[t] = int64(len(order))
				order = append(order, t)
			}
		}
		for i := 0; i < len(order); i++ {
			if len(order) > limit {
				return false, false
			}
			st := &a.states[order[i]]
			if st.hasBytes {
				for _, t := range a.trans[st.trans : st.trans+ri.nclass] {
					if t >= 0 {
						visit(t)
					}
				}
			}
			for _, c := range a.callsOf(order[i]) {
				visit(c.next)
			}
		}
		put(int64(ri.nclass))
		buf = append(buf, ri.classMap[:]...)
		put(int64(len(order)))
		for _, x := range order {
			st := &a.states[x]
			flags := int64(0)
			if st.final {
				flags |= 1
			}
			if st.hasBytes {
				flags |= 2
			}
			put(flags)
			if st.hasBytes {
				for _, t := range a.trans[st.trans : st.trans+ri.nclass] {
					if t < 0 {
						put(-1)
					} else {
						put(num[t])
					}
				}
			}
			calls := a.callsOf(x)
			put(int64(len(calls)))
			for _, c := range calls {
				if l := slices.Index(comp, c.rule); l >= 0 {
					selfCalls = true
					put(0)
					put(int64(l))
				} else {
					buf = append(buf, 1)
					buf = append(buf, ruleKey[c.rule].scc[:]...)
					put(int64(ruleKey[c.rule].rule))
				}
				put(num[c.next])
			}
		}
		return selfCalls, true
	}
	for _, comp := range comps {
		buf = buf[:0]
		for _, r := range comp {
			serialize(r, a.rules[r].start, comp, len(a.states))
		}
		sum := sha256.Sum256(buf)
		var h [16]byte
		copy(h[:], sum[:16])
		for i, r := range comp {
			ruleKey[r] = ruleRef{scc: h, rule: i}
		}
	}
	keys := make([]stateKey, len(a.states))
	compOf := make([][]int32, n)
	for _, comp := range comps {
		for _, r := range comp {
			compOf[r] = comp
		}
	}
	for r := range n {
		for s := a.rules[r].start; s < ruleEnd(int32(r)); s++ {
			if !a.states[s].hasBytes {
				continue
			}
			buf = buf[:0]
			self, small := serialize(int32(r), s, compOf[r], maxKeyStates)
			if !small {
				// A large sub-automaton: keyed by its rule and place in it.
				buf = buf[:0]
				buf = append(buf, 2)
				buf = append(buf, ruleKey[r].scc[:]...)
				put(int64(ruleKey[r].rule))
				put(int64(s - a.rules[r].start))
			} else if self {
				rk := ruleKey[r]
				buf = append(buf, rk.scc[:]...)
				put(int64(rk.rule))
			}
			sum := sha256.Sum256(buf)
			copy(keys[s][:], sum[:16])
		}
	}
	return keys
}
