package chatparse

import (
	"errors"
	"math"
	"math/big"
	"strings"

	"github.com/cpmla/cpmla/internal/pyfmt"
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
// with ensure_ascii=False does.
func appendJSONString(b []byte, s string) []byte { return pyfmt.AppendJSONString(b, s, false) }

// appendJSONStringBody is appendJSONString without the quotes.
func appendJSONStringBody(b []byte, s string) []byte { return pyfmt.AppendJSONStringBody(b, s, false) }

// pyFloatRepr formats f as Python's repr(float).
func pyFloatRepr(f float64) string { return pyfmt.FloatRepr(f) }

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
