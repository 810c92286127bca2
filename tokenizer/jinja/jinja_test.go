package jinja

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The expected outputs follow from Jinja2's documented semantics with
// trim_blocks and lstrip_blocks on (the environment Hugging Face
// transformers uses for chat templates).
func TestRender(t *testing.T) {
	msgs := []any{
		map[string]any{"role": "system", "content": "S"},
		map[string]any{"role": "user", "content": "U1"},
		map[string]any{"role": "assistant", "content": nil},
	}
	cases := []struct {
		name, src, want string
		vars            map[string]any
	}{
		{"text only", "plain text", "plain text", nil},
		{"output and concat", "{{ a + '-' + b }}|{{ a ~ 1 }}", "x-y|x1", map[string]any{"a": "x", "b": "y"}},
		{"undefined renders empty", "[{{ missing }}]", "[]", nil},
		{"none and booleans print like Python", "{{ none }} {{ true }} {{ false }}", "None True False", nil},
		{"arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ 7 / 2 }}", "3 -4 1 1024 7 3.5", nil},
		{"if elif else", "{% for n in [1, 2, 3] %}{% if n == 1 %}a{% elif n == 2 %}b{% else %}c{% endif %}{% endfor %}", "abc", nil},
		{"not binds looser than is", "{% if not x is defined %}undef{% endif %}", "undef", nil},
		{"is none and is not none", "{% for m in messages %}{{ m['content'] is none }},{{ m.content is not none }};{% endfor %}", "False,True;False,True;True,False;", map[string]any{"messages": msgs}},
		{"loop variables", "{% for m in messages %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }} {% endfor %}", "0TrueFalse 1FalseFalse 2FalseTrue ", map[string]any{"messages": msgs}},
		{"for else on empty", "{% for x in [] %}x{% else %}empty{% endfor %}", "empty", nil},
		{"for with filter", "{% for m in messages if m.role != 'system' %}{{ m.role }} {% endfor %}", "user assistant ", map[string]any{"messages": msgs}},
		{"set in loop does not leak", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}", "1", nil},
		{"namespace carries state out of a loop", "{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "6", nil},
		{"ternary", "{{ 'yes' if flag else 'no' }}", "no", map[string]any{"flag": false}},
		{"and or return operands", "{{ '' or 'b' }} {{ 'a' and 'c' }}", "b c", nil},
		{"in and not in", "{{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}", "True True True", nil},
		{"slices", "{{ [1, 2, 3, 4][1:3] }} {{ 'hello'[::-1] }} {{ messages[-1].role }}", "[2, 3] olleh assistant", map[string]any{"messages": msgs}},
		{"filters", "{{ '  x  ' | trim }} {{ [1, 2] | length }} {{ ['a', 'b'] | join('-') }} {{ missing | default('d') }} {{ 'Ab' | upper }}", "x 2 a-b d AB", nil},
		{"tojson", "{{ {'b': [1, 'x'], 'a': none} | tojson }}", `{"b": [1, "x"], "a": null}`, nil},
		{"string methods", "{{ ' x '.strip() }} {{ 'a,b'.split(',') }} {{ 'abc'.startswith('ab') }}", "x ['a', 'b'] True", nil},
		{"dict items", "{% for k, v in {'b': 2, 'a': 1}.items() %}{{ k }}={{ v }} {% endfor %}", "b=2 a=1 ", nil},
		{"escapes in literals", `{{ 'a\nb' }}{{ "\u00e9" }}`, "a\nbé", nil},
		{"whitespace control", "a  {%- if true -%}  b  {%- endif -%}  c", "abc", nil},
		{"trim_blocks drops the newline after a block tag", "{% if true %}\nx\n{% endif %}\ny", "x\ny", nil},
		{"lstrip_blocks drops indentation before a block tag", "  {% if true %}x{% endif %}", "x", nil},
		{"plus sign disables lstrip", "  {%+ if true %}x{% endif %}", "  x", nil},
		{"output tags keep surrounding whitespace", "  {{ 'x' }}\n", "  x\n", nil},
		{"comments vanish", "a{# note #}b", "ab", nil},
		{"range", "{% for i in range(3) %}{{ i }}{% endfor %}", "012", nil},
	}
	for _, c := range cases {
		tpl, err := Parse(c.src)
		if err != nil {
			t.Errorf("%s: Parse: %v", c.name, err)
			continue
		}
		got, err := tpl.Render(c.vars)
		if err != nil {
			t.Errorf("%s: Render: %v", c.name, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestRefusals(t *testing.T) {
	parseCases := []struct{ src, wantErr string }{
		{"{% if x %}", "not closed by {% endif %}"},
		{"{% for x in y %}", "not closed by {% endfor %}"},
		{"{% endif %}", "unexpected {% endif %}"},
		{"{{ x | frobnicate }}", `unsupported filter "frobnicate"`},
		{"{{ x is prime }}", `unsupported test "prime"`},
		{"{% include 'other.j2' %}", "unsupported statement {% include %}"},
		{"{{ 'open }}", `missing "}}"`}, // the quote runs to the end of the template
		{"{{ x ", `missing "}}"`},
		{"{{ (1, 2) }}", "tuples are not supported"},
		{"{% set x %}y{% endset %}", "block form of set"},
		{"{{ 1 + }}", "unexpected end of tag"},
		{"{{ a $ b }}", "unexpected character"},
	}
	for _, c := range parseCases {
		_, err := Parse(c.src)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("Parse(%q) error %v, want one containing %q", c.src, err, c.wantErr)
		}
	}
	renderCases := []struct{ src, wantErr string }{
		{"{{ raise_exception('roles must alternate') }}", "template raised: roles must alternate"},
		{"{{ missing.attr }}", `"missing" is undefined, so it has no attribute "attr"`},
		{"{{ 'a' + 1 }}", "unsupported operand types for +: string and int"},
		{"{{ 1 // 0 }}", "integer division by zero"},
		{"{% set x.y = 1 %}", "not a namespace"},
		{"{% for i in 5 %}{% endfor %}", "not iterable"},
		{"{{ none[0] }}", "none has no item"},
	}
	for _, c := range renderCases {
		tpl, err := Parse(c.src)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.src, err)
			continue
		}
		_, err = tpl.Render(nil)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("Render(%q) error %v, want one containing %q", c.src, err, c.wantErr)
		}
	}
	tpl, err := Parse("{{ raise_exception('no') }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Render(nil)
	var exc *Exception
	if !errors.As(err, &exc) || exc.Message != "no" {
		t.Errorf("raise_exception error %v is not an *Exception with message \"no\"", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"{% set ns = namespace(a=1) %}{% for m in messages %}{% if m['role'] == 'user' %}{{ m.content }}{% endif %}{% endfor %}",
		"{{ x | default('y') | trim }}{# c #}",
		"{%- if not a is defined -%}{{ [1, 2][::-1] }}{% elif b %}x{% else %}y{% endif %}",
		"{{ 'a\\n' ~ \"b\" }}",
		"{% macro m(x, y=2) %}{{ x * y }}{{ m(x - 1) if x > 0 }}{% endmacro %}{{ m(3) }}{{ tools | tojson(indent=2) }}",
		"{% for k, v in d.items() %}{{ k }}={{ v | tojson(ensure_ascii=True) }}{% endfor %}{{ 'x' * n }}",
		"{{ messages | selectattr('role', 'eq', 'user') | map(attribute='content') | reverse | join }}{{ 'a b'.split(None, 1) | title }}",
	} {
		f.Add(s)
	}
	vars, err := FromJSON([]byte(`{"d": {"b": [1, 2.5, "é"], "a": {"n": null}}, "n": 3, "tools": [{"type": "function", "function": {"name": "f"}}]}`))
	if err != nil {
		f.Fatal(err)
	}
	lim := Limits{MaxOutputBytes: 1 << 16, MaxIterations: 1 << 12, MaxDepth: 16}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			return
		}
		// A template that parses must render or fail cleanly within its
		// limits, never panic.
		v := map[string]any{
			"messages":              []any{map[string]any{"role": "user", "content": "hi"}},
			"add_generation_prompt": true,
		}
		for _, k := range vars.(*Dict).keys {
			v[k], _ = vars.(*Dict).Get(k)
		}
		out, err := tpl.RenderLimited(v, lim)
		if err == nil && len(out) > lim.MaxOutputBytes {
			t.Fatalf("rendered %d bytes past the %d limit", len(out), lim.MaxOutputBytes)
		}
	})
}

func TestMacrosAndOrder(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"macro with defaults and keywords", "{% macro m(a, b='B', c=a ~ '!') %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m('x', c='C') }}", "[1B1!][xBC]"},
		{"macro sees the template's variables", "{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}", "G"},
		{"macro output is a string", "{% macro m(x) %} {{ x }} {% endmacro %}{{ m(2).strip() ~ '|' }}", "2|"},
		{"recursive macro", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "321"},
		{"dict literals keep their order", "{{ {'z': 1, 'a': 2} | tojson }} {% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}", `{"z": 1, "a": 2} za`},
		{"tojson options", "{{ {'é': [1, 2.5e-7]} | tojson(ensure_ascii=True, indent=2) }}", "{\n  \"\\u00e9\": [\n    1,\n    2.5e-07\n  ]\n}"},
		{"tojson sort_keys", "{{ {'b': 1, 'a': 2} | tojson(sort_keys=True) }}", `{"a": 2, "b": 1}`},
	}
	for _, c := range cases {
		tpl, err := Parse(c.src)
		if err != nil {
			t.Errorf("%s: Parse: %v", c.name, err)
			continue
		}
		got, err := tpl.Render(nil)
		if err != nil {
			t.Errorf("%s: Render: %v", c.name, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	v, err := FromJSON([]byte(`{"b": {"y": 1, "x": [true, null, 2.0, 3]}, "a": "s", "b2": 1e400}`))
	if err != nil {
		t.Fatal(err)
	}
	tpl, _ := Parse("{{ v | tojson }}|{% for k, x in v.items() %}{{ k }}{% endfor %}")
	got, err := tpl.Render(map[string]any{"v": v})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"b": {"y": 1, "x": [true, null, 2.0, 3]}, "a": "s", "b2": Infinity}|bab2`; got != want {
		t.Errorf("FromJSON order: got %s, want %s", got, want)
	}
}

// TestLimits checks that runaway templates stop with the named errors.
func TestLimits(t *testing.T) {
	lim := Limits{MaxOutputBytes: 1 << 16, MaxIterations: 1000, MaxDepth: 8}
	cases := []struct {
		name, src string
		want      error
	}{
		{"output", "{% for i in range(900) %}{{ 'x' * 100 }}{% endfor %}", ErrOutputLimit},
		{"string doubling", "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", ErrOutputLimit},
		{"string repetition", "{{ 'x' * 100000000000 }}", ErrOutputLimit},
		{"list doubling", "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", ErrIterationLimit},
		{"iterations", "{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", ErrIterationLimit},
		{"range length", "{% for i in range(10000000000) %}{% endfor %}", ErrIterationLimit},
		{"recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ErrDepthLimit},
		{"macro calls", "{% macro f() %}{% endmacro %}{% for i in range(600) %}{{ f() }}{{ f() }}{% endfor %}", ErrIterationLimit},
	}
	for _, c := range cases {
		tpl, err := Parse(c.src)
		if err != nil {
			t.Errorf("%s: Parse: %v", c.name, err)
			continue
		}
		if _, err := tpl.RenderLimited(nil, lim); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	for _, src := range []string{strings.Repeat("(", 500) + "1" + strings.Repeat(")", 500), strings.Repeat("{% if x %}", 200) + strings.Repeat("{% endif %}", 200), "{{ " + strings.Repeat("not ", 500) + "x }}", "{{ " + strings.Repeat("-", 500) + "1 }}"} {
		src = "{{ " + src + " }}"
		if strings.HasPrefix(src, "{{ {%") || strings.HasPrefix(src, "{{ {{") {
			src = src[3 : len(src)-3]
		}
		if _, err := Parse(src); err == nil || !strings.Contains(err.Error(), "nested deeper") {
			t.Errorf("Parse of deep nesting %.30q…: %v, want a nesting error", src, err)
		}
	}
	if _, err := Parse(strings.Repeat("x", MaxTemplateBytes+1)); err == nil {
		t.Error("Parse accepted a template over MaxTemplateBytes")
	}
}

// TestSplit follows Python's str.split and str.rsplit.
func TestSplit(t *testing.T) {
	cases := map[string]string{
		"{{ 'a</think>b</think>c'.split('</think>', 1) }}": "['a', 'b</think>c']",
		"{{ 'a,b,c'.rsplit(',', 1) }}":                     "['a,b', 'c']",
		"{{ '  a  b c '.split() }}":                        "['a', 'b', 'c']",
		"{{ '  a  b c '.split(maxsplit=1) }}":              "['a', 'b c ']",
		"{{ '  a  b c '.rsplit(None, 1) }}":                "['  a  b', 'c']",
		"{{ 'a,b'.split(',', 0) }}":                        "['a,b']",
		"{{ 'abc'.split('x') }}":                           "['abc']",
	}
	for src, want := range cases {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got, err := tpl.Render(nil); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
}

// TestCollectionBuiltins follows Jinja2's definitions of these filters and
// tests.
func TestCollectionBuiltins(t *testing.T) {
	msgs := []any{
		map[string]any{"role": "system", "content": "S"},
		map[string]any{"role": "user", "content": "U"},
		map[string]any{"role": "user", "content": "V"},
	}
	cases := map[string]string{
		"{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}": "U,V",
		"{{ messages | rejectattr('role', 'eq', 'user') | list | length }}":                             "1",
		"{{ [1, 0, 2, none] | select | list }}":                                                         "[1, 2]",
		"{{ [1, 2, 3, 4] | reject('odd') | list }}":                                                     "[2, 4]",
		"{{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }}":                                        "[3, 2, 1] cba",
		"{{ ['a', 'b'] | map('upper') | list }}":                                                        "['A', 'B']",
		// A filter binds tighter than unary minus, as in Jinja2.
		"{{ '42' | int + 1 }} {{ 'x' | int(7) }} {{ 2.9 | int }} {{ '1.5' | float }} {{ -3 | abs }} {{ (-3) | abs }}": "43 7 2 1.5 -3 3",
		"{{ 'hELLO wORLD' | capitalize }} {{ 'hello wORLD' | title }}":                                                "Hello world Hello World",
		"{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is in 'abc' }} {{ 1 is ne 2 }}":               "True True True True True",
		"{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 1.5 is float }} {{ range is callable }}":                        "True True True True",
	}
	for src, want := range cases {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got, err := tpl.Render(map[string]any{"messages": msgs}); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
	day := time.Date(2026, 7, 4, 15, 4, 5, 0, time.UTC)
	if got, err := strftime(day, "%d %b %Y %A %I:%M:%S %p %j %%"); err != nil || got != "04 Jul 2026 Saturday 03:04:05 PM 185 %" {
		t.Errorf("strftime = %q, %v", got, err)
	}
	if _, err := strftime(day, "%Q"); err == nil {
		t.Error("strftime accepted %Q")
	}
	tpl, _ := Parse(`{{ strftime_now("%Y") }}`)
	if got, err := tpl.Render(nil); err != nil || got != time.Now().Format("2006") {
		t.Errorf("strftime_now: %q, %v", got, err)
	}
}

// TestListsAreReferences: list methods change the list for every name
// that holds it, as in Python (templates collect items with append).
func TestListsAreReferences(t *testing.T) {
	cases := map[string]string{
		"{% set ns = namespace(items=[]) %}{% for i in range(3) %}{% set _ = ns.items.append(i * 2) %}{% endfor %}{{ ns.items }}":         "[0, 2, 4]",
		"{% set a = [] %}{% set b = a %}{% set _ = b.append(1) %}{{ a }} {{ a | length }}":                                                "[1] 1",
		"{% set a = [1, 2, 3] %}{{ a.pop() }}{{ a.pop(0) }}{{ a }}{% set _ = a.extend(['x']) %}{{ a }}{{ a.index('x') }}{{ a.count(2) }}": "31[2][2, 'x']11",
		"{% set a = [1] %}{% set c = a + [2] %}{% set _ = c.append(3) %}{{ a }}{{ c }}":                                                   "[1][1, 2, 3]",
	}
	for src, want := range cases {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got, err := tpl.Render(nil); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
}
