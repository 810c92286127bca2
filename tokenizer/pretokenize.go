package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// A preTokenizer cuts a piece of text into smaller pieces; the BPE model
// encodes each final piece on its own. Pieces are substrings of the input,
// except where a stage inserts text (the byte-level prefix space).
type preTokenizer interface {
	appendPieces(dst []string, piece string) []string
}

// preTokenizerSequence applies its stages one after the other, each to every
// piece the previous stage produced.
type preTokenizerSequence []preTokenizer

func (seq preTokenizerSequence) appendPieces(dst []string, piece string) []string {
	if len(seq) == 0 {
		return append(dst, piece)
	}
	cur := []string{piece}
	var next []string
	for _, stage := range seq {
		next = next[:0]
		for _, p := range cur {
			next = stage.appendPieces(next, p)
		}
		cur, next = next, cur
	}
	return append(dst, cur...)
}

// splitBehavior says what a Split stage does with the matches of its pattern.
type splitBehavior int

const (
	splitIsolated splitBehavior = iota
	splitRemoved
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Isolated":           splitIsolated,
	"Removed":            splitRemoved,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
	"Contiguous":         splitContiguous,
}

// matcher finds the non-overlapping, leftmost-first matches of a pattern in
// s and appends them as byte spans.
type matcher interface {
	appendMatches(dst []span, s string) []span
}

type span struct{ start, end int }

// handMatcher scans with a hand-written matcher (see scan.go).
type handMatcher func(s string, i int) int

func (m handMatcher) appendMatches(dst []span, s string) []span {
	for i := 0; i < len(s); {
		if end := m(s, i); end > i {
			dst = append(dst, span{i, end})
			i = end
			continue
		}
		_, _, w := runeAt(s, i)
		i += w
	}
	return dst
}

// appendIsolated appends the matches of m in s and the gaps between them,
// in order.
func (m handMatcher) appendIsolated(dst []string, s string) []string {
	gap := 0
	for i := 0; i < len(s); {
		if end := m(s, i); end > i {
			if gap < i {
				dst = append(dst, s[gap:i])
			}
			dst = append(dst, s[i:end])
			i, gap = end, end
			continue
		}
		_, _, w := runeAt(s, i)
		i += w
	}
	if gap < len(s) {
		dst = append(dst, s[gap:])
	}
	return dst
}

// regexMatcher runs any pattern the backtracking engine accepts. It works on
// runes; invalid UTF-8 bytes become U+FFFD for matching but keep their byte
// offsets, so every byte of the input survives the split.
type regexMatcher struct{ re *regexp2.Regexp }

func (m regexMatcher) appendMatches(dst []span, s string) []span {
	runes := make([]rune, 0, len(s))
	offsets := make([]int, 0, len(s)+1)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		runes = append(runes, r)
		offsets = append(offsets, i)
		i += w
	}
	offsets = append(offsets, len(s))
	match, err := m.re.FindRunesMatch(runes)
	for err == nil && match != nil {
		if match.Length > 0 {
			dst = append(dst, span{offsets[match.Index], offsets[match.Index+match.Length]})
		}
		match, err = m.re.FindNextMatch(match)
	}
	// The engine runs without a timeout, so err stays nil; a pattern that
	// cannot be evaluated was refused when the tokenizer was loaded.
	return dst
}

// literalMatcher matches a fixed string (a Split with a String pattern).
type literalMatcher string

func (m literalMatcher) appendMatches(dst []span, s string) []span {
	if m == "" {
		return dst
	}
	for i := 0; i+len(m) <= len(s); {
		if s[i:i+len(m)] == string(m) {
			dst = append(dst, span{i, i + len(m)})
			i += len(m)
			continue
		}
		i++
	}
	return dst
}

// compileSplitPattern returns the hand-written matcher for a known pattern
// and the general engine otherwise (or always, when forceRegex is set).
func compileSplitPattern(pattern string, forceRegex bool) (matcher, error) {
	if len(pattern) > maxPatternBytes {
		return nil, fmt.Errorf("split pattern of %d bytes is longer than the %d supported", len(pattern), maxPatternBytes)
	}
	if m, ok := handMatchers[pattern]; ok && !forceRegex {
		return handMatcher(m), nil
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile split pattern %q: %w", pattern, err)
	}
	return regexMatcher{re}, nil
}

// splitStage is the Split pre-tokenizer.
type splitStage struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func (st splitStage) appendPieces(dst []string, piece string) []string {
	if hm, ok := st.m.(handMatcher); ok && st.behavior == splitIsolated {
		// Isolated keeps every match and every gap as a piece, whichever
		// side is inverted, so the pieces can be emitted while scanning.
		return hm.appendIsolated(dst, piece)
	}
	var buf [32]span
	matches := st.m.appendMatches(buf[:0], piece)
	// Cut the piece into alternating gap and match segments.
	type segment struct {
		span
		isMatch bool
	}
	var segBuf [64]segment
	segs := segBuf[:0]
	prev := 0
	for _, m := range matches {
		if m.start > prev {
			segs = append(segs, segment{span{prev, m.start}, st.invert})
		}
		segs = append(segs, segment{m, !st.invert})
		prev = m.end
	}
	if prev < len(piece) {
		segs = append(segs, segment{span{prev, len(piece)}, st.invert})
	}
	switch st.behavior {
	case splitIsolated:
		for _, sg := range segs {
			dst = append(dst, piece[sg.start:sg.end])
		}
	case splitRemoved:
		for _, sg := range segs {
			if !sg.isMatch {
				dst = append(dst, piece[sg.start:sg.end])
			}
		}
	case splitMergedWithPrevious:
		// A match joins the segment before it, unless that segment is
		// itself a match.
		out := len(dst)
		prevMatch := false
		var lastStart int
		for _, sg := range segs {
			if sg.isMatch && !prevMatch && len(dst) > out {
				dst[len(dst)-1] = piece[lastStart:sg.end]
			} else {
				lastStart = sg.start
				dst = append(dst, piece[sg.start:sg.end])
			}
			prevMatch = sg.isMatch
		}
	case splitMergedWithNext:
		// A match joins the segment after it, unless that segment is itself
		// a match.
		for k := 0; k < len(segs); k++ {
			sg := segs[k]
			if sg.isMatch && k+1 < len(segs) && !segs[k+1].isMatch {
				dst = append(dst, piece[sg.start:segs[k+1].end])
				k++
				continue
			}
			dst = append(dst, piece[sg.start:sg.end])
		}
	case splitContiguous:
		for k := 0; k < len(segs); {
			j := k + 1
			if segs[k].isMatch {
				for j < len(segs) && segs[j].isMatch {
					j++
				}
			}
			dst = append(dst, piece[segs[k].start:segs[j-1].end])
			k = j
		}
	}
	return dst
}

// byteLevelStage is the ByteLevel pre-tokenizer: an optional prefix space on
// every piece and an optional split with the byte-level pattern. The mapping
// of bytes to the byte-level alphabet happens in the BPE model.
type byteLevelStage struct {
	addPrefixSpace bool
	split          matcher // nil when use_regex is false
}

func (st byteLevelStage) appendPieces(dst []string, piece string) []string {
	if st.addPrefixSpace && (len(piece) == 0 || piece[0] != ' ') {
		piece = " " + piece
	}
	if st.split == nil {
		return append(dst, piece)
	}
	return splitStage{m: st.split}.appendPieces(dst, piece)
}

// The incremental pre-tokenizer: eachPiece hands the pieces to yield one at
// a time and stops as soon as yield returns false, so a bounded encode
// never splits more of a text than it tokenizes. It must give exactly the
// pieces of appendPieces (the tests hold them equal); appendPieces is the
// batch form, kept for the speed of the common path.

type piecer interface {
	eachPiece(piece string, yield func(string) bool) bool
}

func (seq preTokenizerSequence) eachPiece(piece string, yield func(string) bool) bool {
	return seq.eachFrom(0, piece, yield)
}

func (seq preTokenizerSequence) eachFrom(k int, piece string, yield func(string) bool) bool {
	if k == len(seq) {
		return yield(piece)
	}
	return seq[k].(piecer).eachPiece(piece, func(p string) bool { return seq.eachFrom(k+1, p, yield) })
}

func (st byteLevelStage) eachPiece(piece string, yield func(string) bool) bool {
	if st.addPrefixSpace && (len(piece) == 0 || piece[0] != ' ') {
		piece = " " + piece
	}
	if st.split == nil {
		return yield(piece)
	}
	return splitStage{m: st.split}.eachPiece(piece, yield)
}

// matchIter returns the matches of m in s one by one.
func matchIter(m matcher, s string) func() (span, bool) {
	switch mm := m.(type) {
	case handMatcher:
		i := 0
		return func() (span, bool) {
			for i < len(s) {
				if end := mm(s, i); end > i {
					sp := span{i, end}
					i = end
					return sp, true
				}
				_, _, w := runeAt(s, i)
				i += w
			}
			return span{}, false
		}
	case literalMatcher:
		i := 0
		return func() (span, bool) {
			if mm == "" {
				return span{}, false
			}
			if j := strings.Index(s[i:], string(mm)); j >= 0 {
				sp := span{i + j, i + j + len(mm)}
				i = sp.end
				return sp, true
			}
			return span{}, false
		}
	}
	// The general engine works on the whole piece at once.
	all := m.appendMatches(nil, s)
	return func() (span, bool) {
		if len(all) == 0 {
			return span{}, false
		}
		sp := all[0]
		all = all[1:]
		return sp, true
	}
}

func (st splitStage) eachPiece(piece string, yield func(string) bool) bool {
	next := matchIter(st.m, piece)
	type segment struct {
		span
		isMatch bool
	}
	// segs yields the alternating gap and match segments.
	prev, pendingMatch, havePending, done := 0, span{}, false, false
	nextSeg := func() (segment, bool) {
		if havePending {
			havePending = false
			return segment{pendingMatch, !st.invert}, true
		}
		if done {
			return segment{}, false
		}
		m, ok := next()
		if !ok {
			done = true
			if prev < len(piece) {
				s := segment{span{prev, len(piece)}, st.invert}
				prev = len(piece)
				return s, true
			}
			return segment{}, false
		}
		prev2 := prev
		prev = m.end
		if m.start > prev2 {
			pendingMatch, havePending = m, true
			return segment{span{prev2, m.start}, st.invert}, true
		}
		return segment{m, !st.invert}, true
	}
	switch st.behavior {
	case splitIsolated:
		for sg, ok := nextSeg(); ok; sg, ok = nextSeg() {
			if !yield(piece[sg.start:sg.end]) {
				return false
			}
		}
	case splitRemoved:
		for sg, ok := nextSeg(); ok; sg, ok = nextSeg() {
			if !sg.isMatch && !yield(piece[sg.start:sg.end]) {
				return false
			}
		}
	case splitMergedWithPrevious:
		// A match joins the segment before it, unless that one is a match.
		var cur segment
		have := false
		for sg, ok := nextSeg(); ok; sg, ok = nextSeg() {
			if sg.isMatch && have && !cur.isMatch {
				cur.end, cur.isMatch = sg.end, true
				continue
			}
			if have && !yield(piece[cur.start:cur.end]) {
				return false
			}
			cur, have = sg, true
		}
		if have {
			return yield(piece[cur.start:cur.end])
		}
	case splitMergedWithNext:
		// A match joins the segment after it, unless that one is a match.
		var held segment
		holding := false
		for sg, ok := nextSeg(); ok; sg, ok = nextSeg() {
			if holding {
				holding = false
				if !sg.isMatch {
					if !yield(piece[held.start:sg.end]) {
						return false
					}
					continue
				}
				if !yield(piece[held.start:held.end]) {
					return false
				}
			}
			if sg.isMatch {
				held, holding = sg, true
				continue
			}
			if !yield(piece[sg.start:sg.end]) {
				return false
			}
		}
		if holding {
			return yield(piece[held.start:held.end])
		}
	case splitContiguous:
		var cur segment
		have := false
		for sg, ok := nextSeg(); ok; sg, ok = nextSeg() {
			if have && cur.isMatch && sg.isMatch {
				cur.end = sg.end
				continue
			}
			if have && !yield(piece[cur.start:cur.end]) {
				return false
			}
			cur, have = sg, true
		}
		if have {
			return yield(piece[cur.start:cur.end])
		}
	}
	return true
}
