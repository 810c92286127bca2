package grammar

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// checkMaskAgainstAccept compares the mask with the ground truth: a token
// is allowed exactly when Accept takes it (Accept reads the token's bytes
// through the whole stack set, without the precomputed masks).
func checkMaskAgainstAccept(t *testing.T, m *Matcher, v *Vocab, step int) {
	t.Helper()
	mask := make([]uint64, v.MaskWords())
	m.FillMask(mask)
	for tok := range v.Size() {
		want := m.Allows(tok)
		if got := maskHas(mask, tok); got != want {
			t.Fatalf("step %d: token %d (%q): mask says %v, Accept says %v", step, tok, v.TokenBytes(tok), got, want)
		}
	}
}

var gbnfCases = []struct {
	name, src string
	// re is an independent reading of the same language for Go's regexp
	// (empty when the language is not regular).
	re string
}{
	{"yesno", `root ::= "yes" | "no"`, `yes|no`},
	{"list", `root ::= "[" item ("," item)* "]"
item ::= [a-c]+ | "\"" [^"]* "\""`, `\[(?:[a-c]+|"[^"]*")(?:,(?:[a-c]+|"[^"]*"))*\]`},
	{"nested", `root ::= value
value ::= "[" ( value ( "," value )* )? "]" | [0-9]+`, ``},
	{"nullable", `root ::= a b "!"
a ::= "x"*
b ::= ("y" | "")`, `x*y?!`},
	{"counted", `root ::= [ab]{2,4} "-" [0-9]{3}`, `[ab]{2,4}-[0-9]{3}`},
	{"unicode", `root ::= "中" [à-ÿ]+ .`, `中[à-ÿ]+(?s:.)`},
}

func TestMaskEqualsAcceptToy(t *testing.T) {
	v, end := toyVocab(t)
	for _, c := range gbnfCases {
		t.Run(c.name, func(t *testing.T) {
			g := mustCompile(t, Spec{Kind: KindGrammar, Text: c.src}, v)
			for seed := range 20 {
				rng := rand.New(rand.NewPCG(uint64(seed), 1))
				m, err := g.NewMatcher(MatcherOptions{EndTokens: []int{end}})
				if err != nil {
					t.Fatal(err)
				}
				var out []byte
				for step := 0; step < 60 && !m.Done(); step++ {
					checkMaskAgainstAccept(t, m, v, step)
					mask := make([]uint64, v.MaskWords())
					m.FillMask(mask)
					tok := sample(rng, mask, v.Size(), end, 0.3)
					if tok < 0 {
						t.Fatalf("seed %d step %d: no token allowed after %q", seed, step, out)
					}
					if err := m.Accept(tok); err != nil {
						t.Fatalf("seed %d: masked token refused: %v", seed, err)
					}
					if tok != end {
						out = append(out, v.TokenBytes(tok)...)
					}
				}
				if m.Done() && c.re != "" {
					if !regexp.MustCompile(`^(?:` + c.re + `)$`).Match(out) {
						t.Fatalf("seed %d: output %q does not match %s", seed, out, c.re)
					}
				}
			}
		})
	}
}

func TestMaskEqualsAcceptDeepSeek(t *testing.T) {
	if testing.Short() {
		t.Skip("walks the whole vocabulary per step")
	}
	v, eos := dsVocab(t)
	for _, c := range gbnfCases[:3] {
		t.Run(c.name, func(t *testing.T) {
			g := mustCompile(t, Spec{Kind: KindGrammar, Text: c.src}, v)
			rng := rand.New(rand.NewPCG(7, 1))
			m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{eos}})
			for step := 0; step < 4 && !m.Done(); step++ {
				checkMaskAgainstAccept(t, m, v, step)
				mask := make([]uint64, v.MaskWords())
				m.FillMask(mask)
				tok := sample(rng, mask, v.Size(), eos, 0.3)
				if err := m.Accept(tok); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestRegexOutputsMatch(t *testing.T) {
	v, end := toyVocab(t)
	for _, re := range []string{
		`[a-c]{1,3}x?`, `(ab|ba)+`, `\d{3}-\d{4}`, `"[^"\\]*"`, `(?:yes|no|maybe)`, `[\p{Han}é]+`, `a.c`, `^x*$`, `(a|b)*aaa`,
	} {
		t.Run(re, func(t *testing.T) {
			g := mustCompile(t, Spec{Kind: KindRegex, Text: re}, v)
			goRE := regexp.MustCompile(`^(?:` + strings.TrimSuffix(strings.TrimPrefix(re, "^"), "$") + `)$`)
			for seed := range 30 {
				rng := rand.New(rand.NewPCG(uint64(seed), 2))
				m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{end}})
				var out []byte
				for step := 0; step < 40 && !m.Done(); step++ {
					mask := make([]uint64, v.MaskWords())
					m.FillMask(mask)
					tok := sample(rng, mask, v.Size(), end, 0.4)
					if tok < 0 {
						t.Fatalf("no token allowed after %q", out)
					}
					if err := m.Accept(tok); err != nil {
						t.Fatal(err)
					}
					if tok != end {
						out = append(out, v.TokenBytes(tok)...)
					}
				}
				if m.Done() && !goRE.Match(out) {
					t.Fatalf("seed %d: %q does not match %s", seed, out, re)
				}
			}
		})
	}
}

func TestRollback(t *testing.T) {
	v, end := toyVocab(t)
	g := mustCompile(t, Spec{Kind: KindGrammar, Text: gbnfCases[2].src}, v)
	m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{end}})
	rng := rand.New(rand.NewPCG(3, 3))
	var masks [][]uint64
	var toks []int
	for step := 0; step < 30 && !m.Done(); step++ {
		mask := make([]uint64, v.MaskWords())
		m.FillMask(mask)
		masks = append(masks, mask)
		tok := sample(rng, mask, v.Size(), end, 0.1)
		if err := m.Accept(tok); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	// Roll back k tokens at a time and check the mask is the one seen
	// then; re-accepting the same tokens reaches the same masks.
	for k := 1; k <= len(toks); k += 3 {
		if err := m.Rollback(k); err != nil {
			t.Fatal(err)
		}
		at := len(toks) - k
		got := make([]uint64, v.MaskWords())
		m.FillMask(got)
		if fmt.Sprint(got) != fmt.Sprint(masks[at]) {
			t.Fatalf("after rollback of %d: mask differs from step %d's", k, at)
		}
		if n := m.AcceptDraft(toks[at:]); n != k {
			t.Fatalf("re-accepting %d drafts took %d", k, n)
		}
	}
	if err := m.Rollback(len(toks) + 1); err == nil {
		t.Fatal("rollback past the start was accepted")
	}
	// A draft with a token the grammar refuses stops there.
	m.Reset()
	if n := m.AcceptDraft([]int{'[', '1', ']', '['}); n != 3 {
		t.Fatalf("AcceptDraft took %d of [1][, want 3", n)
	}
	if !m.Complete() || !m.CanEnd() {
		t.Fatal("[1] is a complete output")
	}
}

func TestAcceptRefusals(t *testing.T) {
	v, end := toyVocab(t)
	g := mustCompile(t, Spec{Kind: KindChoice, Choices: []string{"yes", "no"}}, v)
	m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{end}})
	if err := m.Accept(end); err == nil {
		t.Fatal("end token accepted before any output")
	}
	if err := m.Accept('x'); err == nil {
		t.Fatal("x accepted")
	}
	if err := m.Accept('y'); err != nil {
		t.Fatal(err)
	}
	if m.CanEnd() {
		t.Fatal("y can end")
	}
	if err := m.Accept(256 + 35 - 33); err == nil { // "yes" after y
		t.Fatal("yyes accepted")
	}
	for _, c := range "es" {
		if err := m.Accept(int(c)); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Complete() {
		t.Fatal("yes is complete")
	}
	mask := make([]uint64, v.MaskWords())
	m.FillMask(mask)
	if got := maskTokens(mask, v.Size()); len(got) != 1 || got[0] != end {
		t.Fatalf("after yes the mask allows %v, want only the end token", got)
	}
	if err := m.Accept(end); err != nil || !m.Done() {
		t.Fatal(err)
	}
	m.FillMask(mask)
	if len(maskTokens(mask, v.Size())) != 0 {
		t.Fatal("something allowed after the end")
	}
}

// TestSharedMasksEqualAccept: the states of counted repetitions take the
// masks of k-equivalent states computed before them (whole, or their short
// tokens); at every step of sampled outputs the mask must still be exactly
// the tokens Accept takes.
func TestSharedMasksEqualAccept(t *testing.T) {
	if testing.Short() {
		t.Skip("walks the whole vocabulary per step")
	}
	v, eos := dsVocab(t)
	spec := Spec{Kind: KindJSONSchema, NoWhitespace: true, Text: `{"type":"object","properties":{
		"s":{"type":"string","minLength":2,"maxLength":40},
		"p":{"type":"string","pattern":"^[a-z]{3,12}-[0-9]{2,6}$"}},"required":["s","p"],"additionalProperties":false}`}
	g := mustCompile(t, spec, v)
	if st := g.Stats(); st.SharedStates+st.PartlySharedStates == 0 {
		t.Fatalf("no state shared a mask: %+v", st)
	}
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 3))
		m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{eos}})
		mask := make([]uint64, v.MaskWords())
		for step := 0; step < 40 && !m.Done(); step++ {
			if step%4 == 0 {
				checkMaskAgainstAccept(t, m, v, step)
			}
			m.FillMask(mask)
			tok := sample(rng, mask, v.Size(), eos, 0.05)
			if err := m.Accept(tok); err != nil {
				t.Fatal(err)
			}
		}
	}
}
