package jinja

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cpmla/cpmla/internal/pyfmt"
)

// Values handed to Render and produced while rendering are: nil (none),
// bool, int64 (other Go integer types are converted), float64, string,
// []any, map[string]any, *Namespace, undefined and callables.

// undefined is the value of a missing variable, attribute or key.
type undefined struct{ name string }

// Namespace is the mutable object created by namespace(...): the one way a
// template carries state out of a loop body.
type Namespace struct{ attrs map[string]any }

// callable is a function or bound method.
type callable func(args []any, kwargs map[string]any) (any, error)

// List is a Jinja (Python) list: a reference, so list.append changes it
// for every name that holds it.
type List struct{ items []any }

func newList(items []any) *List { return &List{items: items} }

// Dict is a Jinja (Python) dict: string keys in insertion order, as
// Python dicts keep them, so items(), keys() and tojson follow the order of
// the JSON a request sent.
type Dict struct {
	keys []string
	vals map[string]any
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{vals: map[string]any{}} }

// Set sets key k; a new key goes last, an existing one keeps its place.
// Go values are converted as Render converts its variables.
func (d *Dict) Set(k string, v any) {
	if _, ok := d.vals[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.vals[k] = normalize(v)
}

// Get returns the value of key k.
func (d *Dict) Get(k string) (any, bool) {
	v, ok := d.vals[k]
	return v, ok
}

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// dictFromMap converts a Go map, which has no order, with its keys sorted.
func dictFromMap[V any](m map[string]V) *Dict {
	d := &Dict{keys: sortedKeys(m), vals: make(map[string]any, len(m))}
	for k, v := range m {
		d.vals[k] = normalize(v)
	}
	return d
}

// FromJSON decodes JSON into template values, keeping the order of object
// keys (Python's json.loads does): objects become *Dict, arrays *List,
// integers int64 (float64 beyond its range), other numbers float64. A
// repeated key keeps its first place and takes the last value.
func FromJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("jinja: JSON value followed by more data")
	}
	return v, nil
}

// maxJSONDepth bounds the nesting FromJSON accepts.
const maxJSONDepth = 512

func decodeJSONValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("jinja: JSON nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.Set(k, v)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token() // ']'
			return newList(list), err
		}
		return nil, fmt.Errorf("jinja: unexpected %v in JSON", t)
	case json.Number:
		if i, err := t.Int64(); err == nil && !strings.ContainsAny(string(t), ".eE") {
			return i, nil
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return f, nil
	case string, bool, nil:
		return t, nil
	}
	return nil, fmt.Errorf("jinja: unexpected JSON token %v", tok)
}

// normalize converts Go values a caller passes in to the value types above,
// recursively: Go integers become int64, slices []any, maps *Dict (with
// sorted keys, since Go maps have none; pass *Dict or FromJSON values to
// keep an order).
func normalize(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case float32:
		return float64(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return newList(out)
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return newList(out)
	case []map[string]any:
		out := make([]any, len(x))
		for i, m := range x {
			out[i] = dictFromMap(m)
		}
		return newList(out)
	case map[string]any:
		return dictFromMap(x)
	case map[string]string:
		return dictFromMap(x)
	}
	return v
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil, undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case *List:
		return len(x.items) > 0
	case *Dict:
		return x.Len() > 0
	}
	return true
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "none"
	case undefined:
		return "undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "string"
	case *List:
		return "list"
	case *Dict:
		return "dict"
	case *Namespace:
		return "namespace"
	case callable:
		return "function"
	}
	return fmt.Sprintf("%T", v)
}

// toString renders a value the way Jinja prints it: strings as they are,
// none as "None", booleans as "True"/"False", containers in Python's repr.
func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case undefined:
		return ""
	default:
		return repr(v)
	}
}

func repr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case undefined:
		return ""
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		switch {
		case math.IsNaN(x):
			return "nan"
		case math.IsInf(x, 1):
			return "inf"
		case math.IsInf(x, -1):
			return "-inf"
		}
		return pyfmt.FloatRepr(x)
	case string:
		return pyQuote(x)
	case *List:
		parts := make([]string, len(x.items))
		for i, e := range x.items {
			parts[i] = repr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *Dict:
		parts := make([]string, len(x.keys))
		for i, k := range x.keys {
			parts[i] = pyQuote(k) + ": " + repr(x.vals[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case *Namespace:
		return "<Namespace " + repr(dictFromMap(x.attrs)) + ">"
	}
	return fmt.Sprint(v)
}

// pyQuote quotes like Python's repr of a str: single quotes unless the
// string contains a single quote and no double quote.
func pyQuote(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonOptions are the arguments of Python's json.dumps that tojson passes
// on (Hugging Face's tojson: ensure_ascii=False, indent=None,
// separators=None, sort_keys=False by default).
type jsonOptions struct {
	ensureASCII     bool
	indent          int  // with hasIndent
	hasIndent       bool // indent=None means one line
	itemSep, keySep string
	sortKeys        bool
}

// toJSON encodes a value as json.dumps does.
func toJSON(v any, o jsonOptions) (string, error) {
	b, err := appendJSON(nil, v, o, 0)
	return string(b), err
}

func appendJSON(b []byte, v any, o jsonOptions, depth int) ([]byte, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("tojson: nested deeper than %d", maxJSONDepth)
	}
	newline := func(b []byte, d int) []byte {
		if o.hasIndent {
			b = append(b, '\n')
			b = append(b, strings.Repeat(" ", o.indent*d)...)
		}
		return b
	}
	var err error
	switch x := v.(type) {
	case nil:
		b = append(b, "null"...)
	case bool:
		b = strconv.AppendBool(b, x)
	case int64:
		b = strconv.AppendInt(b, x, 10)
	case float64:
		b = append(b, pyfmt.JSONFloat(x)...)
	case string:
		b = pyfmt.AppendJSONString(b, x, o.ensureASCII)
	case *List:
		if len(x.items) == 0 {
			return append(b, "[]"...), nil
		}
		b = append(b, '[')
		for i, e := range x.items {
			if i > 0 {
				b = append(b, o.itemSep...)
			}
			b = newline(b, depth+1)
			if b, err = appendJSON(b, e, o, depth+1); err != nil {
				return nil, err
			}
		}
		b = newline(b, depth)
		b = append(b, ']')
	case *Dict:
		if x.Len() == 0 {
			return append(b, "{}"...), nil
		}
		keys := x.keys
		if o.sortKeys {
			keys = slices.Sorted(slices.Values(keys))
		}
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, o.itemSep...)
			}
			b = newline(b, depth+1)
			b = pyfmt.AppendJSONString(b, k, o.ensureASCII)
			b = append(b, o.keySep...)
			if b, err = appendJSON(b, x.vals[k], o, depth+1); err != nil {
				return nil, err
			}
		}
		b = newline(b, depth)
		b = append(b, '}')
	default:
		return nil, fmt.Errorf("tojson: Object of type %s is not JSON serializable", typeName(v))
	}
	return b, nil
}

func equal(a, b any) bool {
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case float64:
			return float64(x) == y
		case bool:
			return (x == 1 && y) || (x == 0 && !y)
		}
		return false
	case float64:
		switch y := b.(type) {
		case int64:
			return x == float64(y)
		case float64:
			return x == y
		}
		return false
	case *List:
		y, ok := b.(*List)
		if !ok || len(x.items) != len(y.items) {
			return false
		}
		for i := range x.items {
			if !equal(x.items[i], y.items[i]) {
				return false
			}
		}
		return true
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for k, v := range x.vals {
			w, ok := y.vals[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case undefined:
		_, ok := b.(undefined)
		return ok
	case *Namespace:
		return a == b
	case callable:
		return false
	}
	switch b.(type) {
	case int64, float64, *List, *Dict, undefined, *Namespace, callable:
		return equal(b, a)
	}
	return a == b
}
