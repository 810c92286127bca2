package grammar

import (
	"fmt"
	"slices"
)

// Matcher follows one sequence through a grammar: it accepts the tokens
// the sequence generates, fills the mask of the tokens allowed next, and
// rolls back tokens a speculative step did not keep. A Matcher belongs to
// one sequence and is not safe for concurrent use; after NewMatcher and the
// first tokens have grown its buffers, Accept, FillMask and Rollback
// allocate nothing.
type Matcher struct {
	g   *Grammar
	ns  *nodeStore
	st  stepper
	w   *walker
	end []int32 // end tokens

	// History: the state after j accepted tokens is the stack set
	// histSets[histOff[j]:histOff[j+1]] (the last one runs to the end),
	// with histBottom[j] (the output may end there) and histMark[j] (the
	// node mark after it). done: an end token was accepted.
	histSets   []int32
	histOff    []int32
	histBottom []bool
	histMark   []int32
	done       bool

	tmp []int32

	// The mask of the state it was computed for (maskFor, maskBottom).
	mask       []uint64
	maskFor    []int32
	maskBottom bool
	maskValid  bool

	ranges []int32
	prefix []byte
}

// Reset returns the matcher to the start of the grammar.
func (m *Matcher) Reset() {
	m.ns.release(1)
	m.st.begin()
	m.st.expand(m.g.a.rules[m.g.a.root].start, 0)
	sortSmall(m.st.out)
	m.histSets = append(m.histSets[:0], m.st.out...)
	m.histOff = append(m.histOff[:0], 0)
	m.histBottom = append(m.histBottom[:0], m.st.bottom)
	m.histMark = append(m.histMark[:0], m.ns.mark())
	m.done = false
	m.maskValid = false
}

func (m *Matcher) last() int { return len(m.histOff) - 1 }

// current is the stack set after the last accepted token.
func (m *Matcher) current() ([]int32, bool) {
	n := m.last()
	return m.histSets[m.histOff[n]:], m.histBottom[n]
}

// Accepted is the number of tokens accepted since Reset (an end token
// included).
func (m *Matcher) Accepted() int { return m.last() }

// CanEnd reports whether the output so far is complete, so that an end
// token may follow.
func (m *Matcher) CanEnd() bool {
	_, bottom := m.current()
	return bottom && !m.done
}

// Complete reports whether nothing but an end token may follow.
func (m *Matcher) Complete() bool {
	set, bottom := m.current()
	return bottom && len(set) == 0
}

// Done reports whether an end token was accepted.
func (m *Matcher) Done() bool { return m.done }

func (m *Matcher) isEnd(tok int32) bool { return slices.Contains(m.end, tok) }

// Accept advances over tok. A token the grammar does not allow next
// returns an error wrapping ErrDeadEnd (or ErrTooDeep) and leaves the
// matcher as it was.
func (m *Matcher) Accept(tok int) error {
	if tok < 0 || tok >= m.g.v.size {
		return fmt.Errorf("token %d is outside the vocabulary [0, %d): %w", tok, m.g.v.size, ErrDeadEnd)
	}
	if m.done {
		return fmt.Errorf("token %d after the end of the output: %w", tok, ErrDeadEnd)
	}
	set, bottom := m.current()
	t := int32(tok)
	if m.isEnd(t) {
		if !bottom {
			return fmt.Errorf("end token %d where the output is not complete: %w", tok, ErrDeadEnd)
		}
		m.push(nil, false)
		m.done = true
		return nil
	}
	mark := m.ns.mark()
	b := m.g.v.TokenBytes(tok)
	if len(b) == 0 {
		return fmt.Errorf("token %d has no text: %w", tok, ErrDeadEnd)
	}
	m.st.tooDeep = false
	src := set
	for i, c := range b {
		m.st.step(src, c)
		if len(m.st.out) == 0 && !(i == len(b)-1 && m.st.bottom) {
			deep := m.st.tooDeep
			m.ns.release(mark)
			if deep {
				return fmt.Errorf("token %d: %w (%d frames)", tok, ErrTooDeep, m.g.lim.MaxStackDepth)
			}
			return fmt.Errorf("token %d (%q): %w", tok, b, ErrDeadEnd)
		}
		m.tmp = append(m.tmp[:0], m.st.out...)
		src = m.tmp
	}
	m.push(m.tmp, m.st.bottom)
	return nil
}

func (m *Matcher) push(set []int32, bottom bool) {
	m.histOff = append(m.histOff, int32(len(m.histSets)))
	m.histSets = append(m.histSets, set...)
	m.histBottom = append(m.histBottom, bottom)
	m.histMark = append(m.histMark, m.ns.mark())
}

// Rollback undoes the last k accepted tokens (a speculative step's
// rejected drafts).
func (m *Matcher) Rollback(k int) error {
	if k < 0 || k > m.last() {
		return fmt.Errorf("grammar: rollback of %d tokens, but %d were accepted", k, m.last())
	}
	if k == 0 {
		return nil
	}
	n := m.last() - k
	m.histSets = m.histSets[:m.histOff[n+1]]
	m.histOff = m.histOff[:n+1]
	m.histBottom = m.histBottom[:n+1]
	m.histMark = m.histMark[:n+1]
	m.ns.release(m.histMark[n])
	m.done = false
	m.maskValid = false
	return nil
}

// AcceptDraft accepts the longest prefix of draft the grammar allows and
// returns its length; the caller rolls back what verification rejects.
func (m *Matcher) AcceptDraft(draft []int) int {
	for i, t := range draft {
		if m.Accept(t) != nil {
			return i
		}
	}
	return len(draft)
}

// Allows reports whether tok may come next.
func (m *Matcher) Allows(tok int) bool {
	if m.Accept(tok) != nil {
		return false
	}
	m.Rollback(1)
	return true
}

// FillMask sets, in dst (Vocab.MaskWords words, bit t of word t/64), the
// tokens allowed next and clears the others. After an end token it
// allows nothing.
func (m *Matcher) FillMask(dst []uint64) {
	if m.done {
		clear(dst)
		return
	}
	set, bottom := m.current()
	if !m.maskValid || bottom != m.maskBottom || !slices.Equal(set, m.maskFor) {
		m.compute(set, bottom)
	}
	copy(dst, m.mask)
}

// compute fills m.mask for the stack set set.
func (m *Matcher) compute(set []int32, bottom bool) {
	g := m.g
	mask := m.mask
	clear(mask)
	m.ranges = m.ranges[:0]
	for _, n := range set {
		sm := g.masks[m.ns.state[n]]
		if sm.dense != nil {
			for i, w := range sm.dense {
				mask[i] |= w
			}
		} else {
			for _, t := range sm.sparse {
				mask[t>>6] |= 1 << (t & 63)
			}
		}
		m.ranges = append(m.ranges, sm.open...)
	}
	if len(m.ranges) > 0 {
		m.check(set)
	}
	for _, t := range m.end {
		mask[t>>6] &^= 1 << (t & 63)
		if bottom {
			mask[t>>6] |= 1 << (t & 63)
		}
	}
	m.maskFor = append(m.maskFor[:0], set...)
	m.maskBottom = bottom
	m.maskValid = true
}

// check walks the trie ranges of m.ranges with the whole stack set and
// sets the tokens it can read.
func (m *Matcher) check(set []int32) {
	v := m.g.v
	r := m.ranges
	// Sort the pairs by lo ascending, hi descending, then drop ranges
	// inside the previous one (ranges are whole subtrees or runs of
	// siblings, so they nest or are disjoint).
	n := len(r) / 2
	for i := 1; i < n; i++ {
		lo, hi := r[2*i], r[2*i+1]
		j := i
		for j > 0 && (r[2*j-2] > lo || (r[2*j-2] == lo && r[2*j-1] < hi)) {
			r[2*j], r[2*j+1] = r[2*j-2], r[2*j-1]
			j--
		}
		r[2*j], r[2*j+1] = lo, hi
	}
	w := m.w
	w.setRoot(set)
	mark := w.lvlMark[1]
	m.prefix = m.prefix[:0]
	valid := 0 // levels 1 … valid hold the sets of m.prefix
	end := int32(-1)
	for i := 0; i < n; i++ {
		lo, hi := r[2*i], r[2*i+1]
		if hi <= end {
			continue
		}
		end = hi
		first := v.trieTok[v.trieTokOff[lo]]
		p := v.TokenBytes(int(first))[:v.trieDepth[lo]-1]
		keep := 0
		for keep < len(p) && keep < valid && p[keep] == m.prefix[keep] {
			keep++
		}
		m.prefix = append(m.prefix[:0], p...)
		if valid = w.prefix(p, keep); valid < len(p) {
			continue
		}
		w.subtree(lo, hi)
	}
	m.ns.release(mark)
}
