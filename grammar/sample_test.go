package grammar

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// randomLM is a random-weight bigram language model over a vocabulary:
// the logit of token t after token p is a seeded Gaussian weight
// w[p][t] · scale (clipped at three deviations), drawn on demand from a hash of (seed, p, t), so it costs
// nothing to hold. Sampling is at temperature 1 from the softmax over the
// tokens a mask allows, exactly (rejection from the uniform proposal for
// wide masks, enumeration for narrow ones).
type randomLM struct {
	seed  uint64
	scale float64
	n     int
	// scratch
	ids []int
	w   []float64
}

func (lm *randomLM) logit(prev, t int) float64 {
	h := lm.seed ^ uint64(prev)*0x9e3779b97f4a7c15 ^ uint64(t)*0xc2b2ae3d27d4eb4f
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	// Box-Muller from two 26-bit halves.
	u1 := (float64(h>>38) + 0.5) / (1 << 26)
	u2 := float64(h&(1<<26-1)) / (1 << 26)
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	return lm.scale * max(-3, min(3, z))
}

// bound is the largest logit (weights are clipped at three deviations).
func (lm *randomLM) bound() float64 { return 3 * lm.scale }

// sample draws the next token after prev among the tokens of mask (-1
// when it allows none).
func (lm *randomLM) sample(rng *rand.Rand, mask []uint64, prev int) int {
	count := 0
	for _, w := range mask {
		count += bits.OnesCount64(w)
	}
	if count == 0 {
		return -1
	}
	if count*8 >= lm.n {
		// Rejection: uniform proposal over the vocabulary, accepted when
		// allowed and with probability exp(logit - bound).
		b := lm.bound()
		for {
			t := rng.IntN(lm.n)
			if mask[t>>6]&(1<<(t&63)) == 0 {
				continue
			}
			if rng.Float64() < math.Exp(lm.logit(prev, t)-b) {
				return t
			}
		}
	}
	lm.ids, lm.w = lm.ids[:0], lm.w[:0]
	mx := math.Inf(-1)
	for i, w := range mask {
		for w != 0 {
			t := i*64 + bits.TrailingZeros64(w)
			w &= w - 1
			l := lm.logit(prev, t)
			lm.ids = append(lm.ids, t)
			lm.w = append(lm.w, l)
			mx = max(mx, l)
		}
	}
	total := 0.0
	for i, l := range lm.w {
		lm.w[i] = math.Exp(l - mx)
		total += lm.w[i]
	}
	x := rng.Float64() * total
	for i, p := range lm.w {
		if x -= p; x < 0 {
			return lm.ids[i]
		}
	}
	return lm.ids[len(lm.ids)-1]
}

// completion returns bytes that complete the matcher's output, following
// the shortest way to the end of the grammar from one of its stacks.
func completion(m *Matcher) []byte {
	a := m.g.a
	dist := a.distances()
	set, bottom := m.current()
	if bottom || len(set) == 0 {
		return nil
	}
	// The stack with the shortest completion.
	best, bestLen := int32(-1), math.MaxInt
	for _, n := range set {
		l := 0
		for x := n; x != 0; x = m.ns.parent[x] {
			l += dist[m.ns.state[x]]
		}
		if l < bestLen {
			best, bestLen = n, l
		}
	}
	var out []byte
	var finish func(s int32)
	// finish appends the shortest bytes from state s to the end of its rule.
	finish = func(s int32) {
		for {
			st := &a.states[s]
			if dist[s] == 0 && st.final {
				return
			}
			moved := false
			if st.hasBytes {
				r := &a.rules[st.rule]
				for c := range 256 {
					t := a.trans[st.trans+int32(r.classMap[c])]
					if t >= 0 && 1+dist[t] == dist[s] {
						out = append(out, byte(c))
						s, moved = t, true
						break
					}
				}
			}
			if moved {
				continue
			}
			for _, c := range a.callsOf(s) {
				if dist[a.rules[c.rule].start]+dist[c.next] == dist[s] {
					finish(a.rules[c.rule].start)
					s, moved = c.next, true
					break
				}
			}
			if !moved {
				panic("grammar: no way to finish a state")
			}
		}
	}
	for x := best; x != 0; x = m.ns.parent[x] {
		finish(m.ns.state[x])
	}
	return out
}

// distances is, per state, the fewest bytes to the end of its rule.
func (a *automaton) distances() []int {
	const inf = math.MaxInt / 4
	d := make([]int, len(a.states))
	for i := range d {
		d[i] = inf
		if a.states[i].final {
			d[i] = 0
		}
	}
	for changed := true; changed; {
		changed = false
		for s := range a.states {
			st := &a.states[s]
			best := d[s]
			if st.hasBytes {
				r := &a.rules[st.rule]
				for _, t := range a.trans[st.trans : st.trans+r.nclass] {
					if t >= 0 && 1+d[t] < best {
						best = 1 + d[t]
					}
				}
			}
			for _, c := range a.callsOf(int32(s)) {
				if v := d[a.rules[c.rule].start] + d[c.next]; v < best {
					best = v
				}
			}
			if best < d[s] {
				d[s], changed = best, true
			}
		}
	}
	return d
}

// byteTokens maps each byte to a token that is that byte alone.
func byteTokens(t testing.TB, v *Vocab) [256]int {
	var out [256]int
	for i := range out {
		out[i] = -1
	}
	for id := range v.Size() {
		if b := v.TokenBytes(id); len(b) == 1 && out[b[0]] < 0 {
			out[b[0]] = id
		}
	}
	for i, id := range out {
		if id < 0 {
			t.Fatalf("the vocabulary has no token for byte %#x", i)
		}
	}
	return out
}

// generation is one sampled output.
type generation struct {
	text      []byte
	tokens    int
	completed bool // the model chose the end token
}

// generate samples from lm under g until the end token or maxTokens, then
// completes the output with the shortest byte tokens and ends it.
func generate(t testing.TB, g *Grammar, lm *randomLM, seed uint64, end, maxTokens int, bytesOf [256]int) generation {
	t.Helper()
	m, err := g.NewMatcher(MatcherOptions{EndTokens: []int{end}, MaxTokens: maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	mask := make([]uint64, g.v.MaskWords())
	var out generation
	prev := end
	for out.tokens < maxTokens && !m.Done() {
		m.FillMask(mask)
		tok := lm.sample(rng, mask, prev)
		if tok < 0 {
			t.Fatalf("seed %d: no token allowed after %q", seed, out.text)
		}
		if err := m.Accept(tok); err != nil {
			t.Fatalf("seed %d: masked token %d refused after %q: %v", seed, tok, out.text, err)
		}
		out.tokens++
		prev = tok
		if tok != end {
			out.text = append(out.text, g.v.TokenBytes(tok)...)
		}
	}
	out.completed = m.Done()
	if !m.Done() {
		for _, c := range completion(m) {
			if err := m.Accept(bytesOf[c]); err != nil {
				t.Fatalf("seed %d: completion byte %q refused after %q: %v", seed, c, out.text, err)
			}
			out.text = append(out.text, c)
		}
		if err := m.Accept(end); err != nil {
			t.Fatalf("seed %d: end refused after completed %q: %v", seed, out.text, err)
		}
	}
	return out
}
