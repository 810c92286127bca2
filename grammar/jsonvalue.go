package grammar

import (
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"
)

// JSON values as the schema compiler reads them: nil, bool, json.Number,
// string, []any, and *jsonObject, which keeps its keys in document order
// (properties are generated in the order a schema lists them).
type jsonObject struct {
	keys []string
	vals []any
}

func (o *jsonObject) get(k string) (any, bool) {
	if i := slices.Index(o.keys, k); i >= 0 {
		return o.vals[i], true
	}
	return nil, false
}

// parseJSON reads one JSON value, refusing duplicate keys and nesting
// deeper than maxDepth.
func parseJSON(src string, maxDepth int) (any, error) {
	dec := json.NewDecoder(strings.NewReader(src))
	dec.UseNumber()
	v, err := readValue(dec, 0, maxDepth)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("text after the JSON value")
	}
	return v, nil
}

func readValue(dec *json.Decoder, depth, maxDepth int) (any, error) {
	if depth > maxDepth {
		return nil, limitError("MaxSchemaDepth", "the JSON nests more than %d levels (the limit)", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &jsonObject{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if slices.Contains(o.keys, k) {
					return nil, syntaxError("key %q appears twice in one object", k)
				}
				v, err := readValue(dec, depth+1, maxDepth)
				if err != nil {
					return nil, err
				}
				o.keys = append(o.keys, k)
				o.vals = append(o.vals, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return o, nil
		case '[':
			a := []any{}
			for dec.More() {
				v, err := readValue(dec, depth+1, maxDepth)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return a, nil
		}
		return nil, syntaxError("unexpected %v", t)
	default:
		return t, nil
	}
}

// appendJSONString appends s as a JSON string the way grammars spell
// strings: ", \ and control characters escaped (\b \f \n \r \t, else
// \u00xx), everything else as its UTF-8 bytes.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for _, r := range s {
		dst = appendJSONChar(dst, r)
	}
	return append(dst, '"')
}

func appendJSONChar(dst []byte, r rune) []byte {
	switch r {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&15])
	}
	return utf8.AppendRune(dst, r)
}

// encodeJSON writes v compactly, strings as appendJSONString does.
func encodeJSON(dst []byte, v any) []byte {
	switch t := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		if t {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case json.Number:
		return append(dst, t...)
	case string:
		return appendJSONString(dst, t)
	case []any:
		dst = append(dst, '[')
		for i, e := range t {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = encodeJSON(dst, e)
		}
		return append(dst, ']')
	case *jsonObject:
		dst = append(dst, '{')
		for i, k := range t.keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			dst = encodeJSON(dst, t.vals[i])
		}
		return append(dst, '}')
	}
	panic("grammar: not a JSON value")
}

// numberRat is the exact value of a JSON number.
func numberRat(n json.Number) (*big.Rat, bool) {
	if len(n) > 400 {
		return nil, false
	}
	// An exponent is expanded exactly: bound it before big.Rat does.
	if i := strings.IndexAny(string(n), "eE"); i >= 0 {
		e := strings.TrimLeft(string(n[i+1:]), "+-")
		if len(e) > 4 || (len(e) == 4 && e > "1000") {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(string(n))
	return r, ok
}

// jsonEqual is JSON Schema's equality: numbers by value, objects by their
// key sets, arrays element by element.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, ok1 := numberRat(x)
		ry, ok2 := numberRat(y)
		return ok1 && ok2 && rx.Cmp(ry) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case *jsonObject:
		y, ok := b.(*jsonObject)
		if !ok || len(x.keys) != len(y.keys) {
			return false
		}
		for i, k := range x.keys {
			v, ok := y.get(k)
			if !ok || !jsonEqual(x.vals[i], v) {
				return false
			}
		}
		return true
	}
	return false
}
