package grammar

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// Grammar is a compiled constraint over one vocabulary: the automaton and,
// for every state a parse can stand in, the tokens it allows. It is
// immutable and shared by every matcher (and every request) that uses it.
type Grammar struct {
	a     *automaton
	v     *Vocab
	lim   Limits
	masks []*stateMask // by state; set for a.reachable, shared through the vocabulary's cache
	stats Stats
}

// stateMask is what one state allows, whatever the stack below it holds:
// the tokens it accepts (a bitset when many, else a sorted list), and the
// trie ranges of tokens that leave the state's rule before they end, which
// only the whole stack can decide.
type stateMask struct {
	dense  []uint64
	sparse []int32
	open   []int32 // pairs lo, hi of trie node ranges
}

// Stats describe a compiled grammar and what compiling it cost.
type Stats struct {
	Rules, States, ReachableStates int
	// MaskSteps is the number of parser steps spent on the token masks.
	MaskSteps int64
	// MaskBytes is the memory of the token masks computed for this
	// grammar.
	MaskBytes int64
	// OpenTokens counts the tokens, over the states computed, left for
	// the per-step check.
	OpenTokens int64
	// CachedStates are the states whose masks came from the vocabulary's
	// cache (computed for an earlier grammar with the same rules);
	// SharedStates took an equivalent state's mask whole,
	// PartlySharedStates its short tokens.
	CachedStates, SharedStates, PartlySharedStates int
	// CompileTime is the wall time of the whole compilation.
	CompileTime time.Duration
}

// Stats reports the grammar's size and compile cost.
func (g *Grammar) Stats() Stats { return g.stats }

// Vocab is the vocabulary the grammar was compiled for.
func (g *Grammar) Vocab() *Vocab { return g.v }

// newGrammar computes the masks of every reachable state of a.
//
// States of a counted repetition (maxLength, {m,n}) are many and walk the
// same tokens: two states that no byte string of up to k bytes tells apart
// (k-equivalent, the k-th level of Moore's refinement) accept the same
// tokens of up to k bytes, and leave the same ones open. A state with a
// k-equivalent donor computed before it takes the donor's tokens of up to k
// bytes and walks only the longer ones; with k at least the longest token
// it takes the donor's mask whole. A donor's open ranges may hold tokens
// the state accepts or refuses outright: open tokens are checked against
// the whole stack at run time, so a superset is exact.
func newGrammar(a *automaton, v *Vocab, lim Limits, start time.Time) (*Grammar, error) {
	g := &Grammar{a: a, v: v, lim: lim, masks: make([]*stateMask, len(a.states))}
	keys := a.stateKeys()
	levels := a.equivalenceLevels(v.maxLen)
	// Levels past the partition's fixed point repeat it: donors are kept
	// per distinct level (donors[l][class] is the first state of that class
	// whose mask was computed, or -1), and a match at the last distinct
	// level is a match at every deeper one.
	distinct := 1
	for distinct < len(levels) && &levels[distinct][0] != &levels[distinct-1][0] {
		distinct++
	}
	donors := make([][]int32, distinct)
	for l := range donors {
		donors[l] = make([]int32, len(a.states))
		for i := range donors[l] {
			donors[l][i] = -1
		}
	}
	ns := newNodeStore(1024, len(a.states))
	st := &stepper{}
	st.init(a, ns, lim.MaxStackDepth)
	w := newWalker(v, st)
	w.precompute = true
	w.budget = lim.MaxMaskSteps
	w.deadline = start.Add(lim.MaxCompileTime)
	var bytes int64
	register := func(s int32) {
		for l := range donors {
			if c := levels[l][s]; donors[l][c] < 0 {
				donors[l][c] = s
			}
		}
	}
	for n, s := range a.reachable {
		if m := v.cache.get(keys[s]); m != nil {
			g.masks[s] = m
			g.stats.CachedStates++
			register(s)
			continue
		}
		// The deepest level at which an earlier state is equivalent.
		k, donor := -1, int32(-1)
		for l := distinct - 1; l >= 0; l-- {
			if d := donors[l][levels[l][s]]; d >= 0 {
				k, donor = l, d
				if l == distinct-1 {
					k = len(levels) - 1
				}
				break
			}
		}
		if donor >= 0 && k >= v.maxLen {
			g.masks[s] = g.masks[donor]
			g.stats.SharedStates++
			register(s)
			continue
		}
		ns.release(1)
		root := ns.intern(s, 0)
		w.setRoot([]int32{root})
		w.accepted, w.open = w.accepted[:0], w.open[:0]
		w.minLen = 0
		if donor >= 0 {
			w.minLen = k + 1
		}
		w.subtree(0, int32(len(v.trieByte)))
		if w.over {
			if w.steps > w.budget {
				return nil, limitError("MaxMaskSteps", "computing the token masks of this constraint takes more than %d parser steps (the limit, reached at state %d of %d); simplify the constraint", w.budget, n, len(a.reachable))
			}
			return nil, limitError("MaxCompileTime", "compiling this constraint takes longer than %v (the limit); simplify the constraint", lim.MaxCompileTime)
		}
		if donor >= 0 {
			dm := g.masks[donor]
			w.accepted = dm.appendTokens(w.accepted, v, k)
			w.open = append(w.open, dm.open...)
			g.stats.PartlySharedStates++
		}
		m := &stateMask{}
		size := int64(0)
		if len(w.accepted)*32 > v.size {
			m.dense = make([]uint64, v.words)
			for _, t := range w.accepted {
				m.dense[t>>6] |= 1 << (t & 63)
			}
			size += int64(8 * v.words)
		} else {
			m.sparse = slices.Clone(w.accepted)
			slices.Sort(m.sparse)
			m.sparse = slices.Compact(m.sparse)
			size += int64(4 * len(m.sparse))
		}
		m.open = slices.Clone(w.open)
		size += int64(4*len(m.open)) + 64
		bytes += size
		g.masks[s] = m
		v.cache.put(keys[s], m, size)
		register(s)
		for k := 0; k < len(m.open); k += 2 {
			lo, hi := m.open[k], m.open[k+1]
			g.stats.OpenTokens += int64(v.trieTokOff[hi] - v.trieTokOff[lo])
		}
		if bytes > lim.MaxMaskBytes {
			return nil, limitError("MaxMaskBytes", "the token masks of this constraint take more than %d bytes (the limit); simplify the constraint", lim.MaxMaskBytes)
		}
	}
	g.stats.Rules, g.stats.States, g.stats.ReachableStates = len(a.rules), len(a.states), len(a.reachable)
	g.stats.MaskSteps, g.stats.MaskBytes = w.steps, bytes
	g.stats.CompileTime = time.Since(start)
	return g, nil
}

// appendTokens appends the tokens m accepts that have at most k bytes.
func (m *stateMask) appendTokens(dst []int32, v *Vocab, k int) []int32 {
	short := func(t int32) bool { return int(v.off[t+1]-v.off[t]) <= k }
	if m.dense != nil {
		for i, w := range m.dense {
			for w != 0 {
				t := int32(i*64 + bits.TrailingZeros64(w))
				w &= w - 1
				if short(t) {
					dst = append(dst, t)
				}
			}
		}
		return dst
	}
	for _, t := range m.sparse {
		if short(t) {
			dst = append(dst, t)
		}
	}
	return dst
}

// equivalenceLevels returns, for k = 0 … maxK (or until the partition
// stops changing), the class of every state under k-equivalence: states
// of one rule that agree on being final, on their calls (callee and exact
// return state) and, for k > 0, on the (k-1)-classes their bytes lead to.
func (a *automaton) equivalenceLevels(maxK int) [][]int32 {
	n := len(a.states)
	var levels [][]int32
	cur := make([]int32, n)
	var buf []byte
	count := -1
	for k := 0; k <= maxK; k++ {
		next := make([]int32, n)
		index := map[string]int32{}
		for s := range n {
			st := &a.states[s]
			buf = binary.AppendVarint(buf[:0], int64(st.rule))
			if k > 0 {
				buf = binary.AppendVarint(buf, int64(cur[s]))
			}
			if st.final {
				buf = append(buf, 1)
			} else {
				buf = append(buf, 0)
			}
			for _, c := range a.callsOf(int32(s)) {
				buf = binary.AppendVarint(buf, int64(c.rule))
				buf = binary.AppendVarint(buf, int64(c.next))
			}
			if k > 0 && st.hasBytes {
				for _, t := range a.trans[st.trans : st.trans+a.rules[st.rule].nclass] {
					if t < 0 {
						buf = binary.AppendVarint(buf, -1)
					} else {
						buf = binary.AppendVarint(buf, int64(cur[t]))
					}
				}
			} else if k > 0 {
				buf = append(buf, 0xff)
			}
			key := string(buf)
			c, ok := index[key]
			if !ok {
				c = int32(len(index))
				index[key] = c
			}
			next[s] = c
		}
		levels = append(levels, next)
		cur = next
		if len(index) == count {
			// Stable: every deeper level is the same partition.
			for len(levels) <= maxK {
				levels = append(levels, next)
			}
			break
		}
		count = len(index)
	}
	return levels
}

// MatcherOptions configure one sequence's matcher.
type MatcherOptions struct {
	// EndTokens are the ids that end the sequence (the model's EOS and the
	// request's stop ids); they are allowed exactly where the grammar may
	// end.
	EndTokens []int
	// MaxTokens sizes the matcher's history for the tokens it will accept
	// (it grows past it if needed).
	MaxTokens int
}

// NewMatcher returns a matcher at the start of the grammar.
func (g *Grammar) NewMatcher(opt MatcherOptions) (*Matcher, error) {
	m := &Matcher{g: g}
	for _, t := range opt.EndTokens {
		if t < 0 || t >= g.v.size {
			return nil, fmt.Errorf("grammar: end token %d is outside the vocabulary [0, %d)", t, g.v.size)
		}
		if !slices.Contains(m.end, int32(t)) {
			m.end = append(m.end, int32(t))
		}
	}
	m.ns = newNodeStore(1024, len(g.a.states))
	m.st.init(g.a, m.ns, g.lim.MaxStackDepth)
	// Sized for the sequences a grammar usually sees, so that steps do not
	// grow them.
	m.st.seen = make([]uint32, 2048)
	m.st.out = make([]int32, 0, 64)
	m.tmp = make([]int32, 0, 64)
	m.maskFor = make([]int32, 0, 64)
	m.ranges = make([]int32, 0, 512)
	m.w = newWalker(g.v, &m.st)
	m.w.arena = make([]int32, 0, 4096)
	m.prefix = make([]byte, 0, g.v.maxLen)
	m.w.mask = make([]uint64, g.v.words)
	m.mask = m.w.mask
	n := max(opt.MaxTokens, 16) + 1
	m.histOff = make([]int32, 0, n)
	m.histBottom = make([]bool, 0, n)
	m.histMark = make([]int32, 0, n)
	m.histSets = make([]int32, 0, 4*n)
	m.Reset()
	return m, nil
}
