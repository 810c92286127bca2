package jinja

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// addCollectionBuiltins adds the filters, tests and functions that work on
// sequences and numbers, as Jinja2 defines them, and Hugging Face's
// strftime_now.
func addCollectionBuiltins() {
	filters["reverse"] = func(x any, _ []any, _ map[string]any) (any, error) {
		if s, ok := x.(string); ok {
			r := []rune(s)
			for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
				r[i], r[j] = r[j], r[i]
			}
			return string(r), nil
		}
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(items))
		for i, it := range items {
			out[len(items)-1-i] = it
		}
		return newList(out), nil
	}
	filters["map"] = func(x any, args []any, kwargs map[string]any) (any, error) {
		items, err := iterate(x)
		if err != nil {
			return nil, err
		}
		out := make([]any, 0, len(items))
		if attr, ok := kwargs["attribute"]; ok {
			name, ok := attr.(string)
			if !ok {
				return nil, fmt.Errorf("map: attribute must be a string")
			}
			def, hasDef := kwargs["default"]
			for _, it := range items {
				v, err := attribute(it, name)
				if err != nil {
					return nil, fmt.Errorf("map: %w", err)
				}
				if _, u := v.(undefined); u && hasDef {
					v = def
				}
				out = append(out, v)
			}
			return newList(out), nil
		}
		if len(args) == 0 {
			return nil, fmt.Errorf("map needs a filter name or attribute=")
		}
		name, ok := args[0].(string)
		f, known := filters[name]
		if !ok || !known {
			return nil, fmt.Errorf("map: %v is not a supported filter", args[0])
		}
		for _, it := range items {
			v, err := f(it, args[1:], nil)
			if err != nil {
				return nil, fmt.Errorf("map(%s): %w", name, err)
			}
			out = append(out, v)
		}
		return newList(out), nil
	}
	for _, name := range []string{"select", "reject", "selectattr", "rejectattr"} {
		keep := name == "select" || name == "selectattr"
		byAttr := strings.HasSuffix(name, "attr")
		filters[name] = func(x any, args []any, _ map[string]any) (any, error) {
			items, err := iterate(x)
			if err != nil {
				return nil, err
			}
			attr := ""
			if byAttr {
				if len(args) == 0 {
					return nil, fmt.Errorf("%s needs an attribute name", name)
				}
				if attr, _ = args[0].(string); attr == "" {
					return nil, fmt.Errorf("%s: the attribute must be a string", name)
				}
				args = args[1:]
			}
			test := func(v any) (bool, error) { return truthy(v), nil }
			if len(args) > 0 {
				tn, _ := args[0].(string)
				t, ok := tests[tn]
				if !ok {
					return nil, fmt.Errorf("%s: %v is not a supported test", name, args[0])
				}
				rest := args[1:]
				test = func(v any) (bool, error) { return t(v, rest) }
			}
			out := []any{}
			for _, it := range items {
				v := it
				if byAttr {
					if v, err = attribute(it, attr); err != nil {
						return nil, fmt.Errorf("%s: %w", name, err)
					}
				}
				ok, err := test(v)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				if ok == keep {
					out = append(out, it)
				}
			}
			return newList(out), nil
		}
	}
	filters["int"] = func(x any, args []any, _ map[string]any) (any, error) {
		var def any = int64(0)
		if len(args) > 0 {
			def = args[0]
		}
		switch v := x.(type) {
		case int64:
			return v, nil
		case bool:
			if v {
				return int64(1), nil
			}
			return int64(0), nil
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return def, nil
			}
			return int64(v), nil
		case string:
			var n int64
			if _, err := fmt.Sscan(strings.TrimSpace(v), &n); err == nil {
				return n, nil
			}
			var f float64
			if _, err := fmt.Sscan(strings.TrimSpace(v), &f); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return int64(f), nil
			}
		}
		return def, nil
	}
	filters["float"] = func(x any, args []any, _ map[string]any) (any, error) {
		var def any = 0.0
		if len(args) > 0 {
			def = args[0]
		}
		switch v := x.(type) {
		case int64:
			return float64(v), nil
		case float64:
			return v, nil
		case string:
			var f float64
			if _, err := fmt.Sscan(strings.TrimSpace(v), &f); err == nil {
				return f, nil
			}
		}
		return def, nil
	}
	filters["abs"] = func(x any, _ []any, _ map[string]any) (any, error) {
		switch v := x.(type) {
		case int64:
			if v < 0 {
				return -v, nil
			}
			return v, nil
		case float64:
			return math.Abs(v), nil
		}
		return nil, fmt.Errorf("abs of a %s", typeName(x))
	}
	filters["capitalize"] = func(x any, _ []any, _ map[string]any) (any, error) {
		s, err := stringArg(x)
		return capitalize(s), err
	}
	filters["title"] = func(x any, _ []any, _ map[string]any) (any, error) {
		s, err := stringArg(x)
		return title(s), err
	}
	filters["safe"] = func(x any, _ []any, _ map[string]any) (any, error) { return toString(x), nil }
	tests["ne"] = func(x any, args []any) (bool, error) {
		if len(args) != 1 {
			return false, fmt.Errorf("needs one argument")
		}
		return !equal(x, args[0]), nil
	}
	tests["eq"] = tests["equalto"]
	tests["in"] = func(x any, args []any) (bool, error) {
		if len(args) != 1 {
			return false, fmt.Errorf("needs one argument")
		}
		return contains(args[0], x)
	}
	integer := func(x any) (int64, error) {
		n, ok := x.(int64)
		if !ok {
			return 0, fmt.Errorf("needs an integer, got a %s", typeName(x))
		}
		return n, nil
	}
	tests["odd"] = func(x any, _ []any) (bool, error) { n, err := integer(x); return n%2 != 0, err }
	tests["even"] = func(x any, _ []any) (bool, error) { n, err := integer(x); return n%2 == 0, err }
	tests["divisibleby"] = func(x any, args []any) (bool, error) {
		if len(args) != 1 {
			return false, fmt.Errorf("needs one argument")
		}
		n, err := integer(x)
		if err != nil {
			return false, err
		}
		d, err := integer(args[0])
		if err != nil || d == 0 {
			return false, fmt.Errorf("needs a non-zero integer divisor")
		}
		return n%d == 0, nil
	}
	tests["float"] = func(x any, _ []any) (bool, error) { _, ok := x.(float64); return ok, nil }
	tests["callable"] = func(x any, _ []any) (bool, error) { _, ok := x.(callable); return ok, nil }
	tests["lower"] = func(x any, _ []any) (bool, error) { s, ok := x.(string); return ok && s == strings.ToLower(s), nil }
	tests["upper"] = func(x any, _ []any) (bool, error) { s, ok := x.(string); return ok && s == strings.ToUpper(s), nil }
	globals["strftime_now"] = callable(func(args []any, _ map[string]any) (any, error) {
		if len(args) != 1 {
			return nil, fmt.Errorf("strftime_now takes one format string")
		}
		f, ok := args[0].(string)
		if !ok {
			return nil, fmt.Errorf("strftime_now: the format must be a string")
		}
		return strftime(time.Now(), f)
	})
}

// capitalize is Jinja's capitalize: the first character upper case, the
// rest lower case.
func capitalize(s string) string {
	r, w := utf8.DecodeRuneInString(s)
	if w == 0 {
		return s
	}
	return string(unicode.ToUpper(r)) + strings.ToLower(s[w:])
}

// title is Python's str.title: each run of letters starts upper case and
// continues lower case.
func title(s string) string {
	var b strings.Builder
	prev := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prev {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToTitle(r))
			}
			prev = true
			continue
		}
		prev = false
		b.WriteRune(r)
	}
	return b.String()
}

// strftime formats t with Python's strftime directives (the C locale's).
func strftime(t time.Time, f string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		if i+1 >= len(f) {
			return "", fmt.Errorf("strftime_now: the format ends with a lone %%")
		}
		i++
		switch f[i] {
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			b.WriteString(map[bool]string{true: "AM", false: "PM"}[t.Hour() < 12])
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("strftime_now: directive %%%c is not supported (supported: %%a %%A %%b %%B %%d %%H %%I %%j %%m %%M %%p %%S %%y %%Y %%%%)", f[i])
		}
	}
	return b.String(), nil
}
