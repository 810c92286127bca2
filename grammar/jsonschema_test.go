package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// featureSchemas exercise each supported keyword; outputs sampled from a
// random model must parse and validate.
var featureSchemas = []struct{ name, schema string }{
	{"object", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string"},"maxItems":3}},"required":["name"],"additionalProperties":false}`},
	{"additional", `{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":{"type":"boolean"}}`},
	{"free object", `{"type":"object"}`},
	{"enum const", `{"type":"object","properties":{"kind":{"enum":["a","b",3,null,{"x":[1]}]},"v":{"const":"fixed \"quoted\""}},"required":["kind","v"]}`},
	{"anyOf", `{"anyOf":[{"type":"string","maxLength":4},{"type":"number","exclusiveMinimum":-2.5,"maximum":7.25},{"type":"null"}]}`},
	{"oneOf tagged", `{"oneOf":[{"type":"object","properties":{"t":{"const":"a"},"x":{"type":"integer"}},"required":["t","x"]},{"type":"object","properties":{"t":{"const":"b"},"y":{"type":"string"}},"required":["t"]}]}`},
	{"allOf", `{"allOf":[{"type":"object","properties":{"a":{"type":"integer","minimum":3}},"required":["a"]},{"properties":{"a":{"maximum":9},"b":{"type":"string"}},"required":["b"]}]}`},
	{"recursive ref", `{"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["value"]}},"$ref":"#/$defs/node"}`},
	{"anchor and id", `{"$id":"https://example.com/root.json","$defs":{"s":{"$anchor":"short","type":"string","maxLength":2},"n":{"$id":"num.json","type":"integer"}},"type":"array","prefixItems":[{"$ref":"#short"},{"$ref":"num.json"}]}`},
	{"prefixItems", `{"type":"array","prefixItems":[{"type":"boolean"},{"type":"string","minLength":2}],"items":{"type":"integer"},"minItems":1,"maxItems":4}`},
	{"tuple draft7", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"integer"},{"type":"string"}],"additionalItems":false}`},
	{"pattern", `{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"},"word":{"type":"string","pattern":"ab+c"}},"required":["code","word"]}`},
	{"pattern and length", `{"type":"string","pattern":"^[a-z]+$","minLength":3,"maxLength":5}`},
	{"formats", `{"type":"object","properties":{"d":{"type":"string","format":"date"},"t":{"type":"string","format":"date-time"},"e":{"type":"string","format":"email"},"u":{"type":"string","format":"uuid"},"i":{"type":"string","format":"ipv4"},"h":{"type":"string","format":"hostname"},"r":{"type":"string","format":"uri"},"p":{"type":"string","format":"duration"}},"required":["d","t","e","u","i","h","r","p"]}`},
	{"integer range", `{"type":"array","items":{"type":"integer","minimum":-120,"exclusiveMaximum":1000},"minItems":3,"maxItems":3}`},
	{"number range", `{"type":"array","items":{"type":"number","minimum":0.125,"maximum":3},"minItems":2,"maxItems":2}`},
	{"type list", `{"type":["string","null","boolean"]}`},
	{"unevaluatedProperties", `{"type":"object","properties":{"a":{"type":"string"}},"allOf":[{"properties":{"b":{"type":"integer"}}}],"unevaluatedProperties":false,"required":["a","b"]}`},
	{"escaped names", `{"type":"object","properties":{"a\"b":{"type":"integer"},"c\\d\n":{"type":"boolean"}},"required":["a\"b","c\\d\n"]}`},
	{"boolean schemas", `{"type":"object","properties":{"x":true,"no":false},"required":["x"]}`},
}

func compileValidator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	return validator(t, []byte(schema))
}

func TestFeatureSchemasValidate(t *testing.T) {
	v, eos := dsVocab(t)
	bytesOf := byteTokens(t, v)
	for i, c := range featureSchemas {
		t.Run(c.name, func(t *testing.T) {
			g := mustCompile(t, Spec{Kind: KindJSONSchema, Text: c.schema}, v)
			val := compileValidator(t, c.schema)
			for seed := range 8 {
				lm := &randomLM{seed: uint64(1000*i + seed), scale: 2, n: v.Size()}
				gen := generate(t, g, lm, uint64(seed), eos, 300, bytesOf)
				inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(gen.text))
				if err != nil {
					t.Fatalf("seed %d: %q does not parse: %v", seed, gen.text, err)
				}
				if err := val.Validate(inst); err != nil {
					t.Fatalf("seed %d: %q does not validate: %v", seed, gen.text, err)
				}
			}
		})
	}
}

func TestWhitespaceOptions(t *testing.T) {
	v, eos := dsVocab(t)
	bytesOf := byteTokens(t, v)
	schema := `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]}`
	for _, c := range []struct {
		spec Spec
		ok   func([]byte) bool
	}{
		{Spec{Kind: KindJSONSchema, Text: schema, NoWhitespace: true}, func(b []byte) bool { return !bytes.ContainsAny(b, " \t\n\r") }},
		{Spec{Kind: KindJSONSchema, Text: schema, WhitespacePattern: ` ?`}, func(b []byte) bool { return !bytes.ContainsAny(b, "\t\n\r") && !bytes.Contains(b, []byte("  ")) }},
	} {
		g := mustCompile(t, c.spec, v)
		for seed := range 6 {
			lm := &randomLM{seed: uint64(seed), scale: 2, n: v.Size()}
			gen := generate(t, g, lm, uint64(seed), eos, 200, bytesOf)
			if !json.Valid(gen.text) || !c.ok(gen.text) {
				t.Fatalf("%+v seed %d: %q", c.spec, seed, gen.text)
			}
		}
	}
}

func TestJSONObject(t *testing.T) {
	v, eos := dsVocab(t)
	bytesOf := byteTokens(t, v)
	g := mustCompile(t, Spec{Kind: KindJSONObject}, v)
	for seed := range 10 {
		lm := &randomLM{seed: uint64(seed), scale: 2, n: v.Size()}
		gen := generate(t, g, lm, uint64(seed), eos, 300, bytesOf)
		var obj map[string]any
		if err := json.Unmarshal(gen.text, &obj); err != nil {
			t.Fatalf("seed %d: %q is not a JSON object: %v", seed, gen.text, err)
		}
	}
	// No properties with disable_additional_properties: only {}.
	g = mustCompile(t, Spec{Kind: KindJSONObject, NoAdditionalProperties: true, NoWhitespace: true}, v)
	gen := generate(t, g, &randomLM{seed: 1, scale: 2, n: v.Size()}, 1, eos, 50, bytesOf)
	if string(gen.text) != "{}" {
		t.Fatalf("json_object without additional properties gave %q, want {}", gen.text)
	}
}

// TestRefusals: what the grammar cannot enforce is refused by keyword.
func TestRefusals(t *testing.T) {
	v, _ := toyVocab(t)
	for _, c := range []struct {
		spec    Spec
		keyword string
		limit   string
	}{
		{Spec{Kind: KindJSONSchema, Text: `{"type":"array","uniqueItems":true}`}, "uniqueItems", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"type":"integer","multipleOf":3}`}, "multipleOf", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"not":{"type":"string"}}`}, "not", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"if":{"type":"string"},"then":{"maxLength":2}}`}, "if", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"patternProperties":{"^x":{"type":"string"}}}`}, "patternProperties", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"type":"string","format":"iri"}`}, "format", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"$ref":"https://example.com/other.json"}`}, "$ref", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"$dynamicRef":"#x"}`}, "$dynamicRef", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"type":"object","maxPropertes":3}`}, "maxPropertes", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"oneOf":[{"type":"integer"},{"minimum":2}]}`}, "oneOf", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"type":"string","pattern":"(?=a)b"}`}, "lookaround", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"type":"string","pattern":"(a)\\1"}`}, "backreference", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`}, "$ref", ""},
		{Spec{Kind: KindJSONSchema, Text: `{"type":"string","maxLength":1000000}`}, "", "MaxRuleNFAStates"},
		{Spec{Kind: KindRegex, Text: `\bword\b`}, "word boundary", ""},
		{Spec{Kind: KindRegex, Text: `(?i)abc`}, "inline flags", ""},
		{Spec{Kind: KindGrammar, Text: `root ::= root "a" | "b"`}, "left recursion", ""},
		{Spec{Kind: KindGrammar, Text: `root ::= x
x ::= y "a" | "c"
y ::= "" | x`}, "left recursion", ""},
		{Spec{Kind: KindChoice, Choices: []string{strings.Repeat("x", 2<<20)}}, "", "MaxSpecBytes"},
	} {
		_, err := Compile(c.spec, v, testLimits())
		var ge *Error
		if !errors.As(err, &ge) {
			t.Errorf("%v %q: got %v, want a refusal", c.spec.Kind, trunc(c.spec.Text), err)
			continue
		}
		if got := [2]string{ge.Keyword, ge.Limit}; got != [2]string{c.keyword, c.limit} {
			t.Errorf("%v %q: refused with keyword %q limit %q (%v), want %q %q", c.spec.Kind, trunc(c.spec.Text), ge.Keyword, ge.Limit, err, c.keyword, c.limit)
		}
	}
	for _, spec := range []Spec{
		{Kind: KindJSONSchema, Text: `false`},
		{Kind: KindJSONSchema, Text: `{"enum":[]}`},
		{Kind: KindJSONSchema, Text: `{"type":"integer","minimum":5,"maximum":4}`},
		{Kind: KindJSONSchema, Text: `{"type":"string","enum":[1,2]}`},
		{Kind: KindJSONSchema, Text: `{"type":"object","properties":{"a":false},"required":["a"]}`},
	} {
		if _, err := Compile(spec, v, testLimits()); !errors.Is(err, ErrUnsatisfiable) {
			t.Errorf("%q: got %v, want ErrUnsatisfiable", spec.Text, err)
		}
	}
	for _, spec := range []Spec{
		{Kind: KindJSONSchema, Text: `{"type":`},
		{Kind: KindJSONSchema, Text: `{"a":1,"a":2}`},
		{Kind: KindGrammar, Text: `start: "a"`},
		{Kind: KindGrammar, Text: `x ::= "a"`},
		{Kind: KindGrammar, Text: `root ::= x`},
		{Kind: KindRegex, Text: `a(b`},
		{Kind: KindChoice},
	} {
		if _, err := Compile(spec, v, testLimits()); err == nil {
			t.Errorf("%v %q compiled", spec.Kind, spec.Text)
		}
	}
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// TestNumberRanges checks the bounded-number automata against exact
// arithmetic on many decimals near the bounds.
func TestNumberRanges(t *testing.T) {
	lim := testLimits()
	rng := rand.New(rand.NewPCG(9, 9))
	bounds := []string{"0", "-0.5", "0.125", "3", "-120", "1000", "1.05", "-7.25", "99.99", "100", "1e2", "2.5e-3"}
	for _, lo := range append([]string{""}, bounds...) {
		for _, hi := range append([]string{""}, bounds...) {
			for _, excl := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				for _, integer := range []bool{false, true} {
					cs := newCset()
					if lo != "" {
						r, _ := new(big.Rat).SetString(lo)
						cs.lo = &numBound{v: r, incl: !excl[0], src: lo}
					}
					if hi != "" {
						r, _ := new(big.Rat).SetString(hi)
						cs.hi = &numBound{v: r, incl: !excl[1], src: hi}
					}
					c := &schemaCompiler{lim: lim, b: newBuilder(lim), stringRule: -1, numberRule: -1, integerRule: -1, valueRule: -1}
					e, err := c.number(cs, integer)
					if err != nil {
						t.Fatal(err)
					}
					if e.kind == exCall {
						continue // unbounded: the shared rule
					}
					dfa, err := regularDFA(e, lim)
					if err != nil {
						t.Fatal(err)
					}
					for range 300 {
						s := randomDecimal(rng, integer)
						r, _ := new(big.Rat).SetString(s)
						want := true
						if cs.lo != nil {
							k := r.Cmp(cs.lo.v)
							want = want && (k > 0 || (k == 0 && cs.lo.incl))
						}
						if cs.hi != nil {
							k := r.Cmp(cs.hi.v)
							want = want && (k < 0 || (k == 0 && cs.hi.incl))
						}
						if s == "-0" || strings.HasPrefix(s, "-0.") && r.Sign() == 0 {
							continue // negative zero: either answer is valid
						}
						if got := matchesRegular(dfa, []byte(s)); got != want {
							t.Fatalf("bounds [%s %v, %s %v] integer %v: %s matches %v, want %v", lo, !excl[0], hi, !excl[1], integer, s, got, want)
						}
					}
				}
			}
		}
	}
}

// randomDecimal is a canonical decimal literal, often near small values.
func randomDecimal(rng *rand.Rand, integer bool) string {
	var sb strings.Builder
	if rng.IntN(2) == 0 {
		sb.WriteByte('-')
	}
	switch rng.IntN(4) {
	case 0:
		sb.WriteString("0")
	default:
		n := 1 + rng.IntN(4)
		sb.WriteByte(byte('1' + rng.IntN(9)))
		for range n - 1 {
			sb.WriteByte(byte('0' + rng.IntN(10)))
		}
	}
	if !integer && rng.IntN(2) == 0 {
		sb.WriteByte('.')
		for range 1 + rng.IntN(4) {
			sb.WriteByte(byte('0' + rng.IntN(10)))
		}
	}
	return sb.String()
}

func TestCanonicalStrings(t *testing.T) {
	for _, s := range []string{"plain", `q"b\s`, "\x00\x01\x1f\n\t\r\b\f", "é中😀", ""} {
		got := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil || back != s {
			t.Fatalf("%q spelled %s reads back %q (%v)", s, got, back, err)
		}
	}
	if diff := cmp.Diff(`"\u001f\"\\é"`, string(appendJSONString(nil, "\x1f\"\\é"))); diff != "" {
		t.Fatal(diff)
	}
}

// TestStringEscapes: a free string (and one bounded only by its length)
// reads every one-character escape JSON has, \u00XX for controls included,
// each counting one character; a string a pattern, format or enum
// constrains reads only its canonical spelling, so the constraint holds on
// the value.
func TestStringEscapes(t *testing.T) {
	v, end := toyVocab(t)
	for _, c := range []struct {
		schema, text string
		ok           bool
	}{
		{`{"type":"string"}`, `"a\/b\u001F\n\"\\"`, true},
		{`{"type":"string","maxLength":2}`, `"\/\u0001"`, true},
		{`{"type":"string","maxLength":2}`, `"\/\u0001x"`, false},
		{`{"type":"string","minLength":2}`, `"\/"`, false},
		{`{"type":"string"}`, `"\u0041"`, false},       // not a control: spelled as itself
		{`{"type":"string"}`, `"\ud83d\ude00"`, false}, // surrogate halves
		{`{"type":"string","pattern":"^a/b$"}`, `"a\/b"`, false},
		{`{"type":"string","pattern":"^a/b$"}`, `"a/b"`, true},
		{`{"enum":["a/b"]}`, `"a\/b"`, false},
	} {
		g := mustCompile(t, Spec{Kind: KindJSONSchema, Text: c.schema}, v)
		m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{end}})
		ok := true
		for i := 0; i < len(c.text) && ok; i++ {
			ok = m.Accept(int(c.text[i])) == nil
		}
		ok = ok && m.Accept(end) == nil
		if ok != c.ok {
			t.Errorf("%s reading %s: accepted %v, want %v", c.schema, c.text, ok, c.ok)
		}
		if c.ok {
			var s string
			if err := json.Unmarshal([]byte(c.text), &s); err != nil {
				t.Errorf("%s is not a JSON string: %v", c.text, err)
			}
		}
	}
}
