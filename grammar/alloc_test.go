package grammar

import "testing"

// TestMatcherSteadyStateAllocatesNothing: once a matcher has followed a
// sequence, following it again (Reset, then FillMask and Accept per token,
// and a Rollback) allocates nothing.
func TestMatcherSteadyStateAllocatesNothing(t *testing.T) {
	v, eos := dsVocab(t)
	g := mustCompile(t, Spec{Kind: KindJSONSchema, Text: featureSchemas[0].schema}, v)
	m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{eos}, MaxTokens: 256})
	lm := &randomLM{seed: 3, scale: 2, n: v.Size()}
	rng := newRand(3)
	mask := make([]uint64, v.MaskWords())
	var toks []int
	prev := eos
	for len(toks) < 200 && !m.Done() {
		m.FillMask(mask)
		tok := lm.sample(rng, mask, prev)
		if err := m.Accept(tok); err != nil {
			t.Fatal(err)
		}
		toks, prev = append(toks, tok), tok
	}
	replay := func() {
		m.Reset()
		for _, tok := range toks {
			m.FillMask(mask)
			if err := m.Accept(tok); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Rollback(len(toks) / 2); err != nil {
			t.Fatal(err)
		}
		m.FillMask(mask)
	}
	replay()
	if n := testing.AllocsPerRun(3, replay); n != 0 {
		t.Fatalf("a replayed sequence of %d tokens allocates %v times", len(toks), n)
	}
}
