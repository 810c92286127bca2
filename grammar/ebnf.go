package grammar

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// GBNF, the grammar format of llama.cpp that vLLM's guided_grammar and
// xgrammar's EBNF read:
//
//	root   ::= object
//	object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//	pair   ::= string ":" ws value   # a comment
//
// Rules are name ::= body; a body runs until the next "name ::=" or the
// end. Terms are "literals" (with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH
// escapes), [character classes] with ranges and ^, . (any character),
// rule names, ( groups ), alternation |, and the postfix quantifiers * + ?
// {m} {m,} {m,n}. The output must match rule root. Characters are Unicode
// scalar values written as UTF-8. Lark syntax and xgrammar's extensions
// (lookahead assertions, tags) are refused.

type gbnfParser struct {
	src   string
	pos   int
	b     *builder
	ids   map[string]int32
	where map[string]int // first reference, for errors
	def   map[string]bool
}

func compileGBNF(src string, lim Limits) (*automaton, error) {
	if !strings.Contains(src, "::=") {
		return nil, syntaxError("the grammar has no rule (name ::= body); guided_grammar takes GBNF (llama.cpp's format, e.g. root ::= \"yes\" | \"no\"), not Lark")
	}
	p := &gbnfParser{src: src, b: newBuilder(lim), ids: map[string]int32{}, where: map[string]int{}, def: map[string]bool{}}
	if _, err := p.ruleID("root", 0); err != nil {
		return nil, err
	}
	for {
		p.space()
		if p.pos >= len(p.src) {
			break
		}
		start := p.pos
		name := p.name()
		if name == "" {
			return nil, p.errorf("expected a rule name")
		}
		p.space()
		if !strings.HasPrefix(p.src[p.pos:], "::=") {
			return nil, p.errorf("expected ::= after rule name %q", name)
		}
		p.pos += 3
		if p.def[name] {
			p.pos = start
			return nil, p.errorf("rule %q is defined twice", name)
		}
		id, err := p.ruleID(name, start)
		if err != nil {
			return nil, err
		}
		body, err := p.alternation(0)
		if err != nil {
			return nil, err
		}
		p.def[name] = true
		p.b.define(id, body)
	}
	if !p.def["root"] {
		return nil, syntaxError("the grammar has no rule root; the output must match root, e.g. root ::= answer")
	}
	for name, at := range p.where {
		if !p.def[name] {
			p.pos = at
			return nil, p.errorf("rule %q is used but never defined", name)
		}
	}
	return p.b.build(p.ids["root"])
}

func (p *gbnfParser) errorf(format string, args ...any) error {
	line := 1 + strings.Count(p.src[:min(p.pos, len(p.src))], "\n")
	return syntaxError("grammar line %d: %s", line, sprintf(format, args...))
}

func (p *gbnfParser) ruleID(name string, at int) (int32, error) {
	if id, ok := p.ids[name]; ok {
		return id, nil
	}
	id, err := p.b.rule(name)
	if err != nil {
		return 0, err
	}
	p.ids[name] = id
	if _, ok := p.where[name]; !ok && name != "root" {
		p.where[name] = at
	}
	return id, nil
}

// space skips whitespace, newlines and # comments.
func (p *gbnfParser) space() {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// atRuleStart reports whether a rule definition (name ::=) starts here.
func (p *gbnfParser) atRuleStart() bool {
	save := p.pos
	defer func() { p.pos = save }()
	if p.name() == "" {
		return false
	}
	p.space()
	return strings.HasPrefix(p.src[p.pos:], "::=")
}

func (p *gbnfParser) alternation(depth int) (*expr, error) {
	if depth > 100 {
		return nil, p.errorf("groups nested more than 100 deep")
	}
	var alts []*expr
	for {
		s, err := p.sequence(depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, s)
		p.space()
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			continue
		}
		break
	}
	return alt(alts...), nil
}

func (p *gbnfParser) sequence(depth int) (*expr, error) {
	var items []*expr
	for {
		p.space()
		if p.pos >= len(p.src) {
			break
		}
		c := p.src[p.pos]
		if c == '|' || c == ')' || p.atRuleStart() {
			break
		}
		e, err := p.primary(depth)
		if err != nil {
			return nil, err
		}
		e, err = p.postfix(e)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return seq(items...), nil
}

func (p *gbnfParser) primary(depth int) (*expr, error) {
	c := p.src[p.pos]
	switch {
	case c == '"':
		return p.literal()
	case c == '[':
		set, err := p.class()
		if err != nil {
			return nil, err
		}
		return utf8Expr(set), nil
	case c == '.':
		p.pos++
		return utf8Expr(anyChar()), nil
	case c == '(':
		p.pos++
		p.space()
		if p.pos < len(p.src) && p.src[p.pos] == '=' {
			return nil, &Error{Keyword: "lookahead", msg: p.errorf("lookahead assertions (= …) are not supported").Error()}
		}
		e, err := p.alternation(depth + 1)
		if err != nil {
			return nil, err
		}
		p.space()
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return nil, p.errorf("missing )")
		}
		p.pos++
		return e, nil
	case isNameByte(c):
		at := p.pos
		name := p.name()
		id, err := p.ruleID(name, at)
		if err != nil {
			return nil, err
		}
		return call(id), nil
	case c == '\'':
		return nil, p.errorf("single-quoted strings are Lark syntax; GBNF literals use double quotes")
	}
	return nil, p.errorf("unexpected %q", c)
}

func (p *gbnfParser) postfix(e *expr) (*expr, error) {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case '*':
			p.pos++
			e = star(e)
		case '+':
			p.pos++
			e = plus(e)
		case '?':
			p.pos++
			e = opt(e)
		case '{':
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 0 {
				return nil, p.errorf("unterminated {")
			}
			body := strings.ReplaceAll(p.src[p.pos+1:p.pos+end], " ", "")
			a, b, comma := strings.Cut(body, ",")
			lo, err := strconv.Atoi(a)
			if err != nil || lo < 0 || lo > maxRegexRepeat {
				return nil, p.errorf("bad repetition {%s}", body)
			}
			hi := lo
			if comma {
				hi = -1
				if b != "" {
					if hi, err = strconv.Atoi(b); err != nil || hi < lo || hi > maxRegexRepeat {
						return nil, p.errorf("bad repetition {%s}", body)
					}
				}
			}
			p.pos += end + 1
			e = repeat(e, lo, hi)
		default:
			return e, nil
		}
	}
	return e, nil
}

// escape reads the escape after a backslash.
func (p *gbnfParser) escape() (rune, error) {
	if p.pos >= len(p.src) {
		return 0, p.errorf("trailing backslash")
	}
	c := p.src[p.pos]
	p.pos++
	hex := func(n int) (rune, error) {
		if p.pos+n > len(p.src) {
			return 0, p.errorf("short \\x/\\u escape")
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > maxRune || (v >= surrogateMin && v <= surrogateMax) {
			return 0, p.errorf("bad escape \\%c%s", c, p.src[p.pos:p.pos+n])
		}
		p.pos += n
		return rune(v), nil
	}
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '0':
		return 0, nil
	case 'x':
		return hex(2)
	case 'u':
		return hex(4)
	case 'U':
		return hex(8)
	case '\\', '"', '\'', '[', ']', '-', '/', '^':
		return rune(c), nil
	}
	return 0, p.errorf("unknown escape \\%c", c)
}

func (p *gbnfParser) char() (rune, error) {
	if p.src[p.pos] == '\\' {
		p.pos++
		return p.escape()
	}
	r, w := utf8.DecodeRuneInString(p.src[p.pos:])
	if r == utf8.RuneError && w == 1 {
		return 0, p.errorf("invalid UTF-8")
	}
	p.pos += w
	return r, nil
}

func (p *gbnfParser) literal() (*expr, error) {
	p.pos++ // "
	var sb strings.Builder
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return nil, p.errorf("unterminated string literal")
		}
		if p.src[p.pos] == '"' {
			p.pos++
			return lit(sb.String()), nil
		}
		r, err := p.char()
		if err != nil {
			return nil, err
		}
		sb.WriteRune(r)
	}
}

func (p *gbnfParser) class() (charset, error) {
	p.pos++ // [
	negate := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		negate = true
		p.pos++
	}
	var set charset
	for {
		if p.pos >= len(p.src) {
			return nil, p.errorf("unterminated [")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf("range %q-%q is reversed", lo, hi)
			}
		}
		set = append(set, runeRange{lo, hi})
	}
	set = set.normalize()
	if negate {
		set = set.negate()
	}
	return set, nil
}
