package grammar

import (
	"os"
	"testing"
	"time"
)

// The benchmark schemas: a small one (three properties) and a large one
// (an order with nested objects, arrays, enums, formats, patterns, bounded
// numbers, oneOf and a recursive $ref; testdata/large-schema.json).
func benchSchemas(b *testing.B) map[string]string {
	large, err := os.ReadFile("testdata/large-schema.json")
	if err != nil {
		b.Fatal(err)
	}
	return map[string]string{"small": featureSchemas[0].schema, "large": string(large)}
}

// benchLimits are the server's limits with room for a loaded machine:
// benchmarks measure compilation, they do not serve it.
func benchLimits() Limits {
	lim := DefaultLimits()
	lim.MaxCompileTime = 2 * time.Minute
	return lim
}

// freshVocab is the DeepSeek-V3 vocabulary with an empty mask cache (its
// trie reused), for cold compilations.
func freshVocab(v *Vocab) *Vocab {
	c := &Vocab{size: v.size, text: v.text, off: v.off, words: v.words, maxLen: v.maxLen, trieByte: v.trieByte,
		trieDepth: v.trieDepth, trieEnd: v.trieEnd, trieTokOff: v.trieTokOff, trieTok: v.trieTok, trieMax: v.trieMax, nodeOf: v.nodeOf}
	c.cache.limit = MaskCacheBytes
	return c
}

// BenchmarkCompile: compiling a schema for the DeepSeek-V3 vocabulary with
// no mask of the vocabulary cached (the first schema a server sees; a
// schema that comes back is kept by the server's Compiler and costs a
// hash lookup).
func BenchmarkCompile(b *testing.B) {
	v, _ := dsVocab(b)
	for _, name := range []string{"small", "large"} {
		spec := Spec{Kind: KindJSONSchema, Text: benchSchemas(b)[name]}
		b.Run(name, func(b *testing.B) {
			var st Stats
			for b.Loop() {
				g, err := Compile(spec, freshVocab(v), benchLimits())
				if err != nil {
					b.Fatal(err)
				}
				st = g.Stats()
			}
			b.ReportMetric(float64(st.ReachableStates), "states")
			b.ReportMetric(float64(st.MaskSteps), "mask-steps")
			b.ReportMetric(float64(st.MaskBytes), "mask-bytes")
		})
	}
}

// BenchmarkMask: the per-token cost of structured output in a decode step
// (FillMask, then Accept of the sampled token) over four sequences of up
// to 256 tokens sampled from a random model. Cold: the first request with
// the schema, a new matcher on a grammar just compiled against a vocabulary
// with no masks cached (its masks not yet in the CPU's caches; the
// compilation itself is BenchmarkCompile's); warm: a matcher of a grammar
// in use, replaying sequences it has seen.
func BenchmarkMask(b *testing.B) {
	v, eos := dsVocab(b)
	for _, name := range []string{"small", "large"} {
		schema := benchSchemas(b)[name]
		g, err := Compile(Spec{Kind: KindJSONSchema, Text: schema}, v, benchLimits())
		if err != nil {
			b.Fatal(err)
		}
		// The sequences: four seeds, 256 tokens at most each.
		var seqs [][]int
		for seed := range 4 {
			m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{eos}, MaxTokens: 256})
			lm := &randomLM{seed: uint64(seed), scale: 2, n: v.Size()}
			rng := newRand(uint64(seed))
			mask := make([]uint64, v.MaskWords())
			var toks []int
			prev := eos
			for len(toks) < 256 && !m.Done() {
				m.FillMask(mask)
				tok := lm.sample(rng, mask, prev)
				if err := m.Accept(tok); err != nil {
					b.Fatal(err)
				}
				toks, prev = append(toks, tok), tok
			}
			seqs = append(seqs, toks)
		}
		total := 0
		for _, s := range seqs {
			total += len(s)
		}
		mask := make([]uint64, v.MaskWords())
		run := func(m *Matcher) {
			for _, toks := range seqs {
				m.Reset()
				for _, tok := range toks {
					m.FillMask(mask)
					if err := m.Accept(tok); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		b.Run(name+"/warm", func(b *testing.B) {
			m, _ := g.NewMatcher(MatcherOptions{EndTokens: []int{eos}, MaxTokens: 256})
			run(m)
			for b.Loop() {
				run(m)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*total), "ns/token")
			b.ReportMetric(float64(total), "tokens")
		})
		b.Run(name+"/cold", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				cg, err := Compile(Spec{Kind: KindJSONSchema, Text: schema}, freshVocab(v), benchLimits())
				if err != nil {
					b.Fatal(err)
				}
				m, _ := cg.NewMatcher(MatcherOptions{EndTokens: []int{eos}, MaxTokens: 256})
				b.StartTimer()
				run(m)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*total), "ns/token")
			b.ReportMetric(float64(total), "tokens")
		})
	}
}
