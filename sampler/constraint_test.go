package sampler

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// setConstraint allows a fixed set of tokens and records what it accepts.
type setConstraint struct {
	allowed  []int
	accepted []int
	refuse   error
}

func (c *setConstraint) FillMask(mask []uint64) {
	clear(mask)
	for _, t := range c.allowed {
		mask[t>>6] |= 1 << (t & 63)
	}
}

func (c *setConstraint) Accept(tok int) error {
	c.accepted = append(c.accepted, tok)
	return c.refuse
}

func TestConstrainedSampling(t *testing.T) {
	const V = 300
	rng := rand.New(rand.NewPCG(1, 2))
	allowed := []int{3, 64, 65, 127, 128, 299}
	for _, p := range []Params{{Temperature: 0}, {Temperature: 1, Seed: 7}, {Temperature: 0.7, TopK: 2, Seed: 3},
		{Temperature: 1, RepetitionPenalty: 1.5, LogitBias: map[int]float64{5: 100}, Seed: 9}} {
		s := newState(t, p, V, []int32{1, 2}, 64)
		c := &setConstraint{allowed: allowed}
		s.Constrain(c)
		sc := NewScratch(V)
		for range 50 {
			logits := randLogits(rng, V)
			tok, _ := s.Sample(sc, logits)
			if !slices.Contains(allowed, tok) {
				t.Fatalf("%+v: drew %d, outside the constraint %v", p, tok, allowed)
			}
			if p.Greedy() {
				best := allowed[0]
				for _, a := range allowed {
					if logits[a] > logits[best] {
						best = a
					}
				}
				if tok != best {
					t.Fatalf("greedy drew %d, the best allowed is %d", tok, best)
				}
			}
		}
		if len(c.accepted) != 50 || s.Err() != nil {
			t.Fatalf("the constraint accepted %d tokens (err %v), want 50", len(c.accepted), s.Err())
		}
	}
	// No allowed token survives allowed_token_ids: the step fails.
	s := newState(t, Params{Temperature: 1, AllowedTokenIDs: []int{1, 2}}, V, nil, 8)
	s.Constrain(&setConstraint{allowed: []int{3}})
	s.Sample(NewScratch(V), randLogits(rng, V))
	if !errors.Is(s.Err(), ErrNoTokenAllowed) {
		t.Fatalf("err %v, want ErrNoTokenAllowed", s.Err())
	}
	// A refused token is reported.
	refused := errors.New("refused")
	s = newState(t, Params{Temperature: 1}, V, nil, 8)
	s.Constrain(&setConstraint{allowed: allowed, refuse: refused})
	s.Sample(NewScratch(V), randLogits(rng, V))
	if !errors.Is(s.Err(), refused) {
		t.Fatalf("err %v, want the constraint's refusal", s.Err())
	}
}

func TestConstrainedSamplingAllocatesNothing(t *testing.T) {
	const V = 1000
	logits := randLogits(rand.New(rand.NewPCG(4, 4)), V)
	c := &setConstraint{allowed: []int{1, 500, 999}, accepted: make([]int, 0, 4096)}
	s := newState(t, Params{Temperature: 1, TopP: 0.9}, V, nil, 4096)
	s.Constrain(c)
	sc := NewScratch(V)
	if n := testing.AllocsPerRun(100, func() { s.Sample(sc, logits) }); n != 0 {
		t.Fatalf("a constrained Sample allocates %v times", n)
	}
}

func TestArgmaxMasked(t *testing.T) {
	logits := make([]float32, 130)
	for i := range logits {
		logits[i] = float32(i % 7)
	}
	logits[3] = 50
	mask := make([]uint64, 3)
	if got := ArgmaxMasked(logits, mask); got != -1 {
		t.Errorf("nothing allowed: %d, want -1", got)
	}
	for _, i := range []int{1, 64, 70, 129} {
		mask[i/64] |= 1 << (i % 64)
	}
	// 70 % 7 = 0, 64 % 7 = 1, 1 % 7 = 1, 129 % 7 = 3: the largest allowed.
	if got := ArgmaxMasked(logits, mask); got != 129 {
		t.Errorf("got %d, want 129", got)
	}
	mask[2] = ^uint64(0) // bits past the logits are ignored
	if got := ArgmaxMasked(logits, mask); got != 129 {
		t.Errorf("bits past the end: got %d, want 129", got)
	}
	for i := range mask {
		mask[i] = ^uint64(0)
	}
	if got, want := ArgmaxMasked(logits, mask), Argmax(logits); got != want {
		t.Errorf("all allowed: %d, Argmax %d", got, want)
	}
	logits[100] = 50 // a tie with 3: the first wins
	if got := ArgmaxMasked(logits, mask); got != 3 {
		t.Errorf("tie: got %d, want 3", got)
	}
}
