package jinja

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
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

// normalize converts Go values a caller passes in to the value types above.
func normalize(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case float32:
		return float64(x)
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out
	case []map[string]any:
		out := make([]any, len(x))
		for i, m := range x {
			out[i] = m
		}
		return out
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, s := range x {
			out[k] = s
		}
		return out
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
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
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
	case []any:
		return "list"
	case map[string]any:
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
		if x == math.Trunc(x) && math.Abs(x) < 1e16 {
			return strconv.FormatFloat(x, 'f', 1, 64)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return pyQuote(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = repr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := sortedKeys(x)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pyQuote(k) + ": " + repr(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case *Namespace:
		return "<Namespace " + repr(x.attrs) + ">"
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

// toJSON encodes a value as JSON with the separators of Python's
// json.dumps (", " and ": "), keys sorted, and non-ASCII characters kept.
func toJSON(v any, indent int) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, indent, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v any, indent, depth int) error {
	newline := func(d int) {
		if indent > 0 {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	itemSep := ", "
	if indent > 0 {
		itemSep = ","
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(repr(x))
	case string:
		enc, err := json.Marshal(x)
		if err != nil {
			return err
		}
		// encoding/json escapes <, > and & for HTML; Python does not.
		s := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(enc))
		b.WriteString(s)
	case []any:
		if len(x) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(itemSep)
			}
			newline(depth + 1)
			if err := writeJSON(b, e, indent, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte(']')
	case map[string]any:
		if len(x) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteByte('{')
		for i, k := range sortedKeys(x) {
			if i > 0 {
				b.WriteString(itemSep)
			}
			newline(depth + 1)
			if err := writeJSON(b, k, indent, depth+1); err != nil {
				return err
			}
			b.WriteString(": ")
			if err := writeJSON(b, x[k], indent, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot encode a %s", typeName(v))
	}
	return nil
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
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
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
	case int64, float64, []any, map[string]any, undefined, *Namespace, callable:
		return equal(b, a)
	}
	return a == b
}
