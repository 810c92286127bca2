package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// AddedToken is an entry of tokenizer.json's added_tokens: a string that is
// matched in the input before any splitting and maps to one id.
type AddedToken struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
	// Special tokens are control tokens: Decode can skip them.
	Special bool `json:"special"`
	// LStrip and RStrip make the token absorb the whitespace on its left or
	// right side.
	LStrip     bool `json:"lstrip"`
	RStrip     bool `json:"rstrip"`
	SingleWord bool `json:"single_word"`
	Normalized bool `json:"normalized"`
}

// addedMatcher finds added tokens in text, leftmost first and, among the
// tokens starting at the same offset, longest first. It is a byte trie.
type addedMatcher struct {
	nodes  []trieNode
	tokens []AddedToken
	first  [256]bool // bytes that start some token
}

type trieNode struct {
	children map[byte]int32
	token    int32 // index into tokens, -1 when no token ends here
}

func newAddedMatcher(tokens []AddedToken) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{token: -1}}, tokens: tokens}
	for ti, tok := range tokens {
		if tok.Content == "" {
			continue
		}
		n := int32(0)
		for i := 0; i < len(tok.Content); i++ {
			b := tok.Content[i]
			child, ok := m.nodes[n].children[b]
			if !ok {
				if m.nodes[n].children == nil {
					m.nodes[n].children = make(map[byte]int32)
				}
				child = int32(len(m.nodes))
				m.nodes[n].children[b] = child
				m.nodes = append(m.nodes, trieNode{token: -1})
			}
			n = child
		}
		m.nodes[n].token = int32(ti)
		m.first[tok.Content[0]] = true
	}
	return m
}

// longestAt returns the index of the longest token that starts at offset i
// of s and its length, or -1.
func (m *addedMatcher) longestAt(s string, i int) (token, length int) {
	token = -1
	n := int32(0)
	for j := i; j < len(s); j++ {
		child, ok := m.nodes[n].children[s[j]]
		if !ok {
			break
		}
		n = child
		if t := m.nodes[n].token; t >= 0 {
			token, length = int(t), j+1-i
		}
	}
	return token, length
}

// addedSegment is a stretch of the input: either ordinary text (token < 0)
// or one added token.
type addedSegment struct {
	text  string
	token int
}

// each cuts s into text and added-token segments and hands them to yield
// one by one, stopping when yield returns false; it reports whether it went
// to the end. Whitespace absorbed by lstrip/rstrip tokens is removed from
// the neighbouring text.
func (m *addedMatcher) each(s string, yield func(addedSegment) bool) bool {
	textStart := 0
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		t, n := m.longestAt(s, i)
		if t < 0 {
			i++
			continue
		}
		tok := m.tokens[t]
		if tok.SingleWord && !isSingleWord(s, i, i+n) {
			i++
			continue
		}
		text := s[textStart:i]
		if tok.LStrip {
			text = strings.TrimRightFunc(text, unicode.IsSpace)
		}
		if text != "" && !yield(addedSegment{text: text, token: -1}) {
			return false
		}
		if !yield(addedSegment{text: tok.Content, token: t}) {
			return false
		}
		i += n
		if tok.RStrip {
			rest := strings.TrimLeftFunc(s[i:], unicode.IsSpace)
			i = len(s) - len(rest)
		}
		textStart = i
	}
	if textStart < len(s) {
		return yield(addedSegment{text: s[textStart:], token: -1})
	}
	return true
}

// isSingleWord reports whether s[start:end] is not glued to a word
// character on either side.
func isSingleWord(s string, start, end int) bool {
	isWord := func(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }
	if start > 0 {
		r, _ := utf8.DecodeLastRuneInString(s[:start])
		if isWord(r) {
			return false
		}
	}
	if end < len(s) {
		r, _, _ := runeAt(s, end)
		if isWord(r) {
			return false
		}
	}
	return true
}
