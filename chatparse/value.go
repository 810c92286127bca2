package chatparse

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A value is an argument value as Python holds it after json.loads or
// ast.literal_eval: nil (None), bool, *big.Int, float64, string, []value or
// *object. Only values JSON can carry are built; anything else (sets, bytes,
// complex numbers, non-finite floats) is an error, and the caller keeps the
// raw text instead.
type value any

// object is a Python dict with string keys: insertion order, and a repeated
// key keeps its first position and takes the last value.
type object struct {
	keys []string
	vals map[string]value
}

func newObject() *object { return &object{vals: map[string]value{}} }

func (o *object) set(k string, v value) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// maxValueDepth bounds the nesting of parsed values (Python's own recursion
// limit stops it near 1000; a lower bound keeps the parser's stack small).
const maxValueDepth = 200

var errNotJSONValue = errors.New("value cannot be represented in JSON")

// appendJSON appends v as Python's json.dumps(v, ensure_ascii=False) writes
// it: ", " and ": " separators, floats as Python's repr, non-ASCII text
// unescaped.
func appendJSON(b []byte, v value) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		if x {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case *big.Int:
		return x.Append(b, 10)
	case float64:
		return append(b, pyFloatRepr(x)...)
	case string:
		return appendJSONString(b, x)
	case []value:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendJSON(b, e)
		}
		return append(b, ']')
	case *object:
		b = append(b, '{')
		for i, k := range x.keys {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendJSONString(b, k)
			b = append(b, ": "...)
			b = appendJSON(b, x.vals[k])
		}
		return append(b, '}')
	}
	panic("chatparse: appendJSON of a non-value") // unreachable: values are built by this package only
}

// appendJSONString appends s as a JSON string the way Python's json.dumps
// with ensure_ascii=False does: only '"', '\\' and control characters are
// escaped. Bytes that are not UTF-8 become U+FFFD, so the result is always
// valid JSON.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendJSONStringBody(b, s)
	return append(b, '"')
}

// appendJSONStringBody is appendJSONString without the quotes. Escaping is
// per character, so the body of a prefix is a prefix of the body.
func appendJSONStringBody(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b = append(b, '\\', '"')
			case '\\':
				b = append(b, '\\', '\\')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				if c < 0x20 {
					b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
				} else {
					b = append(b, c)
				}
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			b = append(b, "\uFFFD"...)
		} else {
			b = append(b, s[i:i+w]...)
		}
		i += w
	}
	return b
}

// pyFloatRepr formats f as Python's repr(float): the shortest digits that
// round-trip, positional notation for exponents -4..15 (with ".0" when the
// value is integral), scientific notation with a two-digit exponent
// otherwise.
func pyFloatRepr(f float64) string {
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // e.g. "-1.2345e+06"
	neg := e[0] == '-'
	if neg {
		e = e[1:]
	}
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	var s string
	switch {
	case exp < -4 || exp >= 16:
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		es := strconv.Itoa(exp)
		if len(es) < 2 {
			es = "0" + es
		}
		s = m + "e" + sign + es
	case exp < 0:
		s = "0." + strings.Repeat("0", -exp-1) + digits
	case exp+1 >= len(digits):
		s = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	default:
		s = digits[:exp+1] + "." + digits[exp+1:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// pyWhitespace reports what Python's str.isspace() accepts.
func pyWhitespace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// pyStrip is Python's str.strip().
func pyStrip(s string) string { return strings.TrimFunc(s, pyWhitespace) }

// finiteJSON reports whether every float in v is finite (json.dumps with
// allow_nan=False would accept it).
func finiteJSON(v value) bool {
	switch x := v.(type) {
	case float64:
		return !math.IsInf(x, 0) && !math.IsNaN(x)
	case []value:
		for _, e := range x {
			if !finiteJSON(e) {
				return false
			}
		}
	case *object:
		for _, k := range x.keys {
			if !finiteJSON(x.vals[k]) {
				return false
			}
		}
	}
	return true
}

// integralFloat returns the exact integer value of an integral finite
// float (Python's int(f)).
func integralFloat(f float64) *big.Int {
	i, _ := new(big.Float).SetFloat64(f).Int(nil)
	return i
}
