package grammar

import "time"

// walker runs sets of stacks down the vocabulary trie: every trie node is
// one byte read from its parent's set, and a subtree whose set dies is
// skipped whole. It serves both the compile-time masks of single states
// (mode precompute) and the per-step check of the tokens those masks left
// open (mode check).
type walker struct {
	v  *Vocab
	st *stepper
	ns *nodeStore

	// Level d holds the set after the first d bytes of the current path:
	// arena[lvlStart[d]:lvlEnd[d]]. lvlMark[d] is the node mark taken when
	// level d-1 was pushed (nodes made since belong to deeper levels).
	// lvlEsc[d]: the path escaped the walked state's rule at some byte ≤ d.
	arena    []int32
	lvlStart []int32
	lvlEnd   []int32
	lvlMark  []int32
	lvlEsc   []bool

	precompute bool
	// minLen > 0 (precompute): only tokens of at least minLen bytes count;
	// subtrees without one are skipped.
	minLen int
	// precompute results: tokens accepted whatever the stack below the
	// walked state holds, and trie ranges [lo, hi) whose tokens depend on it.
	accepted []int32
	open     []int32
	// check results are set in mask.
	mask []uint64

	steps    int64
	budget   int64
	deadline time.Time
	over     bool
}

func newWalker(v *Vocab, st *stepper) *walker {
	n := v.maxLen + 2
	return &walker{v: v, st: st, ns: st.ns, lvlStart: make([]int32, n), lvlEnd: make([]int32, n),
		lvlMark: make([]int32, n+1), lvlEsc: make([]bool, n+1), arena: make([]int32, 0, 256)}
}

// setRoot makes set level 0.
func (w *walker) setRoot(set []int32) {
	w.arena = append(w.arena[:0], set...)
	w.lvlStart[0], w.lvlEnd[0] = 0, int32(len(set))
	w.lvlEsc[0] = false
	w.lvlMark[1] = w.ns.mark()
}

func (w *walker) level(d int) []int32 { return w.arena[w.lvlStart[d]:w.lvlEnd[d]] }

// push makes the stepper's result level d.
func (w *walker) push(d int, esc bool) {
	start := w.lvlEnd[d-1]
	w.arena = append(w.arena[:start], w.st.out...)
	w.lvlStart[d], w.lvlEnd[d] = start, int32(len(w.arena))
	w.lvlEsc[d] = esc
	w.lvlMark[d+1] = w.ns.mark()
}

// subtree walks trie nodes lo … hi-1 (a run of whole subtrees whose roots
// have depth base+1), levels 0 … base being set.
func (w *walker) subtree(lo, hi int32) {
	v := w.v
	i := lo
	for i < hi {
		if w.precompute {
			w.steps++
			if w.steps&0xffff == 0 && (w.steps > w.budget || time.Now().After(w.deadline)) {
				w.over = true
				return
			}
		}
		d := int(v.trieDepth[i])
		if w.minLen > 0 && int(v.trieMax[i]) < w.minLen {
			i = v.trieEnd[i]
			continue
		}
		w.ns.release(w.lvlMark[d])
		w.st.step(w.level(d-1), v.trieByte[i])
		alive := len(w.st.out) > 0
		end := w.st.bottom
		if w.precompute {
			before := w.lvlEsc[d-1]
			if !alive && !end {
				if before {
					w.open = append(w.open, i, v.trieEnd[i])
				}
				i = v.trieEnd[i]
				continue
			}
			if d >= w.minLen {
				w.accepted = append(w.accepted, v.nodeTokens(i)...)
			}
			if !alive {
				if v.trieEnd[i] > i+1 {
					w.open = append(w.open, i+1, v.trieEnd[i])
				}
				i = v.trieEnd[i]
				continue
			}
			w.push(d, before || end)
			i++
			continue
		}
		if !alive && !end {
			i = v.trieEnd[i]
			continue
		}
		for _, t := range v.nodeTokens(i) {
			w.mask[t>>6] |= 1 << (t & 63)
		}
		if !alive {
			i = v.trieEnd[i]
			continue
		}
		w.push(d, false)
		i++
	}
}

// prefix makes levels 1 … len(p) the sets after the bytes of p, keeping
// the levels of the first keep bytes (which must equal the previous
// prefix's). It returns the number of levels now valid: len(p), or fewer
// when a byte of p cannot be read.
func (w *walker) prefix(p []byte, keep int) int {
	for d := keep + 1; d <= len(p); d++ {
		w.ns.release(w.lvlMark[d])
		w.st.step(w.level(d-1), p[d-1])
		if len(w.st.out) == 0 {
			return d - 1
		}
		w.push(d, false)
	}
	return len(p)
}
