package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes used by the split patterns. They follow Unicode general
// categories as the regular-expression engines behind tokenizer.json do:
// \p{L} letters, \p{M} marks, \p{N} numbers, \p{P} punctuation, \p{S}
// symbols, and \s the Unicode White_Space set (which includes U+0085 and
// excludes U+FEFF). An invalid UTF-8 byte is classified as U+FFFD, the rune
// every engine substitutes for it (a symbol, So).
const (
	classL uint8 = 1 << iota
	classM
	classN
	classP
	classS
	classSpace
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = slowClass(r)
	}
	return t
}()

func slowClass(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= classL
	}
	if unicode.IsMark(r) {
		c |= classM
	}
	if unicode.IsNumber(r) {
		c |= classN
	}
	if unicode.IsPunct(r) {
		c |= classP
	}
	if unicode.IsSymbol(r) {
		c |= classS
	}
	if unicode.IsSpace(r) {
		c |= classSpace
	}
	return c
}

// runeAt decodes the rune at byte offset i of s and returns it with its
// class and width. Invalid bytes decode as U+FFFD with width 1.
func runeAt(s string, i int) (r rune, class uint8, width int) {
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), asciiClass[b], 1
	}
	r, width = utf8.DecodeRuneInString(s[i:])
	return r, slowClass(r), width
}
