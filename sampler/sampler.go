package sampler

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"

	"github.com/cpmla/cpmla/kernels"
)

// GreedyEpsilon is the temperature below which sampling is greedy (vLLM's
// _SAMPLING_EPS).
const GreedyEpsilon = 1e-5

// Bounds of the settings, as vLLM and the OpenAI API define them.
const (
	MaxPenalty   = 2   // |frequency_penalty|, |presence_penalty| ≤ 2
	MaxLogitBias = 100 // logit_bias values are clamped to [-100, 100]
)

// Params are one sequence's sampling settings. The zero value is greedy
// decoding without penalties.
type Params struct {
	// Temperature below GreedyEpsilon selects greedy decoding (argmax of the
	// processed logits, lowest id on ties).
	Temperature float64
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP; 1 keeps all (NewState reads 0 as 1).
	TopP float64
	// TopK keeps the TopK most likely tokens (and any tied with the last);
	// 0 or -1 keeps all.
	TopK int
	// MinP drops tokens less likely than MinP times the most likely one.
	MinP float64
	// Seed seeds the sequence's generator.
	Seed uint64

	// FrequencyPenalty is subtracted once per occurrence of a token in the
	// output, PresencePenalty once if it occurs at all.
	FrequencyPenalty, PresencePenalty float64
	// RepetitionPenalty divides positive and multiplies negative logits of
	// every token seen in the prompt or the output; 0 and 1 mean none.
	RepetitionPenalty float64

	// LogitBias is added to the logits of its tokens (clamped to ±100).
	LogitBias map[int]float64
	// AllowedTokenIDs, when non-empty, are the only tokens that can be drawn.
	AllowedTokenIDs []int
	// MinTokens masks StopTokenIDs until that many tokens were generated.
	MinTokens    int
	StopTokenIDs []int
}

// Validate reports settings outside their domain for a vocabulary of vocab
// tokens; each message names the field as the OpenAI API spells it.
func (p Params) Validate(vocab int) error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case p.Temperature < 0 || !finite(p.Temperature):
		return fmt.Errorf("temperature must be a finite number ≥ 0, got %v", p.Temperature)
	case !(p.TopP > 0 && p.TopP <= 1):
		return fmt.Errorf("top_p must be in (0, 1], got %v", p.TopP)
	case p.TopK < -1:
		return fmt.Errorf("top_k must be -1 or 0 (all tokens) or ≥ 1, got %d", p.TopK)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("min_p must be in [0, 1], got %v", p.MinP)
	case !(math.Abs(p.FrequencyPenalty) <= MaxPenalty):
		return fmt.Errorf("frequency_penalty must be in [-2, 2], got %v", p.FrequencyPenalty)
	case !(math.Abs(p.PresencePenalty) <= MaxPenalty):
		return fmt.Errorf("presence_penalty must be in [-2, 2], got %v", p.PresencePenalty)
	case p.RepetitionPenalty < 0 || !finite(p.RepetitionPenalty):
		return fmt.Errorf("repetition_penalty must be a finite number > 0, got %v", p.RepetitionPenalty)
	case p.MinTokens < 0:
		return fmt.Errorf("min_tokens must be ≥ 0, got %d", p.MinTokens)
	}
	for id, b := range p.LogitBias {
		if id < 0 || id >= vocab {
			return fmt.Errorf("logit_bias names token %d, outside the vocabulary [0, %d)", id, vocab)
		}
		if math.IsNaN(b) {
			return fmt.Errorf("logit_bias of token %d is NaN", id)
		}
	}
	for _, id := range p.AllowedTokenIDs {
		if id < 0 || id >= vocab {
			return fmt.Errorf("allowed_token_ids holds %d, outside the vocabulary [0, %d)", id, vocab)
		}
	}
	for _, id := range p.StopTokenIDs {
		if id < 0 || id >= vocab {
			return fmt.Errorf("stop_token_ids holds %d, outside the vocabulary [0, %d)", id, vocab)
		}
	}
	return nil
}

// Greedy reports whether p selects greedy decoding.
func (p Params) Greedy() bool { return p.Temperature < GreedyEpsilon }

// State is one sequence's sampler: its settings, its generator and the
// token counts the penalties need.
type State struct {
	p         Params
	pcg       rand.PCG
	rng       *rand.Rand
	biasIDs   []int32
	biasVals  []float32
	allowed   []int32
	stops     []int32
	hist      *history // nil without penalties
	generated int
	c         Constraint // nil: unconstrained
	err       error      // the constraint's refusal of the last token
}

// Constraint restricts the tokens a sequence may draw (structured output):
// FillMask sets bit t (word t/64, bit t%64) of mask for every token t
// allowed next and clears the others; Accept advances over the token
// drawn.
type Constraint interface {
	FillMask(mask []uint64)
	Accept(tok int) error
}

// DraftConstraint is a Constraint that also takes back its last k accepted
// tokens, so that speculative decoding can propose drafts under it and
// withdraw them before verification draws the tokens for good.
type DraftConstraint interface {
	Constraint
	Rollback(k int) error
}

// ErrNoTokenAllowed is the error of a constrained step in which no token
// survives the constraint's mask and the request's own restrictions
// (allowed_token_ids, min_tokens).
var ErrNoTokenAllowed = errors.New("no token is allowed both by the structured output and by the request's other restrictions")

// Constrain makes every draw of s respect c. Its mask is applied to the
// logits before every other step (as vLLM applies its grammar bitmask);
// log-probabilities stay those of the model's own distribution.
func (s *State) Constrain(c Constraint) { s.c = c }

// Err is the error of the last draw under the constraint: the constraint
// refused the token, or no token was allowed (ErrNoTokenAllowed). The
// sequence must end then.
func (s *State) Err() error { return s.err }

// Constraint is the constraint set by Constrain (nil: none).
func (s *State) Constraint() Constraint { return s.c }

// NewState validates p and returns the sampler of one sequence whose prompt
// is prompt and which generates at most maxOut tokens. Everything it needs
// while sampling is allocated here.
func NewState(p Params, vocab int, prompt []int32, maxOut int) (*State, error) {
	if p.TopP == 0 {
		p.TopP = 1
	}
	if p.RepetitionPenalty == 0 {
		p.RepetitionPenalty = 1
	}
	if err := p.Validate(vocab); err != nil {
		return nil, err
	}
	if p.TopK < 0 {
		p.TopK = 0
	}
	s := &State{p: p}
	s.pcg.Seed(p.Seed, 0x9e3779b97f4a7c15)
	s.rng = rand.New(&s.pcg)
	for id := range p.LogitBias {
		s.biasIDs = append(s.biasIDs, int32(id))
	}
	slices.Sort(s.biasIDs)
	for _, id := range s.biasIDs {
		s.biasVals = append(s.biasVals, float32(max(-MaxLogitBias, min(MaxLogitBias, p.LogitBias[int(id)]))))
	}
	for _, id := range p.AllowedTokenIDs {
		s.allowed = append(s.allowed, int32(id))
	}
	slices.Sort(s.allowed)
	s.allowed = slices.Compact(s.allowed)
	for _, id := range p.StopTokenIDs {
		s.stops = append(s.stops, int32(id))
	}
	if p.FrequencyPenalty != 0 || p.PresencePenalty != 0 || p.RepetitionPenalty != 1 {
		s.hist = newHistory(len(prompt) + maxOut)
		for _, t := range prompt {
			s.hist.add(t, false)
		}
	}
	return s, nil
}

// Params are the settings the state runs with, defaults filled.
func (s *State) Params() Params { return s.p }

// Generated is the number of tokens sampled so far.
func (s *State) Generated() int { return s.generated }

// processes reports whether the logits must be changed before sampling.
func (s *State) processes() bool {
	return s.c != nil || len(s.allowed) > 0 || len(s.biasIDs) > 0 || s.hist != nil ||
		(s.generated < s.p.MinTokens && len(s.stops) > 0)
}

// Scratch holds the vocabulary-sized buffers one goroutine samples with.
type Scratch struct {
	work  []float32
	probs []float64
	order []int32
	sel   []float32
	mask  []uint64 // a constraint's allowed tokens
}

// NewScratch allocates the work buffers for a vocabulary of vocab tokens.
func NewScratch(vocab int) *Scratch {
	return &Scratch{work: make([]float32, vocab), probs: make([]float64, vocab),
		order: make([]int32, vocab), sel: make([]float32, vocab), mask: make([]uint64, (vocab+63)/64)}
}

// Sample draws the next token from logits, records it in the state, and
// returns it with its log-probability under the model's distribution
// (log_softmax of the raw logits). logits is not modified.
func (s *State) Sample(sc *Scratch, logits []float32) (token int, logprob float64) {
	w, raw := logits, !s.processes()
	if !raw {
		w = sc.work[:len(logits)]
		s.process(w, logits)
		if s.c != nil {
			s.c.FillMask(sc.mask)
			applyMask(w, sc.mask)
			if !anyFinite(w) {
				s.err = ErrNoTokenAllowed
				return 0, math.Inf(-1)
			}
		}
	}
	lse := math.NaN()
	if s.p.Greedy() {
		token = Argmax(w)
	} else {
		var mx, whole float64
		token, mx, whole = s.draw(sc, w)
		if raw && s.p.Temperature == 1 && whole > 0 && !math.IsInf(whole, 1) {
			// The raw logits at temperature 1, nothing filtered: draw's
			// sum is LogSumExp's, the same terms exp(v − max) added in
			// the same order (a −Inf logit's, +0, left out), and its max
			// LogSumExp's when no logit is NaN (whole would be NaN).
			lse = mx + math.Log(whole)
		}
	}
	if math.IsNaN(lse) {
		lse = LogSumExp(logits)
	}
	s.accept(int32(token))
	return token, float64(logits[token]) - lse
}

// process writes the processed logits into w.
func (s *State) process(w, logits []float32) {
	if len(s.allowed) > 0 {
		for i := range w {
			w[i] = float32(math.Inf(-1))
		}
		for _, id := range s.allowed {
			w[id] = logits[id]
		}
	} else {
		copy(w, logits)
	}
	if s.generated < s.p.MinTokens {
		for _, id := range s.stops {
			w[id] = float32(math.Inf(-1))
		}
	}
	for i, id := range s.biasIDs {
		w[id] += s.biasVals[i]
	}
	if h := s.hist; h != nil {
		rep, freq, pres := float32(s.p.RepetitionPenalty), float32(s.p.FrequencyPenalty), float32(s.p.PresencePenalty)
		for _, slot := range h.used {
			id, n := h.keys[slot], h.out[slot]
			v := w[id]
			if rep != 1 {
				if v > 0 {
					v /= rep
				} else {
					v *= rep
				}
			}
			if n > 0 {
				v -= freq*float32(n) + pres
			}
			w[id] = v
		}
	}
}

// draw samples from the processed logits w with temperature, min_p, top_k
// and top_p. It also returns w's largest value (the first if it is NaN) and
// Σ exp((v − max)/T) over every token of w in id order when no token was
// left out by min_p, top_k or top_p (NaN when one might have been).
func (s *State) draw(sc *Scratch, w []float32) (token int, mx, whole float64) {
	mx = float64(w[Argmax(w)])
	inv := 1 / s.p.Temperature
	floor := math.Inf(-1) // scaled logits below this are dropped (min_p)
	if s.p.MinP > 0 {
		floor = math.Log(s.p.MinP)
	}
	// Candidates in id order, with their unnormalised probabilities
	// exp((v − max)/T), the bits of math.Exp (kernels.ExpShifted).
	kernels.ExpShifted(sc.probs[:len(w)], w, mx, inv)
	order := sc.order[:0]
	for i, v := range w {
		z := (float64(v) - mx) * inv
		if math.IsInf(float64(v), -1) || z < floor {
			continue
		}
		order = append(order, int32(i))
	}
	cut := s.p.MinP > 0 // whether a token may have been left out
	if k := s.p.TopK; k > 0 && k < len(order) {
		cut = true
		sel := sc.sel[:len(order)]
		for i, id := range order {
			sel[i] = w[id]
		}
		th := kthLargest(sel, k)
		kept := order[:0]
		for _, id := range order {
			if w[id] >= th {
				kept = append(kept, id)
			}
		}
		order = kept
	}
	if s.p.TopP < 1 {
		cut = true
		var sum float64
		for _, id := range order {
			sum += sc.probs[id]
		}
		order = order[:nucleus(order, sc.probs, s.p.TopP*sum)]
	}
	var total float64
	for _, id := range order {
		total += sc.probs[id]
	}
	whole = math.NaN()
	if !cut {
		whole = total // every token but the −Inf ones, in id order
	}
	target := s.rng.Float64() * total
	acc := 0.0
	for _, id := range order {
		acc += sc.probs[id]
		if acc > target {
			return int(id), mx, whole
		}
	}
	return int(order[len(order)-1]), mx, whole
}

// byProbThenID orders tokens most likely first, lowest id on ties.
func byProbThenID(probs []float64) func(a, b int32) int {
	return func(a, b int32) int {
		switch {
		case probs[a] > probs[b]:
			return -1
		case probs[a] < probs[b]:
			return 1
		}
		return int(a - b)
	}
}

// nucleus reorders order so that its first k tokens are the top_p set: the
// shortest prefix of the tokens sorted most likely first (lowest id on
// ties) whose probability mass reaches target, and returns k. It
// partitions by probability instead of sorting the vocabulary, so it costs
// expected linear time.
func nucleus(order []int32, probs []float64, target float64) int {
	lo, hi, need := 0, len(order), target
	for hi-lo > 64 {
		a, b, c := probs[order[lo]], probs[order[lo+(hi-lo)/2]], probs[order[hi-1]]
		pivot := max(min(a, b), min(max(a, b), c))
		// Three-way partition of [lo, hi): > pivot | == pivot | < pivot.
		gt, lt := lo, hi
		var massGT, massEQ float64
		for i := lo; i < lt; {
			switch v := probs[order[i]]; {
			case v > pivot:
				massGT += v
				order[gt], order[i] = order[i], order[gt]
				gt++
				i++
			case v < pivot:
				lt--
				order[lt], order[i] = order[i], order[lt]
			default:
				massEQ += v
				i++
			}
		}
		switch {
		case massGT >= need:
			hi = gt
		case massGT+massEQ >= need:
			// The crossing token is among the ties: lowest ids first.
			slices.Sort(order[gt:lt])
			need -= massGT
			k := gt
			for k < lt && need > 0 {
				need -= probs[order[k]]
				k++
			}
			return max(k, 1)
		default:
			need -= massGT + massEQ
			lo = lt
			if lo == hi {
				return hi
			}
		}
	}
	slices.SortFunc(order[lo:hi], byProbThenID(probs))
	k := lo
	for k < hi && need > 0 {
		need -= probs[order[k]]
		k++
	}
	return max(k, 1)
}

// accept records a generated token.
func (s *State) accept(tok int32) {
	if s.c != nil {
		if err := s.c.Accept(int(tok)); err != nil {
			s.err = err
		}
	}
	s.generated++
	if s.hist != nil {
		s.hist.add(tok, true)
	}
}

// applyMask sets the logits of the tokens mask does not allow to -∞.
func applyMask(w []float32, mask []uint64) {
	ninf := float32(math.Inf(-1))
	for i, m := range mask {
		lo := i * 64
		hi := min(lo+64, len(w))
		switch m {
		case ^uint64(0):
		case 0:
			for j := lo; j < hi; j++ {
				w[j] = ninf
			}
		default:
			for z := ^m; z != 0; z &= z - 1 {
				if j := lo + bits.TrailingZeros64(z); j < hi {
					w[j] = ninf
				}
			}
		}
	}
}

func anyFinite(w []float32) bool {
	for _, v := range w {
		if !math.IsInf(float64(v), -1) {
			return true
		}
	}
	return false
}

// kthLargest returns the k-th largest value of v (1-based), reordering v.
func kthLargest(v []float32, k int) float32 {
	lo, hi, want := 0, len(v)-1, k-1
	for lo < hi {
		// Median of three as the pivot; partition into > pivot | ≤ pivot.
		mid := lo + (hi-lo)/2
		a, b, c := v[lo], v[mid], v[hi]
		pivot := max(min(a, b), min(max(a, b), c))
		i, j := lo, hi
		for i <= j {
			for v[i] > pivot {
				i++
			}
			for v[j] < pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case want <= j:
			hi = j
		case want >= i:
			lo = i
		default:
			return v[want]
		}
	}
	return v[want]
}

// history counts the tokens of a sequence in an open-addressing table
// sized for its longest possible length.
type history struct {
	keys []int32 // -1: empty
	out  []int32 // occurrences in the output
	used []int32 // occupied slots, in insertion order
	mask uint32
}

func newHistory(n int) *history {
	size := 16
	for size < 2*n {
		size *= 2
	}
	h := &history{keys: make([]int32, size), out: make([]int32, size), used: make([]int32, 0, n), mask: uint32(size - 1)}
	for i := range h.keys {
		h.keys[i] = -1
	}
	return h
}

func (h *history) add(tok int32, output bool) {
	i := (uint32(tok) * 0x9e3779b1) & h.mask
	for h.keys[i] != tok {
		if h.keys[i] == -1 {
			if len(h.used) == cap(h.used) {
				return // more tokens than the sequence can hold; cannot happen
			}
			h.keys[i] = tok
			h.used = append(h.used, int32(i))
			break
		}
		i = (i + 1) & h.mask
	}
	if output {
		h.out[i]++
	}
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
	// The terms math.Exp(v − max) a block at a time (kernels.ExpShifted,
	// the same bits), added in order.
	var terms [256]float64
	var sum float64
	for i := 0; i < len(logits); i += len(terms) {
		part := logits[i:min(i+len(terms), len(logits))]
		kernels.ExpShifted(terms[:len(part)], part, mx, 1)
		for _, e := range terms[:len(part)] {
			sum += e
		}
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

// ArgmaxMasked is the index of the largest of the logits that mask allows
// (bit i of word i/64; the first on ties, as Argmax), or -1 when it allows
// none.
func ArgmaxMasked(logits []float32, mask []uint64) int {
	best := -1
	for w, m := range mask {
		for ; m != 0; m &= m - 1 {
			i := w*64 + bits.TrailingZeros64(m)
			if i >= len(logits) {
				return best
			}
			if best < 0 || logits[i] > logits[best] {
				best = i
			}
		}
	}
	return best
}

// TokenLogprob is one token with its log-probability under the model.
type TokenLogprob struct {
	Token   int32
	Logprob float64
}

// TopLogprobs writes the len(dst) most likely tokens of logits into dst,
// most likely first (lowest id on ties), with their log-probabilities given
// the normaliser lse (LogSumExp of the same logits), and returns dst.
func TopLogprobs(logits []float32, lse float64, dst []TokenLogprob) []TokenLogprob {
	n := min(len(dst), len(logits))
	dst = dst[:n]
	if n == 0 {
		return dst
	}
	filled := 0
	for i, v := range logits {
		if filled == n && v <= logits[dst[n-1].Token] {
			continue
		}
		// Insert i, keeping dst[:filled] sorted by logit desc, id asc.
		j := min(filled, n-1)
		for j > 0 && logits[dst[j-1].Token] < v {
			dst[j] = dst[j-1]
			j--
		}
		dst[j].Token = int32(i)
		if filled < n {
			filled++
		}
	}
	for k := range dst {
		dst[k].Logprob = float64(logits[dst[k].Token]) - lse
	}
	return dst
}

// Rank is the number of tokens at least as likely as tok (1 for the most
// likely token; ties count), as vLLM reports it.
func Rank(logits []float32, tok int) int {
	v, n := logits[tok], 0
	for _, x := range logits {
		if x >= v {
			n++
		}
	}
	return n
}
