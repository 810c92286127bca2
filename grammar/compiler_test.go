package grammar

import (
	"testing"
)

// TestCompilerKeepsRecentGrammars: a constraint that comes back is served
// from the compiler's cache while the grammars kept fit the byte budget,
// the least recently used goes first, the last compiled stays whatever its
// size, the vocabulary is built once, and a refusal is not cached.
func TestCompilerKeepsRecentGrammars(t *testing.T) {
	v, _ := toyVocab(t)
	built := 0
	vocab := func() (*Vocab, error) { built++; return v, nil }
	spec := func(re string) Spec { return Spec{Kind: KindRegex, Text: re} }
	compile := func(c *Compiler, re string) *Grammar {
		t.Helper()
		g, err := c.Compile(spec(re))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}

	// A budget of one byte keeps only the last grammar.
	one := NewCompiler(vocab, testLimits(), 1)
	a := compile(one, "a+")
	if a.Stats().MaskBytes <= 1 {
		t.Fatalf("a+ has %d mask bytes; the test needs more than the budget", a.Stats().MaskBytes)
	}
	if compile(one, "a+") != a {
		t.Error("the last grammar was not kept")
	}
	compile(one, "b+")
	if compile(one, "a+") == a {
		t.Error("a grammar was kept past the budget")
	}

	// A large budget keeps them all; shrunk below what they take, the
	// least recently used goes first.
	v, _ = toyVocab(t) // no masks cached
	all := NewCompiler(func() (*Vocab, error) { built++; return v, nil }, testLimits(), 1<<30)
	a, b := compile(all, "a+"), compile(all, "b+")
	if compile(all, "a+") != a || compile(all, "b+") != b {
		t.Error("grammars within the budget were compiled again")
	}
	compile(all, "a+") // b is now the least recently used
	all.keepBytes = all.kept - 1
	compile(all, "c+")
	if _, ok := all.byKey[keyOf(spec("b+"))]; ok {
		t.Error("the least recently used grammar was kept past the budget")
	}
	if _, ok := all.byKey[keyOf(spec("a+"))]; ok && all.kept > all.keepBytes {
		t.Errorf("%d mask bytes kept, the budget is %d", all.kept, all.keepBytes)
	}

	if _, err := one.Compile(spec("(?=x)")); err == nil {
		t.Error("a lookahead compiled")
	}
	if _, err := one.Compile(spec("(?=x)")); err == nil {
		t.Error("a refused constraint compiled the second time")
	}
	if built != 2 {
		t.Errorf("the vocabularies were built %d times, want once each", built)
	}
}
