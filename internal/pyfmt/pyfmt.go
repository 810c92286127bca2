package pyfmt

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// FloatRepr formats f as Python's repr(float): the shortest digits that
// round-trip, positional notation for decimal exponents -4..15 (with ".0"
// when the value is integral), scientific notation with an exponent of at
// least two digits otherwise; "nan", "inf", "-inf".
func FloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == 0:
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

// JSONFloat is a float as json.dumps writes it: repr, and NaN, Infinity,
// -Infinity for the non-finite values.
func JSONFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return FloatRepr(f)
}

// AppendJSONString appends s as a quoted JSON string the way json.dumps
// writes it: '"', '\\' and control characters escaped; with ensureASCII
// also every non-ASCII character as \uXXXX (surrogate pairs beyond the
// BMP). Bytes that are not UTF-8 become U+FFFD, so the result is valid
// JSON.
func AppendJSONString(b []byte, s string, ensureASCII bool) []byte {
	b = append(b, '"')
	b = AppendJSONStringBody(b, s, ensureASCII)
	return append(b, '"')
}

// AppendJSONStringBody is AppendJSONString without the quotes. Escaping is
// per character, so the body of a prefix is a prefix of the body.
func AppendJSONStringBody(b []byte, s string, ensureASCII bool) []byte {
	const hex = "0123456789abcdef"
	u4 := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
	}
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
				if c < 0x20 || (ensureASCII && c == 0x7f) {
					b = u4(b, rune(c))
				} else {
					b = append(b, c)
				}
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			r = utf8.RuneError
		}
		switch {
		case ensureASCII && r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			b = u4(u4(b, r1), r2)
		case ensureASCII:
			b = u4(b, r)
		case w == 1:
			b = append(b, "\uFFFD"...)
		default:
			b = append(b, s[i:i+w]...)
		}
		i += w
	}
	return b
}
