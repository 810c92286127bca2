package sampler

import (
	"math"
	"testing"
)

func TestGreedyLowestIndexOnTie(t *testing.T) {
	s, err := New(Params{}, 5)
	if err != nil {
		t.Fatal(err)
	}
	tok, lp := s.Sample([]float32{1, 3, 3, -2, 0})
	if tok != 1 {
		t.Fatalf("greedy token %d, want 1", tok)
	}
	want := 3 - math.Log(math.Exp(1)+2*math.Exp(3)+math.Exp(-2)+1)
	if math.Abs(lp-want) > 1e-12 {
		t.Errorf("logprob %v, want %v", lp, want)
	}
}

func TestSeededSamplingIsDeterministicAndFollowsDistribution(t *testing.T) {
	logits := []float32{0, float32(math.Log(3)), -100}
	draw := func(seed uint64, topP float64) []int {
		s, err := New(Params{Temperature: 1, TopP: topP, Seed: seed}, len(logits))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int, 4000)
		for i := range out {
			out[i], _ = s.Sample(logits)
		}
		return out
	}
	a, b := draw(7, 1), draw(7, 1)
	counts := [3]int{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs between runs with the same seed", i)
		}
		counts[a[i]]++
	}
	// p = (0.25, 0.75, ~0): 4000 draws, 5 sigma ≈ 137.
	if math.Abs(float64(counts[1])-3000) > 137 || counts[2] != 0 {
		t.Errorf("counts %v, want about [1000 3000 0]", counts)
	}
	for _, tok := range draw(3, 0.7) {
		if tok != 1 {
			t.Fatalf("top_p 0.7 kept token %d; only token 1 (p=0.75) is in the nucleus", tok)
		}
	}
}

func TestParamsValidate(t *testing.T) {
	for _, p := range []Params{{Temperature: -1, TopP: 1}, {TopP: 1.5}, {TopP: -0.1}, {Temperature: math.NaN(), TopP: 1}} {
		if _, err := New(p, 3); err == nil {
			t.Errorf("New(%+v) accepted", p)
		}
	}
}

func TestSampleAllocatesNothing(t *testing.T) {
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(i%17) * 0.1
	}
	for _, p := range []Params{{}, {Temperature: 0.8, TopP: 1}, {Temperature: 0.8, TopP: 0.9}} {
		s, _ := New(p, len(logits))
		if n := testing.AllocsPerRun(20, func() { s.Sample(logits) }); n != 0 {
			t.Errorf("%+v: %v allocations per sample", p, n)
		}
	}
}
