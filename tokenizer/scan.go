package tokenizer

import "unicode/utf8"

// Hand-written matchers for the split patterns that the supported
// tokenizers use. Each one returns the end of the match that a backtracking
// engine would find starting exactly at byte offset i of s, or -1 when no
// match starts there. They are exact rewrites of the patterns named in their
// comments and are checked against the general regular-expression engine by
// the tests (including a fuzz test), so the pattern strings and the code
// must change together.

// Split patterns of the DeepSeek-V3 pre-tokenizer and of the byte-level
// pre-tokenizer's built-in split (use_regex).
const (
	patternDigits3   = `\p{N}{1,3}`
	patternCJKRun    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patternDeepSeek  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
	patternByteLevel = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// The Llama 3 / cl100k split (also GLM-4's), and Qwen2's, which takes
	// one digit at a time.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// GPT-4o's o200k split, which tells upper from lower case.
	patternO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// handMatchers maps a pattern string to its hand-written matcher.
var handMatchers = map[string]func(s string, i int) int{
	patternDigits3:   matchDigits3,
	patternCJKRun:    matchCJKRun,
	patternDeepSeek:  matchDeepSeek,
	patternByteLevel: matchByteLevel,
	patternLlama3:    func(s string, i int) int { return matchLlama3(s, i, 3) },
	patternQwen2:     func(s string, i int) int { return matchLlama3(s, i, 1) },
	patternO200k:     matchO200k,
}

// The o200k letter classes: U (upper-case-like) and W (lower-case-like)
// share the modifier and other letters and the marks.
const (
	classO200kU = classLu | classLt | classLm | classLo | classM
	classO200kW = classLl | classLm | classLo | classM
)

// contractionAt returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or i.
func contractionAt(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return i
	}
	switch s[i+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && s[i+2]|0x20 == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && s[i+2]|0x20 == 'l' {
			return i + 3
		}
	}
	return i
}

// o200kUpperLower matches [U]*[W]+ at j (the first alternative without its
// prefix): the greedy U run gives back characters until a W character can
// start the W run.
func o200kUpperLower(s string, j int) int {
	u := spanWhile(s, j, classO200kU)
	if u < len(s) {
		if _, c, _ := runeAt(s, u); c&classO200kW != 0 {
			return spanWhile(s, u, classO200kW)
		}
	}
	// Backtrack: the W run is the last W character of the U run.
	end := -1
	for k := j; k < u; {
		_, c, w := runeAt(s, k)
		if c&classO200kW != 0 {
			end = k + w
		}
		k += w
	}
	return end
}

// matchO200k matches
//
//	[^\r\n\p{L}\p{N}]?[U]*[W]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[U]+[W]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}
//	| ?[^\s\p{L}\p{N}]+[\r\n/]*
//	|\s*[\r\n]+
//	|\s+(?!\S)
//	|\s+
//
// with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and W = [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func matchO200k(s string, i int) int {
	r, c, w := runeAt(s, i)
	prefix := r != '\r' && r != '\n' && c&(classL|classN) == 0
	// First alternative, with the optional character, then without.
	if prefix && i+w < len(s) {
		if end := o200kUpperLower(s, i+w); end > 0 {
			return contractionAt(s, end)
		}
	}
	if end := o200kUpperLower(s, i); end > 0 {
		return contractionAt(s, end)
	}
	// Second alternative.
	for _, j := range []int{i + w, i} {
		if (j == i+w && !prefix) || j >= len(s) {
			continue
		}
		if u := spanWhile(s, j, classO200kU); u > j {
			return contractionAt(s, spanWhile(s, u, classO200kW))
		}
	}
	if c&classN != 0 {
		return matchDigits3(s, i)
	}
	if end, ok := matchSymbols(s, i, true); ok {
		return end
	}
	return matchWhitespaceTail(s, i, true)
}

// matchLlama3 matches
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)
//	|[^\r\n\p{L}\p{N}]?\p{L}+
//	|\p{N}{1,digits}
//	| ?[^\s\p{L}\p{N}]+[\r\n]*
//	|\s*[\r\n]+
//	|\s+(?!\S)
//	|\s+
func matchLlama3(s string, i, digits int) int {
	if s[i] == '\'' && i+1 < len(s) {
		switch s[i+1] | 0x20 {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2]|0x20 == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2]|0x20 == 'l' {
				return i + 3
			}
		}
	}
	r, c, w := runeAt(s, i)
	// One optional character that is not a line break, letter or number,
	// then letters.
	if r != '\r' && r != '\n' && c&(classL|classN) == 0 && i+w < len(s) {
		if end := spanWhile(s, i+w, classL); end > i+w {
			return end
		}
	}
	if c&classL != 0 {
		return spanWhile(s, i, classL)
	}
	if c&classN != 0 {
		end := i
		for n := 0; n < digits && end < len(s); n++ {
			_, c2, w2 := runeAt(s, end)
			if c2&classN == 0 {
				break
			}
			end += w2
		}
		return end
	}
	if end, ok := matchSymbols(s, i, false); ok {
		return end
	}
	return matchWhitespaceTail(s, i, true)
}

// matchSymbols matches ` ?[^\s\p{L}\p{N}]+[\r\n]*` at i (with slash,
// o200k's ` ?[^\s\p{L}\p{N}]+[\r\n/]*`): an optional space, then
// characters that are neither whitespace, letters nor numbers, then line
// breaks (and slashes). ok is false where no such character follows.
func matchSymbols(s string, i int, slash bool) (end int, ok bool) {
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		if _, c2, _ := runeAt(s, i+1); c2&(classSpace|classL|classN) == 0 {
			start = i + 1
		}
	}
	if _, c2, _ := runeAt(s, start); c2&(classSpace|classL|classN) != 0 {
		return 0, false
	}
	end = start
	for end < len(s) {
		_, c3, w3 := runeAt(s, end)
		if c3&(classSpace|classL|classN) != 0 {
			break
		}
		end += w3
	}
	for end < len(s) && (s[end] == '\r' || s[end] == '\n' || slash && s[end] == '/') {
		end++
	}
	return end, true
}

// matchDigits3 matches \p{N}{1,3}.
func matchDigits3(s string, i int) int {
	end := i
	for n := 0; n < 3 && end < len(s); n++ {
		_, c, w := runeAt(s, end)
		if c&classN == 0 {
			break
		}
		end += w
	}
	if end == i {
		return -1
	}
	return end
}

func isCJKRunRune(r rune) bool {
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x309f) || (r >= 0x30a0 && r <= 0x30ff)
}

// matchCJKRun matches [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+.
func matchCJKRun(s string, i int) int {
	end := i
	for end < len(s) {
		r, _, w := runeAt(s, end)
		if !isCJKRunRune(r) {
			break
		}
		end += w
	}
	if end == i {
		return -1
	}
	return end
}

// spanWhile returns the end of the longest run starting at i whose runes
// all have one of the classes in mask.
func spanWhile(s string, i int, mask uint16) int {
	for i < len(s) {
		_, c, w := runeAt(s, i)
		if c&mask == 0 {
			break
		}
		i += w
	}
	return i
}

func isASCIIPunct(b byte) bool {
	switch {
	case b >= '!' && b <= '/', b >= ':' && b <= '@', b >= '[' && b <= '`', b >= '{' && b <= '~':
		return true
	}
	return false
}

func isASCIILetter(b byte) bool { return (b|0x20) >= 'a' && (b|0x20) <= 'z' }

// matchWhitespaceTail implements the three whitespace alternatives shared by
// both patterns, in order: optionally \s*[\r\n]+, then \s+(?!\S), then \s+.
func matchWhitespaceTail(s string, i int, withNewlineRun bool) int {
	end := spanWhile(s, i, classSpace)
	if end == i {
		return -1
	}
	if withNewlineRun {
		// \s*[\r\n]+: the greedy \s* gives back characters until a line
		// break follows it; the match ends after the last line break of the
		// whitespace run.
		for k := end - 1; k >= i; k-- {
			if s[k] == '\r' || s[k] == '\n' {
				return k + 1
			}
		}
	}
	// \s+(?!\S): the whole run when it ends the text, otherwise the run
	// without its last character (which is then followed by whitespace).
	if end == len(s) {
		return end
	}
	_, w := utf8.DecodeLastRuneInString(s[i:end])
	if end-w > i {
		return end - w
	}
	// \s+
	return end
}

// matchDeepSeek matches
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
//	|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//	| ?[\p{P}\p{S}]+[\r\n]*
//	|\s*[\r\n]+
//	|\s+(?!\S)
//	|\s+
func matchDeepSeek(s string, i int) int {
	b := s[i]
	// ASCII punctuation followed by ASCII letters.
	if isASCIIPunct(b) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		end := i + 2
		for end < len(s) && isASCIILetter(s[end]) {
			end++
		}
		return end
	}
	r, c, w := runeAt(s, i)
	// One optional character that is not a line break, letter, punctuation
	// or symbol, then letters and marks.
	if r != '\r' && r != '\n' && c&(classL|classP|classS) == 0 && i+w < len(s) {
		if end := spanWhile(s, i+w, classL|classM); end > i+w {
			return end
		}
	}
	if c&(classL|classM) != 0 {
		return spanWhile(s, i, classL|classM)
	}
	// An optional space, punctuation and symbols, then line breaks.
	start := i
	if b == ' ' && i+1 < len(s) {
		if _, c2, _ := runeAt(s, i+1); c2&(classP|classS) != 0 {
			start = i + 1
		}
	}
	if end := spanWhile(s, start, classP|classS); end > start {
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}
	return matchWhitespaceTail(s, i, true)
}

// matchByteLevel matches
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func matchByteLevel(s string, i int) int {
	if s[i] == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		start = i + 1
	}
	// start > i only when a space precedes; each alternative first tries
	// with the space and then without it, but without it the first
	// character is a space, which none of the three classes accepts.
	if start < len(s) {
		_, c, _ := runeAt(s, start)
		switch {
		case c&classL != 0:
			return spanWhile(s, start, classL)
		case c&classN != 0:
			return spanWhile(s, start, classN)
		case c&(classSpace|classL|classN) == 0:
			end := start
			for end < len(s) {
				_, c2, w := runeAt(s, end)
				if c2&(classSpace|classL|classN) != 0 {
					break
				}
				end += w
			}
			return end
		}
	}
	return matchWhitespaceTail(s, i, false)
}
