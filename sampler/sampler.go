package sampler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Params are one request's sampling settings.
type Params struct {
	// Temperature 0 selects greedy decoding (argmax, lowest id on ties).
	Temperature float64
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP (1 keeps all).
	TopP float64
	// Seed seeds the request's generator.
	Seed uint64
}

// Validate reports settings outside their domain.
func (p Params) Validate() error {
	if p.Temperature < 0 || math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0) {
		return fmt.Errorf("temperature must be a finite number ≥ 0, got %v", p.Temperature)
	}
	if !(p.TopP > 0 && p.TopP <= 1) {
		return fmt.Errorf("top_p must be in (0, 1], got %v", p.TopP)
	}
	return nil
}

// Sampler draws tokens for one request.
type Sampler struct {
	p     Params
	rng   *rand.Rand
	probs []float64
	order []int32
}

// New returns a sampler for a vocabulary of vocab tokens. A zero TopP means 1.
func New(p Params, vocab int) (*Sampler, error) {
	if p.TopP == 0 {
		p.TopP = 1
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s := &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15))}
	if p.Temperature > 0 {
		s.probs = make([]float64, vocab)
		if p.TopP < 1 {
			s.order = make([]int32, vocab)
		}
	}
	return s, nil
}

// LogSumExp is the natural-log normaliser of logits, accumulated in float64.
func LogSumExp(logits []float32) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > mx {
			mx = float64(v)
		}
	}
	if math.IsInf(mx, -1) {
		return mx
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(sum)
}

// Argmax returns the index of the largest logit, the lowest index on ties.
func Argmax(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// Sample picks the next token and returns it with its log-probability under
// the model's distribution (log_softmax of the raw logits).
func (s *Sampler) Sample(logits []float32) (token int, logprob float64) {
	lse := LogSumExp(logits)
	if s.p.Temperature == 0 {
		token = Argmax(logits)
		return token, float64(logits[token]) - lse
	}
	inv := 1 / s.p.Temperature
	mx := float64(logits[Argmax(logits)])
	var sum float64
	for i, v := range logits {
		e := math.Exp((float64(v) - mx) * inv)
		s.probs[i] = e
		sum += e
	}
	u := s.rng.Float64()
	if s.p.TopP >= 1 {
		target := u * sum
		acc := 0.0
		token = len(logits) - 1
		for i, pr := range s.probs {
			acc += pr
			if acc > target {
				token = i
				break
			}
		}
		return token, float64(logits[token]) - lse
	}
	for i := range s.order {
		s.order[i] = int32(i)
	}
	slices.SortFunc(s.order, func(a, b int32) int {
		if s.probs[a] != s.probs[b] {
			if s.probs[a] > s.probs[b] {
				return -1
			}
			return 1
		}
		return int(a - b)
	})
	keep, acc := 0, 0.0
	for keep < len(s.order) {
		acc += s.probs[s.order[keep]]
		keep++
		if acc >= s.p.TopP*sum {
			break
		}
	}
	target := u * acc
	run := 0.0
	token = int(s.order[keep-1])
	for _, id := range s.order[:keep] {
		run += s.probs[id]
		if run > target {
			token = int(id)
			break
		}
	}
	return token, float64(logits[token]) - lse
}
