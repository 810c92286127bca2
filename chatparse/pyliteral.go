package chatparse

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// pyLiteral evaluates s as Python's ast.literal_eval does, for the values
// JSON can carry: strings (any quoting, r/u prefixes, implicit
// concatenation), integers (decimal, 0x, 0o, 0b, with underscores), floats,
// True, False, None, lists, tuples (as lists) and dicts whose keys are
// strings, numbers, booleans or None (converted to strings as json.dumps
// converts them). Sets, bytes, complex numbers, f-strings and non-finite
// floats are errors: json.dumps could not write them.
func pyLiteral(s string) (value, error) {
	p := pyParser{s: s}
	v, err := p.expr(0, true)
	if err != nil {
		return nil, err
	}
	p.space(false)
	if p.i != len(p.s) {
		return nil, p.errf("unexpected %q", p.rest(8))
	}
	if !finiteJSON(v) {
		return nil, errNotJSONValue
	}
	return v, nil
}

type pyParser struct {
	s string
	i int
}

func (p *pyParser) errf(format string, args ...any) error {
	return fmt.Errorf("python literal, offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *pyParser) rest(n int) string {
	if len(p.s)-p.i < n {
		return p.s[p.i:]
	}
	return p.s[p.i : p.i+n]
}

// space skips blanks and comments; newlines only inside brackets.
func (p *pyParser) space(inBrackets bool) {
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == ' ' || c == '\t' || c == '\f':
			p.i++
		case (c == '\n' || c == '\r') && inBrackets:
			p.i++
		case c == '\\' && strings.HasPrefix(p.s[p.i:], "\\\n"):
			p.i += 2
		case c == '#':
			for p.i < len(p.s) && p.s[p.i] != '\n' {
				p.i++
			}
		default:
			return
		}
	}
}

// expr parses an item, or at top level a bare tuple "a, b".
func (p *pyParser) expr(depth int, top bool) (value, error) {
	v, err := p.item(depth, !top)
	if err != nil || !top {
		return v, err
	}
	p.space(false)
	if p.i >= len(p.s) || p.s[p.i] != ',' {
		return v, nil
	}
	list := []value{v}
	for p.i < len(p.s) && p.s[p.i] == ',' {
		p.i++
		p.space(false)
		if p.i >= len(p.s) {
			break
		}
		e, err := p.item(depth, false)
		if err != nil {
			return nil, err
		}
		list = append(list, e)
		p.space(false)
	}
	return list, nil
}

func (p *pyParser) item(depth int, inBrackets bool) (value, error) {
	if depth > maxValueDepth {
		return nil, p.errf("nested deeper than %d", maxValueDepth)
	}
	p.space(inBrackets)
	if p.i >= len(p.s) {
		return nil, p.errf("unexpected end")
	}
	c := p.s[p.i]
	switch {
	case c == '-' || c == '+':
		p.i++
		v, err := p.item(depth+1, inBrackets)
		if err != nil {
			return nil, err
		}
		switch x := v.(type) {
		case *big.Int:
			if c == '-' {
				return new(big.Int).Neg(x), nil
			}
			return x, nil
		case float64:
			if c == '-' {
				return -x, nil
			}
			return x, nil
		}
		return nil, p.errf("unary %c on a non-number", c)
	case c == '[':
		p.i++
		return p.sequence(depth, ']')
	case c == '(':
		p.i++
		return p.sequence(depth, ')')
	case c == '{':
		p.i++
		return p.dict(depth)
	case c == '.' || (c >= '0' && c <= '9'):
		return p.number()
	case c == '"' || c == '\'':
		return p.strings(inBrackets)
	case isIdentStart(c):
		j := p.i
		for j < len(p.s) && (isIdentStart(p.s[j]) || (p.s[j] >= '0' && p.s[j] <= '9')) {
			j++
		}
		word := p.s[p.i:j]
		if j < len(p.s) && (p.s[j] == '"' || p.s[j] == '\'') {
			switch strings.ToLower(word) {
			case "r", "u":
				return p.strings(inBrackets)
			}
			return nil, p.errf("string prefix %q is not a JSON value", word)
		}
		p.i = j
		switch word {
		case "True":
			return true, nil
		case "False":
			return false, nil
		case "None":
			return nil, nil
		}
		return nil, p.errf("name %q is not a literal", word)
	}
	return nil, p.errf("unexpected %q", p.rest(8))
}

func isIdentStart(c byte) bool { return c == '_' || (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// sequence parses the items of a list or tuple after the opening bracket.
func (p *pyParser) sequence(depth int, closer byte) (value, error) {
	list := []value{}
	for {
		p.space(true)
		if p.i < len(p.s) && p.s[p.i] == closer {
			p.i++
			return list, nil
		}
		v, err := p.item(depth+1, true)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
		p.space(true)
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == closer {
			p.i++
			return list, nil
		}
		return nil, p.errf("expecting ',' or %q", closer)
	}
}

// dict parses a dict (or refuses a set) after the opening brace.
func (p *pyParser) dict(depth int) (value, error) {
	obj := newObject()
	for {
		p.space(true)
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return obj, nil
		}
		k, err := p.item(depth+1, true)
		if err != nil {
			return nil, err
		}
		p.space(true)
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, p.errf("a set is not a JSON value")
		}
		p.i++
		v, err := p.item(depth+1, true)
		if err != nil {
			return nil, err
		}
		key, err := jsonKey(k)
		if err != nil {
			return nil, p.errf("%v", err)
		}
		obj.set(key, v)
		p.space(true)
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return obj, nil
		}
		return nil, p.errf("expecting ',' or '}'")
	}
}

// jsonKey converts a dict key as json.dumps does.
func jsonKey(k value) (string, error) {
	switch x := k.(type) {
	case string:
		return x, nil
	case *big.Int:
		return x.String(), nil
	case float64:
		if !finiteJSON(x) {
			return "", errNotJSONValue
		}
		return pyFloatRepr(x), nil
	case bool:
		if x {
			return "true", nil
		}
		return "false", nil
	case nil:
		return "null", nil
	}
	return "", errors.New("dict key is not a string, number, boolean or None")
}

// number parses an int or float literal; an imaginary suffix is refused.
func (p *pyParser) number() (value, error) {
	j := p.i
	for j < len(p.s) {
		c := p.s[j]
		if c == '_' || c == '.' || (c >= '0' && c <= '9') || (c|0x20) >= 'a' && (c|0x20) <= 'z' {
			j++
			continue
		}
		if (c == '+' || c == '-') && j > p.i && (p.s[j-1]|0x20) == 'e' && !strings.ContainsAny(strings.ToLower(p.s[p.i:j]), "xob") {
			j++
			continue
		}
		break
	}
	lit := p.s[p.i:j]
	p.i = j
	if strings.HasSuffix(lit, "j") || strings.HasSuffix(lit, "J") {
		return nil, p.errf("complex number %q is not a JSON value", lit)
	}
	if !validUnderscores(lit) {
		return nil, p.errf("bad number %q", lit)
	}
	clean := strings.ReplaceAll(lit, "_", "")
	low := strings.ToLower(clean)
	if len(low) > 1 && low[0] == '0' && (low[1] == 'x' || low[1] == 'o' || low[1] == 'b') {
		n, ok := new(big.Int).SetString(clean, 0)
		if !ok {
			return nil, p.errf("bad number %q", lit)
		}
		return n, nil
	}
	if !strings.ContainsAny(low, ".e") {
		if len(clean) > 1 && clean[0] == '0' && strings.Trim(clean, "0") != "" {
			return nil, p.errf("leading zeros in %q", lit)
		}
		n, ok := new(big.Int).SetString(clean, 10)
		if !ok {
			return nil, p.errf("bad number %q", lit)
		}
		return n, nil
	}
	if strings.ContainsAny(low, "abcdfghijklmnopqrstuvwxyz") {
		return nil, p.errf("bad number %q", lit)
	}
	f, err := strconv.ParseFloat(clean, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, p.errf("bad number %q", lit)
	}
	return f, nil
}

// validUnderscores reports whether every '_' sits between two digits (hex
// digits after 0x), as Python requires.
func validUnderscores(lit string) bool {
	for i := 0; i < len(lit); i++ {
		if lit[i] != '_' {
			continue
		}
		if i == 0 || i == len(lit)-1 || !isHexDigit(lit[i+1]) || !(isHexDigit(lit[i-1]) || (lit[i-1]|0x20) == 'x' || (lit[i-1]|0x20) == 'o' || (lit[i-1]|0x20) == 'b') {
			return false
		}
	}
	return true
}

func isHexDigit(c byte) bool {
	return (c >= '0' && c <= '9') || (c|0x20) >= 'a' && (c|0x20) <= 'f'
}

// strings parses one or more adjacent string literals and concatenates
// them.
func (p *pyParser) strings(inBrackets bool) (value, error) {
	var b strings.Builder
	for n := 0; ; n++ {
		if n > 0 {
			save := p.i
			p.space(inBrackets)
			if p.i >= len(p.s) || !p.stringStart() {
				p.i = save
				return b.String(), nil
			}
		}
		if err := p.oneString(&b); err != nil {
			return nil, err
		}
	}
}

// stringStart reports whether a string literal (with an optional r/u
// prefix) starts at p.i.
func (p *pyParser) stringStart() bool {
	c := p.s[p.i]
	if c == '"' || c == '\'' {
		return true
	}
	if (c|0x20) == 'r' || (c|0x20) == 'u' {
		return p.i+1 < len(p.s) && (p.s[p.i+1] == '"' || p.s[p.i+1] == '\'')
	}
	return false
}

func (p *pyParser) oneString(b *strings.Builder) error {
	raw := false
	if c := p.s[p.i] | 0x20; c == 'r' || c == 'u' {
		raw = c == 'r'
		p.i++
	}
	q := p.s[p.i]
	delim := string(q)
	if strings.HasPrefix(p.s[p.i:], strings.Repeat(delim, 3)) {
		delim = strings.Repeat(delim, 3)
	}
	p.i += len(delim)
	for {
		if p.i >= len(p.s) {
			return p.errf("unterminated string")
		}
		if strings.HasPrefix(p.s[p.i:], delim) {
			p.i += len(delim)
			return nil
		}
		c := p.s[p.i]
		if (c == '\n' || c == '\r') && len(delim) == 1 {
			return p.errf("newline in a one-line string")
		}
		if c != '\\' {
			_, w := utf8.DecodeRuneInString(p.s[p.i:])
			b.WriteString(p.s[p.i : p.i+w])
			p.i += w
			continue
		}
		if p.i+1 >= len(p.s) {
			return p.errf("unterminated string")
		}
		if raw {
			// A raw string keeps the backslash and the next character.
			_, w := utf8.DecodeRuneInString(p.s[p.i+1:])
			b.WriteString(p.s[p.i : p.i+1+w])
			p.i += 1 + w
			continue
		}
		if err := p.escape(b); err != nil {
			return err
		}
	}
}

// escape decodes one backslash escape of a non-raw string.
func (p *pyParser) escape(b *strings.Builder) error {
	e := p.s[p.i+1]
	p.i += 2
	simple := map[byte]string{'\\': "\\", '\'': "'", '"': "\"", 'a': "\a", 'b': "\b", 'f': "\f", 'n': "\n", 'r': "\r", 't': "\t", 'v': "\v", '\n': ""}
	if s, ok := simple[e]; ok {
		b.WriteString(s)
		return nil
	}
	hexRune := func(n int) error {
		if p.i+n > len(p.s) {
			return p.errf("truncated \\%c escape", e)
		}
		v, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return p.errf("bad \\%c escape", e)
		}
		p.i += n
		r := rune(v)
		if !utf8.ValidRune(r) {
			r = utf8.RuneError // a lone surrogate has no UTF-8 form
		}
		b.WriteRune(r)
		return nil
	}
	switch {
	case e == 'x':
		return hexRune(2)
	case e == 'u':
		return hexRune(4)
	case e == 'U':
		return hexRune(8)
	case e >= '0' && e <= '7':
		v := int(e - '0')
		for k := 0; k < 2 && p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '7'; k++ {
			v = v*8 + int(p.s[p.i]-'0')
			p.i++
		}
		b.WriteRune(rune(v))
		return nil
	case e == 'N':
		return p.errf("named escapes are not supported")
	}
	// An unknown escape keeps its backslash.
	b.WriteByte('\\')
	p.i--
	return nil
}
