package jinja

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

type filterFunc func(x any, args []any, kwargs map[string]any) (any, error)
type testFunc func(x any, args []any) (bool, error)

// filters are the supported filters. A filter outside this table is refused
// when the template is parsed.
var filters map[string]filterFunc

// tests are the supported tests of "x is name".
var tests map[string]testFunc

// globals are the functions a template can call.
var globals map[string]any

func init() {
	filters = map[string]filterFunc{
		"trim": func(x any, args []any, _ map[string]any) (any, error) {
			s, err := stringArg(x)
			if err != nil {
				return nil, err
			}
			if len(args) > 0 {
				chars, err := stringArg(args[0])
				if err != nil {
					return nil, err
				}
				return strings.Trim(s, chars), nil
			}
			return strings.TrimSpace(s), nil
		},
		"length": lengthFilter,
		"count":  lengthFilter,
		"string": func(x any, _ []any, _ map[string]any) (any, error) { return toString(x), nil },
		"lower": func(x any, _ []any, _ map[string]any) (any, error) {
			s, err := stringArg(x)
			return strings.ToLower(s), err
		},
		"upper": func(x any, _ []any, _ map[string]any) (any, error) {
			s, err := stringArg(x)
			return strings.ToUpper(s), err
		},
		"first": func(x any, _ []any, _ map[string]any) (any, error) {
			items, err := iterate(x)
			if err != nil || len(items) == 0 {
				return undefined{"first"}, err
			}
			return items[0], nil
		},
		"last": func(x any, _ []any, _ map[string]any) (any, error) {
			items, err := iterate(x)
			if err != nil || len(items) == 0 {
				return undefined{"last"}, err
			}
			return items[len(items)-1], nil
		},
		"join": func(x any, args []any, _ map[string]any) (any, error) {
			items, err := iterate(x)
			if err != nil {
				return nil, err
			}
			sep := ""
			if len(args) > 0 {
				if sep, err = stringArg(args[0]); err != nil {
					return nil, err
				}
			}
			parts := make([]string, len(items))
			for i, it := range items {
				parts[i] = toString(it)
			}
			return strings.Join(parts, sep), nil
		},
		"default": defaultFilter,
		"d":       defaultFilter,
		"tojson":  tojsonFilter,
		"replace": func(x any, args []any, _ map[string]any) (any, error) {
			if len(args) < 2 {
				return nil, fmt.Errorf("needs the old and the new string")
			}
			s, err := stringArg(x)
			if err != nil {
				return nil, err
			}
			old, err := stringArg(args[0])
			if err != nil {
				return nil, err
			}
			repl, err := stringArg(args[1])
			if err != nil {
				return nil, err
			}
			return strings.ReplaceAll(s, old, repl), nil
		},
		"list": func(x any, _ []any, _ map[string]any) (any, error) {
			items, err := iterate(x)
			if items == nil {
				items = []any{}
			}
			return newList(items), err
		},
		"items": func(x any, _ []any, _ map[string]any) (any, error) {
			m, ok := x.(*Dict)
			if !ok {
				return nil, fmt.Errorf("items of a %s", typeName(x))
			}
			return dictItems(m), nil
		},
	}
	tests = map[string]testFunc{
		"defined":   func(x any, _ []any) (bool, error) { _, u := x.(undefined); return !u, nil },
		"undefined": func(x any, _ []any) (bool, error) { _, u := x.(undefined); return u, nil },
		"none":      func(x any, _ []any) (bool, error) { return x == nil, nil },
		"string":    func(x any, _ []any) (bool, error) { _, ok := x.(string); return ok, nil },
		"number": func(x any, _ []any) (bool, error) {
			switch x.(type) {
			case int64, float64:
				return true, nil
			}
			return false, nil
		},
		"integer":  func(x any, _ []any) (bool, error) { _, ok := x.(int64); return ok, nil },
		"boolean":  func(x any, _ []any) (bool, error) { _, ok := x.(bool); return ok, nil },
		"true":     func(x any, _ []any) (bool, error) { return x == true, nil },
		"false":    func(x any, _ []any) (bool, error) { return x == false, nil },
		"mapping":  func(x any, _ []any) (bool, error) { _, ok := x.(*Dict); return ok, nil },
		"sequence": isSequence,
		"iterable": isSequence,
		"equalto": func(x any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("needs one argument")
			}
			return equal(x, args[0]), nil
		},
	}
	globals = map[string]any{
		"namespace": callable(func(args []any, kwargs map[string]any) (any, error) {
			if len(args) > 0 {
				return nil, fmt.Errorf("namespace takes keyword arguments only")
			}
			ns := &Namespace{attrs: make(map[string]any, len(kwargs))}
			for k, v := range kwargs {
				ns.attrs[k] = v
			}
			return ns, nil
		}),
		"raise_exception": callable(func(args []any, _ map[string]any) (any, error) {
			msg := "raise_exception called"
			if len(args) > 0 {
				msg = toString(args[0])
			}
			return nil, &Exception{Message: msg}
		}),
		"range": callable(func(args []any, _ map[string]any) (any, error) {
			var bounds [3]int64
			bounds[2] = 1
			switch len(args) {
			case 1:
				n, ok := args[0].(int64)
				if !ok {
					return nil, fmt.Errorf("range needs integers")
				}
				bounds[1] = n
			case 2, 3:
				for i, a := range args {
					n, ok := a.(int64)
					if !ok {
						return nil, fmt.Errorf("range needs integers")
					}
					bounds[i] = n
				}
			default:
				return nil, fmt.Errorf("range takes 1 to 3 arguments, got %d", len(args))
			}
			lo, hi, step := bounds[0], bounds[1], bounds[2]
			if step == 0 {
				return nil, fmt.Errorf("range step cannot be zero")
			}
			out := []any{}
			for i := lo; (step > 0 && i < hi) || (step < 0 && i > hi); i += step {
				if len(out) >= DefaultLimits.MaxIterations {
					return nil, fmt.Errorf("%w: range longer than %d elements", ErrIterationLimit, DefaultLimits.MaxIterations)
				}
				out = append(out, i)
			}
			return newList(out), nil
		}),
	}
	addCollectionBuiltins()
}

func stringArg(x any) (string, error) {
	switch s := x.(type) {
	case string:
		return s, nil
	case undefined:
		return "", nil
	}
	return "", fmt.Errorf("expected a string, got a %s", typeName(x))
}

func lengthFilter(x any, _ []any, _ map[string]any) (any, error) {
	switch v := x.(type) {
	case string:
		return int64(utf8.RuneCountInString(v)), nil
	case *List:
		return int64(len(v.items)), nil
	case *Dict:
		return int64(v.Len()), nil
	case undefined:
		return int64(0), nil
	}
	return nil, fmt.Errorf("length of a %s", typeName(x))
}

func defaultFilter(x any, args []any, _ map[string]any) (any, error) {
	var def any = ""
	if len(args) > 0 {
		def = args[0]
	}
	boolean := len(args) > 1 && truthy(args[1])
	if _, u := x.(undefined); u || (boolean && !truthy(x)) {
		return def, nil
	}
	return x, nil
}

func isSequence(x any, _ []any) (bool, error) {
	switch x.(type) {
	case *List, string, *Dict:
		return true, nil
	}
	return false, nil
}

func dictItems(m *Dict) *List {
	out := make([]any, len(m.keys))
	for i, k := range m.keys {
		out[i] = newList([]any{k, m.vals[k]})
	}
	return newList(out)
}

// stringMethod returns the bound method name of s, if it is supported.
func stringMethod(s, name string) (callable, bool) {
	strArgs := func(args []any) ([]string, error) {
		out := make([]string, len(args))
		for i, a := range args {
			v, err := stringArg(a)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out[i] = v
		}
		return out, nil
	}
	trim := func(f func(string, string) string, g func(string) string) callable {
		return func(args []any, _ map[string]any) (any, error) {
			a, err := strArgs(args)
			if err != nil {
				return nil, err
			}
			if len(a) > 0 {
				return f(s, a[0]), nil
			}
			return g(s), nil
		}
	}
	switch name {
	case "strip":
		return trim(strings.Trim, strings.TrimSpace), true
	case "lstrip":
		return trim(strings.TrimLeft, func(s string) string { return strings.TrimLeft(s, " \t\n\r\f\v") }), true
	case "rstrip":
		return trim(strings.TrimRight, func(s string) string { return strings.TrimRight(s, " \t\n\r\f\v") }), true
	case "upper":
		return func([]any, map[string]any) (any, error) { return strings.ToUpper(s), nil }, true
	case "lower":
		return func([]any, map[string]any) (any, error) { return strings.ToLower(s), nil }, true
	case "startswith", "endswith":
		return func(args []any, _ map[string]any) (any, error) {
			a, err := strArgs(args)
			if err != nil {
				return nil, err
			}
			if len(a) != 1 {
				return nil, fmt.Errorf("%s takes one string", name)
			}
			if name == "startswith" {
				return strings.HasPrefix(s, a[0]), nil
			}
			return strings.HasSuffix(s, a[0]), nil
		}, true
	case "split", "rsplit":
		return func(args []any, kwargs map[string]any) (any, error) {
			// Python: split(sep=None, maxsplit=-1).
			var sep any
			maxsplit := int64(-1)
			if len(args) > 2 {
				return nil, fmt.Errorf("%s takes at most 2 arguments", name)
			}
			if len(args) > 0 {
				sep = args[0]
			}
			if v, ok := kwargs["sep"]; ok {
				sep = v
			}
			if len(args) > 1 {
				kwargs = map[string]any{"maxsplit": args[1]}
			}
			if v, ok := kwargs["maxsplit"]; ok {
				n, ok := v.(int64)
				if !ok {
					return nil, fmt.Errorf("%s: maxsplit must be an integer", name)
				}
				maxsplit = n
			}
			var parts []string
			switch sv := sep.(type) {
			case nil, undefined:
				parts = splitWhitespace(s, int(maxsplit), name == "rsplit")
			case string:
				if sv == "" {
					return nil, fmt.Errorf("%s: empty separator", name)
				}
				switch {
				case maxsplit < 0:
					parts = strings.Split(s, sv)
				case name == "split":
					parts = strings.SplitN(s, sv, int(maxsplit)+1)
				default:
					parts = rsplitN(s, sv, int(maxsplit))
				}
			default:
				return nil, fmt.Errorf("%s: separator must be a string, got a %s", name, typeName(sep))
			}
			out := make([]any, len(parts))
			for i, p := range parts {
				out[i] = p
			}
			return newList(out), nil
		}, true
	case "replace":
		return func(args []any, _ map[string]any) (any, error) {
			a, err := strArgs(args)
			if err != nil {
				return nil, err
			}
			if len(a) != 2 {
				return nil, fmt.Errorf("replace takes two strings")
			}
			return strings.ReplaceAll(s, a[0], a[1]), nil
		}, true
	}
	return nil, false
}

// dictMethod returns the bound method name of m, if it is supported.
func dictMethod(m *Dict, name string) (callable, bool) {
	switch name {
	case "items":
		return func([]any, map[string]any) (any, error) { return dictItems(m), nil }, true
	case "keys":
		return func([]any, map[string]any) (any, error) {
			out := make([]any, len(m.keys))
			for i, k := range m.keys {
				out[i] = k
			}
			return newList(out), nil
		}, true
	case "values":
		return func([]any, map[string]any) (any, error) {
			out := make([]any, len(m.keys))
			for i, k := range m.keys {
				out[i] = m.vals[k]
			}
			return newList(out), nil
		}, true
	case "get":
		return func(args []any, _ map[string]any) (any, error) {
			if len(args) < 1 || len(args) > 2 {
				return nil, fmt.Errorf("get takes a key and an optional default")
			}
			k, ok := args[0].(string)
			if ok {
				if v, found := m.vals[k]; found {
					return v, nil
				}
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return nil, nil
		}, true
	}
	return nil, false
}

// tojsonFilter is Hugging Face's tojson: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False), arguments in that order.
func tojsonFilter(x any, args []any, kwargs map[string]any) (any, error) {
	names := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	if len(args) > len(names) {
		return nil, fmt.Errorf("takes at most %d arguments", len(names))
	}
	vals := map[string]any{}
	for i, a := range args {
		vals[names[i]] = a
	}
	for k, v := range kwargs {
		if !slices.Contains(names, k) {
			return nil, fmt.Errorf("unexpected argument %q (accepted: %s)", k, strings.Join(names, ", "))
		}
		vals[k] = v
	}
	o := jsonOptions{ensureASCII: truthy(vals["ensure_ascii"]), sortKeys: truthy(vals["sort_keys"]), itemSep: ", ", keySep: ": "}
	if ind, ok := vals["indent"]; ok && ind != nil {
		if _, u := ind.(undefined); !u {
			n, ok := ind.(int64)
			if !ok || n < 0 || n > 64 {
				return nil, fmt.Errorf("indent must be an integer from 0 to 64, got %s", repr(ind))
			}
			o.indent, o.hasIndent, o.itemSep = int(n), true, ","
		}
	}
	if sep, ok := vals["separators"]; ok && sep != nil {
		sl, ok := sep.(*List)
		var l []any
		if ok {
			l = sl.items
		}
		if !ok || len(l) != 2 {
			return nil, fmt.Errorf("separators must be a pair of strings")
		}
		a, aok := l[0].(string)
		b, bok := l[1].(string)
		if !aok || !bok {
			return nil, fmt.Errorf("separators must be a pair of strings")
		}
		o.itemSep, o.keySep = a, b
	}
	return toJSON(x, o)
}

// rsplitN is Python's s.rsplit(sep, n) for n >= 0.
func rsplitN(s, sep string, n int) []string {
	var rev []string
	for n > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		rev = append(rev, s[i+len(sep):])
		s = s[:i]
		n--
	}
	out := []string{s}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// splitWhitespace is Python's s.split() / s.rsplit() with no separator:
// runs of whitespace separate, leading and trailing whitespace is dropped,
// at most maxsplit splits (all when negative).
func splitWhitespace(s string, maxsplit int, fromRight bool) []string {
	if maxsplit < 0 {
		return strings.Fields(s)
	}
	var out []string
	if !fromRight {
		for len(out) < maxsplit {
			s = strings.TrimLeftFunc(s, unicode.IsSpace)
			i := strings.IndexFunc(s, unicode.IsSpace)
			if i < 0 {
				break
			}
			out = append(out, s[:i])
			s = s[i:]
		}
		if s = strings.TrimLeftFunc(s, unicode.IsSpace); s != "" {
			out = append(out, s)
		}
		return out
	}
	var rev []string
	for len(rev) < maxsplit {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
		i := strings.LastIndexFunc(s, unicode.IsSpace)
		if i < 0 {
			break
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		rev = append(rev, s[i+w:])
		s = s[:i+w]
	}
	if s = strings.TrimRightFunc(s, unicode.IsSpace); s != "" {
		out = append(out, s)
	}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}
