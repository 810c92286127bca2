package grammar

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Regular expressions, in the syntax JSON Schema's pattern (ECMA-262) and
// vLLM's guided_regex (Python's re) share: literals and escapes, classes
// with ranges and negation, \d \w \s and their negations, \p{…} Unicode
// categories and scripts, ., groups (capturing, non-capturing, named),
// alternation, and the quantifiers * + ? {n} {n,} {n,m} (lazy forms match
// the same strings). Assertions other than ^ at the start and $ at the end
// of an alternative (lookaround, \b, \B), backreferences, possessive
// quantifiers and inline flags cannot be enforced by a grammar and are
// refused by name.

type reOp uint8

const (
	reChars reOp = iota // one character of set
	reCat
	reAlt
	reRepeat
	reEmpty
	reBegin // ^
	reEnd   // $
)

type reNode struct {
	op       reOp
	set      charset
	subs     []*reNode
	min, max int // max < 0: unbounded
}

// maxRegexRepeat bounds a counted repetition; larger counts are refused
// before anything is expanded.
const maxRegexRepeat = 100_000

type reParser struct {
	src string
	pos int
}

func parseRegex(src string) (*reNode, error) {
	p := &reParser{src: src}
	n, err := p.alternation(0)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.src) {
		return nil, syntaxError("regex %q: unmatched ) at offset %d", src, p.pos)
	}
	return n, nil
}

func (p *reParser) more() bool { return p.pos < len(p.src) }

func (p *reParser) peek() byte { return p.src[p.pos] }

func (p *reParser) errorf(format string, args ...any) error {
	return syntaxError("regex %q at offset %d: %s", p.src, p.pos, strings.TrimSpace(sprintf(format, args...)))
}

func (p *reParser) refusef(construct, format string, args ...any) error {
	return refuse(construct, "regex %q at offset %d: %s", p.src, p.pos, sprintf(format, args...))
}

func (p *reParser) alternation(depth int) (*reNode, error) {
	if depth > 200 {
		return nil, p.errorf("groups nested more than 200 deep")
	}
	var alts []*reNode
	for {
		n, err := p.sequence(depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
		if !p.more() || p.peek() != '|' {
			break
		}
		p.pos++
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &reNode{op: reAlt, subs: alts}, nil
}

func (p *reParser) sequence(depth int) (*reNode, error) {
	var items []*reNode
	for p.more() && p.peek() != '|' && p.peek() != ')' {
		atom, err := p.atom(depth)
		if err != nil {
			return nil, err
		}
		atom, err = p.quantifier(atom)
		if err != nil {
			return nil, err
		}
		items = append(items, atom)
	}
	switch len(items) {
	case 0:
		return &reNode{op: reEmpty}, nil
	case 1:
		return items[0], nil
	}
	return &reNode{op: reCat, subs: items}, nil
}

func (p *reParser) quantifier(atom *reNode) (*reNode, error) {
	for p.more() {
		lo, hi := -1, -1
		start := p.pos
		switch p.peek() {
		case '*':
			lo, hi = 0, -1
			p.pos++
		case '+':
			lo, hi = 1, -1
			p.pos++
		case '?':
			lo, hi = 0, 1
			p.pos++
		case '{':
			var ok bool
			lo, hi, ok = p.braces()
			if !ok {
				return atom, nil // a literal {, as ECMA-262 Annex B reads it
			}
		default:
			return atom, nil
		}
		if atom.op == reBegin || atom.op == reEnd {
			p.pos = start
			return nil, p.errorf("quantifier on an anchor")
		}
		if p.more() && p.peek() == '?' {
			p.pos++ // lazy: the same strings
		} else if p.more() && p.peek() == '+' {
			return nil, p.refusef("possessive quantifier", "possessive quantifiers change what matches and are not supported; drop the +")
		}
		if hi >= 0 && hi < lo {
			return nil, p.errorf("repetition {%d,%d} has its bounds reversed", lo, hi)
		}
		atom = &reNode{op: reRepeat, subs: []*reNode{atom}, min: lo, max: hi}
	}
	return atom, nil
}

// braces reads {n}, {n,} or {n,m}; ok is false (and nothing is consumed)
// when the brace does not start one.
func (p *reParser) braces() (lo, hi int, ok bool) {
	s := p.src[p.pos:]
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return 0, 0, false
	}
	body := s[1:end]
	num := func(t string) (int, bool) {
		if t == "" || len(t) > 7 {
			return 0, false
		}
		for _, c := range t {
			if c < '0' || c > '9' {
				return 0, false
			}
		}
		v, _ := strconv.Atoi(t)
		return v, true
	}
	a, b, comma := strings.Cut(body, ",")
	lo, ok1 := num(a)
	if !ok1 {
		return 0, 0, false
	}
	hi = lo
	if comma {
		if b == "" {
			hi = -1
		} else {
			var ok2 bool
			if hi, ok2 = num(b); !ok2 {
				return 0, 0, false
			}
		}
	}
	if lo > maxRegexRepeat || hi > maxRegexRepeat {
		return 0, 0, false
	}
	p.pos += end + 1
	return lo, hi, true
}

func (p *reParser) atom(depth int) (*reNode, error) {
	c := p.peek()
	switch c {
	case '(':
		p.pos++
		if strings.HasPrefix(p.src[p.pos:], "?") {
			rest := p.src[p.pos:]
			switch {
			case strings.HasPrefix(rest, "?:"):
				p.pos += 2
			case strings.HasPrefix(rest, "?="), strings.HasPrefix(rest, "?!"), strings.HasPrefix(rest, "?<="), strings.HasPrefix(rest, "?<!"):
				return nil, p.refusef("lookaround", "lookahead and lookbehind assertions cannot be enforced token by token; rewrite the pattern without them")
			case strings.HasPrefix(rest, "?P<"), strings.HasPrefix(rest, "?<"):
				i := strings.IndexByte(rest, '>')
				if i < 0 {
					return nil, p.errorf("unterminated group name")
				}
				p.pos += i + 1
			case strings.HasPrefix(rest, "?P="):
				return nil, p.refusef("backreference", "backreferences cannot be enforced by a grammar")
			default:
				return nil, p.refusef("inline flags", "inline flags such as (?i) are not supported; write the cases out, e.g. [Aa]")
			}
		}
		n, err := p.alternation(depth + 1)
		if err != nil {
			return nil, err
		}
		if !p.more() || p.peek() != ')' {
			return nil, p.errorf("missing )")
		}
		p.pos++
		return n, nil
	case '[':
		set, err := p.class()
		if err != nil {
			return nil, err
		}
		return &reNode{op: reChars, set: set}, nil
	case '.':
		p.pos++
		return &reNode{op: reChars, set: anyChar().minus(charset{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})}, nil
	case '^':
		p.pos++
		return &reNode{op: reBegin}, nil
	case '$':
		p.pos++
		return &reNode{op: reEnd}, nil
	case '\\':
		set, err := p.escape(false)
		if err != nil {
			return nil, err
		}
		return &reNode{op: reChars, set: set}, nil
	case '*', '+', '?':
		return nil, p.errorf("quantifier %c with nothing to repeat", c)
	}
	r, w := utf8.DecodeRuneInString(p.src[p.pos:])
	if r == utf8.RuneError && w == 1 {
		return nil, p.errorf("invalid UTF-8")
	}
	p.pos += w
	return &reNode{op: reChars, set: singleChar(r)}, nil
}

// ECMA-262's \s: WhiteSpace and LineTerminator.
var ecmaSpace = charset{{'\t', '\r'}, {' ', ' '}, {0xa0, 0xa0}, {0x1680, 0x1680}, {0x2000, 0x200a},
	{0x2028, 0x2029}, {0x202f, 0x202f}, {0x205f, 0x205f}, {0x3000, 0x3000}, {0xfeff, 0xfeff}}.normalize()

// The \s a grammar generates: the characters every common regex engine
// (ECMA-262, Python, RE2) counts as whitespace. Its negation \S is taken
// against the largest of them (ECMA-262's), so that both stay inside every
// engine's reading.
var commonSpace = charset{{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}}

var (
	digitSet = charset{{'0', '9'}}
	wordSet  = charset{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
)

// escape reads a backslash escape and returns its character set.
func (p *reParser) escape(inClass bool) (charset, error) {
	p.pos++ // the backslash
	if !p.more() {
		return nil, p.errorf("trailing backslash")
	}
	c := p.peek()
	p.pos++
	switch c {
	case 'd':
		return digitSet, nil
	case 'D':
		return digitSet.negate(), nil
	case 'w':
		return wordSet, nil
	case 'W':
		return wordSet.negate(), nil
	case 's':
		return commonSpace, nil
	case 'S':
		return ecmaSpace.negate(), nil
	case 'n':
		return singleChar('\n'), nil
	case 'r':
		return singleChar('\r'), nil
	case 't':
		return singleChar('\t'), nil
	case 'f':
		return singleChar('\f'), nil
	case 'v':
		return singleChar('\v'), nil
	case '0':
		if p.more() && p.peek() >= '0' && p.peek() <= '9' {
			return nil, p.refusef("octal escape", "octal escapes are not supported; use \\xHH")
		}
		return singleChar(0), nil
	case 'b':
		if inClass {
			return singleChar('\b'), nil
		}
		return nil, p.refusef("word boundary", "\\b asserts a word boundary, which cannot be enforced token by token")
	case 'B':
		return nil, p.refusef("word boundary", "\\B asserts a non-boundary, which cannot be enforced token by token")
	case 'A', 'Z', 'z', 'G':
		return nil, p.refusef("anchor", "\\%c is not supported; use ^ and $ at the ends of the pattern", c)
	case 'k':
		return nil, p.refusef("backreference", "backreferences cannot be enforced by a grammar")
	case 'x':
		return p.hex(2)
	case 'u':
		if p.more() && p.peek() == '{' {
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 2 || end > 7 {
				return nil, p.errorf("bad \\u{…} escape")
			}
			v, err := strconv.ParseUint(p.src[p.pos+1:p.pos+end], 16, 32)
			if err != nil || v > maxRune {
				return nil, p.errorf("bad \\u{…} escape")
			}
			p.pos += end + 1
			return singleChar(rune(v)), nil
		}
		return p.hex(4) // a surrogate pair \uD83D\uDE00 reads as one character
	case 'c':
		if !p.more() {
			return nil, p.errorf("bad \\c escape")
		}
		l := p.peek() | 0x20
		if l < 'a' || l > 'z' {
			return nil, p.errorf("bad \\c escape")
		}
		p.pos++
		return singleChar(rune(l - 'a' + 1)), nil
	case 'p', 'P':
		set, err := p.property()
		if err != nil {
			return nil, err
		}
		if c == 'P' {
			set = set.negate()
		}
		return set, nil
	}
	if c >= '1' && c <= '9' {
		return nil, p.refusef("backreference", "backreferences (\\%c) cannot be enforced by a grammar", c)
	}
	if c >= utf8.RuneSelf {
		p.pos--
		r, w := utf8.DecodeRuneInString(p.src[p.pos:])
		p.pos += w
		return singleChar(r), nil
	}
	if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') {
		return nil, p.errorf("unknown escape \\%c", c)
	}
	return singleChar(rune(c)), nil
}

func (p *reParser) hex(n int) (charset, error) {
	if p.pos+n > len(p.src) {
		return nil, p.errorf("short hex escape")
	}
	v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
	if err != nil {
		return nil, p.errorf("bad hex escape %q", p.src[p.pos:p.pos+n])
	}
	p.pos += n
	r := rune(v)
	if n == 4 && r >= 0xD800 && r <= 0xDBFF && strings.HasPrefix(p.src[p.pos:], "\\u") && p.pos+6 <= len(p.src) {
		if lo, err := strconv.ParseUint(p.src[p.pos+2:p.pos+6], 16, 32); err == nil && lo >= 0xDC00 && lo <= 0xDFFF {
			p.pos += 6
			return singleChar(0x10000 + (r-0xD800)<<10 + (rune(lo) - 0xDC00)), nil
		}
	}
	if r >= surrogateMin && r <= surrogateMax {
		return nil, p.refusef("lone surrogate", "\\u%04X is a lone surrogate, which is not a character", r)
	}
	return singleChar(r), nil
}

// property reads {Name} or {Name=Value} after \p and returns its set.
func (p *reParser) property() (charset, error) {
	if !p.more() || p.peek() != '{' {
		// \pL (one-letter category), as Python's regex module and RE2 allow.
		if p.more() {
			name := string(p.peek())
			if t, ok := unicode.Categories[name]; ok {
				p.pos++
				return fromTable(t), nil
			}
		}
		return nil, p.errorf("\\p needs {Name}")
	}
	end := strings.IndexByte(p.src[p.pos:], '}')
	if end < 0 {
		return nil, p.errorf("unterminated \\p{")
	}
	name := p.src[p.pos+1 : p.pos+end]
	p.pos += end + 1
	key, val, hasVal := strings.Cut(name, "=")
	if hasVal {
		switch key {
		case "General_Category", "gc":
			name = val
		case "Script", "sc", "Script_Extensions", "scx":
			if t, ok := unicode.Scripts[val]; ok {
				return fromTable(t), nil
			}
			return nil, p.refusef("unicode property", "unknown script %q", val)
		default:
			return nil, p.refusef("unicode property", "Unicode property %q is not supported; use a General_Category or a Script", key)
		}
	}
	if t, ok := unicode.Categories[name]; ok {
		return fromTable(t), nil
	}
	if short, ok := categoryAliases[name]; ok {
		return fromTable(unicode.Categories[short]), nil
	}
	if t, ok := unicode.Scripts[name]; ok {
		return fromTable(t), nil
	}
	switch name {
	case "Any":
		return anyChar(), nil
	case "ASCII":
		return charRange(0, 0x7f), nil
	}
	return nil, p.refusef("unicode property", "Unicode property %q is not supported; use a General_Category (L, Lu, Nd, …) or a Script (Latin, Greek, …)", name)
}

var categoryAliases = map[string]string{
	"Letter": "L", "Cased_Letter": "LC", "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll", "Titlecase_Letter": "Lt",
	"Modifier_Letter": "Lm", "Other_Letter": "Lo", "Mark": "M", "Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc",
	"Enclosing_Mark": "Me", "Number": "N", "Decimal_Number": "Nd", "digit": "Nd", "Letter_Number": "Nl", "Other_Number": "No",
	"Punctuation": "P", "punct": "P", "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd", "Open_Punctuation": "Ps",
	"Close_Punctuation": "Pe", "Initial_Punctuation": "Pi", "Final_Punctuation": "Pf", "Other_Punctuation": "Po",
	"Symbol": "S", "Math_Symbol": "Sm", "Currency_Symbol": "Sc", "Modifier_Symbol": "Sk", "Other_Symbol": "So",
	"Separator": "Z", "Space_Separator": "Zs", "Line_Separator": "Zl", "Paragraph_Separator": "Zp",
	"Other": "C", "Control": "Cc", "cntrl": "Cc", "Format": "Cf", "Private_Use": "Co", "Surrogate": "Cs",
}

// class reads [...].
func (p *reParser) class() (charset, error) {
	start := p.pos
	p.pos++ // [
	negate := false
	if p.more() && p.peek() == '^' {
		negate = true
		p.pos++
	}
	var set charset
	first := true
	for {
		if !p.more() {
			p.pos = start
			return nil, p.errorf("unterminated [")
		}
		c := p.peek()
		if c == ']' && !first {
			p.pos++
			break
		}
		if c == ']' && first {
			// ECMA-262: [] matches nothing and [^] anything.
			p.pos++
			if negate {
				return anyChar(), nil
			}
			return charset{}, nil
		}
		first = false
		lo, loSet, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if loSet == nil && p.pos+1 < len(p.src) && p.peek() == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			hi, hiSet, err := p.classAtom()
			if err != nil {
				return nil, err
			}
			if hiSet != nil {
				return nil, p.errorf("range ends in a class escape")
			}
			if hi < lo {
				return nil, p.errorf("range %q-%q is reversed", lo, hi)
			}
			set = append(set, runeRange{lo, hi})
			continue
		}
		if loSet != nil {
			set = append(set, loSet...)
		} else {
			set = append(set, runeRange{lo, lo})
		}
	}
	set = set.normalize()
	if negate {
		set = set.negate()
	}
	return set, nil
}

// classAtom reads one member of a class: a character, or a set for escapes
// like \d.
func (p *reParser) classAtom() (rune, charset, error) {
	c := p.peek()
	if c == '[' && p.pos+1 < len(p.src) && p.src[p.pos+1] == ':' {
		return 0, nil, p.refusef("POSIX class", "POSIX classes such as [:alpha:] are not supported; use ranges")
	}
	if c == '\\' {
		set, err := p.escape(true)
		if err != nil {
			return 0, nil, err
		}
		if len(set) == 1 && set[0].lo == set[0].hi {
			return set[0].lo, nil, nil
		}
		return 0, set, nil
	}
	r, w := utf8.DecodeRuneInString(p.src[p.pos:])
	if r == utf8.RuneError && w == 1 {
		return 0, nil, p.errorf("invalid UTF-8")
	}
	p.pos += w
	return r, nil, nil
}

// regexLanguage turns a parsed regex into an expression over characters,
// with chars mapping a character set to the bytes that spell one of its
// characters. search makes the pattern match anywhere in the string
// (JSON Schema's pattern) unless anchored; otherwise the whole output must
// match (guided_regex), and ^ and $ at the ends change nothing.
func regexLanguage(src string, n *reNode, chars func(charset) *expr, anyOne *expr, search bool) (*expr, error) {
	var alts []*reNode
	if n.op == reAlt {
		alts = n.subs
	} else {
		alts = []*reNode{n}
	}
	var out []*expr
	for _, a := range alts {
		items := []*reNode{a}
		if a.op == reCat {
			items = a.subs
		}
		begin, end := false, false
		for len(items) > 0 && items[0].op == reBegin {
			begin = true
			items = items[1:]
		}
		for len(items) > 0 && items[len(items)-1].op == reEnd {
			end = true
			items = items[:len(items)-1]
		}
		body := make([]*expr, 0, len(items)+2)
		if search && !begin {
			body = append(body, star(anyOne))
		}
		for _, it := range items {
			e, err := reExpr(src, it, chars)
			if err != nil {
				return nil, err
			}
			body = append(body, e)
		}
		if search && !end {
			body = append(body, star(anyOne))
		}
		out = append(out, seq(body...))
	}
	return alt(out...), nil
}

func reExpr(src string, n *reNode, chars func(charset) *expr) (*expr, error) {
	switch n.op {
	case reChars:
		return chars(n.set), nil
	case reEmpty:
		return emptyExpr, nil
	case reBegin, reEnd:
		return nil, refuse("anchor", "regex %q: ^ and $ are supported only at the start and the end of the pattern (or of a top-level alternative)", src)
	case reCat, reAlt:
		parts := make([]*expr, len(n.subs))
		for i, s := range n.subs {
			e, err := reExpr(src, s, chars)
			if err != nil {
				return nil, err
			}
			parts[i] = e
		}
		if n.op == reCat {
			return seq(parts...), nil
		}
		return alt(parts...), nil
	case reRepeat:
		e, err := reExpr(src, n.subs[0], chars)
		if err != nil {
			return nil, err
		}
		return repeat(e, n.min, n.max), nil
	}
	return nil, syntaxError("regex %q: unknown node", src)
}
