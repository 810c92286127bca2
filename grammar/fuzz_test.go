package grammar

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// fuzzLimits keep one fuzz input cheap.
func fuzzLimits() Limits {
	lim := DefaultLimits()
	lim.MaxSpecBytes = 4096
	lim.MaxStates = 5000
	lim.MaxRuleNFAStates = 20_000
	lim.MaxMaskSteps = 2_000_000
	lim.MaxCompileTime = 2 * time.Second
	lim.MaxAlternatives = 32
	return lim
}

// walkToy samples a few tokens of g over the toy vocabulary, checking the
// mask against Accept at each step, then completes the output; it returns
// the output.
func walkToy(t *testing.T, g *Grammar, v *Vocab, end int, seed uint64) []byte {
	t.Helper()
	m, err := g.NewMatcher(MatcherOptions{EndTokens: []int{end}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []byte
	mask := make([]uint64, v.MaskWords())
	for step := 0; step < 12 && !m.Done(); step++ {
		checkMaskAgainstAccept(t, m, v, step)
		m.FillMask(mask)
		tok := sample(rng, mask, v.Size(), end, 0.2)
		if tok < 0 {
			t.Fatalf("no token allowed after %q", out)
		}
		if err := m.Accept(tok); err != nil {
			if errors.Is(err, ErrTooDeep) {
				return nil
			}
			t.Fatal(err)
		}
		if tok != end {
			out = append(out, v.TokenBytes(tok)...)
		}
	}
	if !m.Done() {
		for _, c := range completion(m) {
			if err := m.Accept(int(c)); err != nil { // toy ids 0-255 are the bytes
				t.Fatalf("completion byte %q refused after %q: %v", c, out, err)
			}
			out = append(out, c)
		}
		if err := m.Accept(end); err != nil {
			t.Fatalf("end refused after the completion %q: %v", out, err)
		}
	}
	return out
}

func FuzzCompileJSONSchema(f *testing.F) {
	for _, c := range featureSchemas {
		f.Add(c.schema)
	}
	f.Add(`{"type":["integer","string"],"minimum":-3,"maxLength":2}`)
	f.Add(`{"items":{"$ref":"#"},"maxItems":2}`)
	v, end := toyVocab(f)
	f.Fuzz(func(t *testing.T, schema string) {
		g, err := Compile(Spec{Kind: KindJSONSchema, Text: schema}, v, fuzzLimits())
		if err != nil {
			var ge *Error
			if !errors.As(err, &ge) {
				t.Fatalf("refusal %v is not an *Error", err)
			}
			return
		}
		out := walkToy(t, g, v, end, uint64(len(schema)))
		if out == nil {
			return
		}
		// An independent validator must accept the output (when it can
		// read the schema at all).
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(schema)))
		if err != nil {
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.UseRegexpEngine(ecmaRegexp)
		if c.AddResource(defaultBase, doc) != nil {
			return
		}
		val, err := c.Compile(defaultBase)
		if err != nil {
			return
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("output %q does not parse: %v", out, err)
		}
		if err := val.Validate(inst); err != nil {
			t.Fatalf("output %q does not validate against %s: %v", out, schema, err)
		}
	})
}

func FuzzCompileRegex(f *testing.F) {
	for _, s := range []string{`[a-c]{1,3}x?`, `(ab|ba)+`, `\d{3}-\d{4}`, `"[^"\\]*"`, `[\p{Han}é]+`, `a.c`, `^x*$`, `(a|b)*aaa`, `\w+@\w+\.com`, `[^\s]{2}`} {
		f.Add(s)
	}
	v, end := toyVocab(f)
	f.Fuzz(func(t *testing.T, re string) {
		g, err := Compile(Spec{Kind: KindRegex, Text: re}, v, fuzzLimits())
		if err != nil {
			var ge *Error
			if !errors.As(err, &ge) {
				t.Fatalf("refusal %v is not an *Error", err)
			}
			return
		}
		out := walkToy(t, g, v, end, uint64(len(re)))
		// Go's RE2 reads the common syntax the same way; where it cannot
		// compile the pattern, reads counts with leading zeros as literal
		// text (ECMA-262 and Python read {0003} as {3}), or reads a class
		// opening with ']' as holding it (ECMA-262, which the compiler
		// follows, reads [] as matching nothing and [^] as anything), there
		// is nothing to compare.
		goRE, err := regexp.Compile(`^(?:` + re + `)$`)
		if err != nil || bytes.ContainsAny([]byte(re), "^$") || leadingZeroCount.MatchString(re) || strings.Contains(re, "[]") {
			return
		}
		if !goRE.Match(out) {
			t.Fatalf("output %q does not match %q", out, re)
		}
	})
}

var leadingZeroCount = regexp.MustCompile(`[{,]0[0-9]`)

func FuzzCompileGBNF(f *testing.F) {
	for _, c := range gbnfCases {
		f.Add(c.src)
	}
	f.Add(`root ::= ("a" | b)* "."
b ::= [0-9]{1,2} | "(" root ")"`)
	v, end := toyVocab(f)
	f.Fuzz(func(t *testing.T, src string) {
		g, err := Compile(Spec{Kind: KindGrammar, Text: src}, v, fuzzLimits())
		if err != nil {
			var ge *Error
			if !errors.As(err, &ge) {
				t.Fatalf("refusal %v is not an *Error", err)
			}
			return
		}
		walkToy(t, g, v, end, uint64(len(src)))
	})
}

// FuzzMatcher feeds arbitrary token sequences (with rollbacks) to a
// matcher: Accept takes a token exactly when the mask allows it, and a
// rollback returns to the mask seen before.
func FuzzMatcher(f *testing.F) {
	f.Add([]byte{123, 34, 110, 97, 109, 101, 34, 58, 34, 120, 34, 125})
	f.Add([]byte{2, 9, 250, 4, 0, 7})
	v, end := toyVocab(f)
	g, err := Compile(Spec{Kind: KindJSONSchema, Text: featureSchemas[7].schema}, v, testLimits())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{end}})
		mask := make([]uint64, v.MaskWords())
		before := make([]uint64, v.MaskWords())
		for i := 0; i+1 < len(data); i += 2 {
			tok := (int(data[i])<<8 | int(data[i+1])) % v.Size()
			m.FillMask(before)
			err := m.Accept(tok)
			if (err == nil) != maskHas(before, tok) {
				t.Fatalf("token %d: Accept %v, mask %v", tok, err, maskHas(before, tok))
			}
			if err == nil && data[i]&1 == 1 {
				if err := m.Rollback(1); err != nil {
					t.Fatal(err)
				}
				m.FillMask(mask)
				if !bytes.Equal(u64bytes(mask), u64bytes(before)) {
					t.Fatalf("rollback of token %d changed the mask", tok)
				}
			}
		}
	})
}

func u64bytes(w []uint64) []byte {
	out := make([]byte, 0, 8*len(w))
	for _, x := range w {
		for k := range 8 {
			out = append(out, byte(x>>(8*k)))
		}
	}
	return out
}
