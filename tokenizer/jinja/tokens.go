package jinja

import (
	"fmt"
	"strconv"
	"strings"
)

type tokKind int

const (
	tokEOF tokKind = iota
	tokName
	tokString
	tokInt
	tokFloat
	tokOp
)

type token struct {
	kind tokKind
	text string // name, operator, or the decoded string literal
	num  float64
	ival int64
	pos  int
}

// twoCharOps lists the operators of two characters; they are tried before
// the single-character ones.
var twoCharOps = []string{"==", "!=", "<=", ">=", "//", "**"}

const oneCharOps = "+-*/%~()[]{},.:|=<>"

// lexExpr cuts the inside of a tag into tokens. base is the offset of the
// tag body in the template, used in error messages.
func lexExpr(s string, base int) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '_' || isAlpha(c):
			j := i + 1
			for j < len(s) && (s[j] == '_' || isAlpha(s[j]) || isDigit(s[j])) {
				j++
			}
			toks = append(toks, token{kind: tokName, text: s[i:j], pos: base + i})
			i = j
		case isDigit(c):
			j := i
			for j < len(s) && (isDigit(s[j]) || s[j] == '_') {
				j++
			}
			isFloat := false
			if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
				isFloat = true
				j++
				for j < len(s) && isDigit(s[j]) {
					j++
				}
			}
			if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
				k := j + 1
				if k < len(s) && (s[k] == '+' || s[k] == '-') {
					k++
				}
				if k < len(s) && isDigit(s[k]) {
					for k < len(s) && isDigit(s[k]) {
						k++
					}
					isFloat, j = true, k
				}
			}
			lit := strings.ReplaceAll(s[i:j], "_", "")
			if isFloat {
				f, err := strconv.ParseFloat(lit, 64)
				if err != nil {
					return nil, fmt.Errorf("offset %d: number %q: %w", base+i, lit, err)
				}
				toks = append(toks, token{kind: tokFloat, num: f, pos: base + i})
			} else {
				n, err := strconv.ParseInt(lit, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("offset %d: number %q: %w", base+i, lit, err)
				}
				toks = append(toks, token{kind: tokInt, ival: n, pos: base + i})
			}
			i = j
		case c == '\'' || c == '"':
			str, n, err := unquote(s[i:])
			if err != nil {
				return nil, fmt.Errorf("offset %d: %w", base+i, err)
			}
			toks = append(toks, token{kind: tokString, text: str, pos: base + i})
			i += n
		default:
			matched := false
			for _, op := range twoCharOps {
				if strings.HasPrefix(s[i:], op) {
					toks = append(toks, token{kind: tokOp, text: op, pos: base + i})
					i += 2
					matched = true
					break
				}
			}
			if matched {
				continue
			}
			if strings.IndexByte(oneCharOps, c) >= 0 {
				toks = append(toks, token{kind: tokOp, text: string(c), pos: base + i})
				i++
				continue
			}
			return nil, fmt.Errorf("offset %d: unexpected character %q", base+i, c)
		}
	}
	toks = append(toks, token{kind: tokEOF, pos: base + len(s)})
	return toks, nil
}

func isAlpha(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// unquote decodes the string literal at the start of s (Python escapes:
// \n \t \r \\ \' \" \0 \xHH \uHHHH \UHHHHHHHH; an unknown escape keeps its
// backslash) and returns it with the literal's length in bytes.
func unquote(s string) (string, int, error) {
	quote := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		if c == quote {
			return b.String(), i + 1, nil
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			break
		}
		switch e := s[i]; e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'x', 'u', 'U':
			width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+width >= len(s) {
				return "", 0, fmt.Errorf("truncated \\%c escape", e)
			}
			v, err := strconv.ParseUint(s[i+1:i+1+width], 16, 32)
			if err != nil {
				return "", 0, fmt.Errorf("bad \\%c escape: %w", e, err)
			}
			b.WriteRune(rune(v))
			i += width
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, fmt.Errorf("unterminated string literal")
}
