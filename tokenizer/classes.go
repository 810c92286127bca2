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
	classL uint16 = 1 << iota
	classM
	classN
	classP
	classS
	classSpace
	// The letter categories, for the patterns that tell cases apart.
	classLu
	classLl
	classLt
	classLm
	classLo
)

// bmpClass caches the class of every rune of the Basic Multilingual Plane
// (128 KiB, filled once at start-up), so that the split matchers do not walk
// the Unicode range tables for common text.
var bmpClass = func() *[0x10000]uint16 {
	t := new([0x10000]uint16)
	for r := range rune(0x10000) {
		t[r] = slowClass(r)
	}
	return t
}()

func slowClass(r rune) uint16 {
	var c uint16
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
	for _, lc := range []struct {
		t   *unicode.RangeTable
		bit uint16
	}{{unicode.Lu, classLu}, {unicode.Ll, classLl}, {unicode.Lt, classLt}, {unicode.Lm, classLm}, {unicode.Lo, classLo}} {
		if c&classL != 0 && unicode.Is(lc.t, r) {
			c |= lc.bit
		}
	}
	return c
}

// runeAt decodes the rune at byte offset i of s and returns it with its
// class and width. Invalid bytes decode as U+FFFD with width 1.
func runeAt(s string, i int) (r rune, class uint16, width int) {
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), bmpClass[b], 1
	}
	r, width = utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return r, bmpClass[r], width
	}
	return r, slowClass(r), width
}
