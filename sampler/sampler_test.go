package sampler

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func newState(t testing.TB, p Params, vocab int, prompt []int32, maxOut int) *State {
	t.Helper()
	s, err := NewState(p, vocab, prompt, maxOut)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func randLogits(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * 2)
	}
	return v
}

func TestGreedyLowestIndexOnTie(t *testing.T) {
	s := newState(t, Params{}, 5, nil, 1)
	tok, lp := s.Sample(NewScratch(5), []float32{1, 3, 3, -2, 0})
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
	sc := NewScratch(len(logits))
	draw := func(seed uint64, topP float64) []int {
		s := newState(t, Params{Temperature: 1, TopP: topP, Seed: seed}, len(logits), nil, 4000)
		out := make([]int, 4000)
		for i := range out {
			out[i], _ = s.Sample(sc, logits)
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
	if slices.Equal(draw(7, 1), draw(8, 1)) {
		t.Error("seeds 7 and 8 drew the same 4000 tokens")
	}
}

// TestTemperatureScalesTheDistribution: at temperature 0.5 the odds of two
// tokens whose logits differ by ln 2 become 4:1.
func TestTemperatureScalesTheDistribution(t *testing.T) {
	logits := []float32{float32(math.Ln2), 0}
	s := newState(t, Params{Temperature: 0.5, Seed: 1}, 2, nil, 10000)
	sc := NewScratch(2)
	n0 := 0
	for range 10000 {
		if tok, _ := s.Sample(sc, logits); tok == 0 {
			n0++
		}
	}
	// p0 = 0.8; sd of the count = 40; 5 sigma = 200.
	if math.Abs(float64(n0)-8000) > 200 {
		t.Errorf("token 0 drawn %d times in 10000, want about 8000", n0)
	}
}

// support draws many tokens and returns the set drawn.
func support(t *testing.T, p Params, logits []float32, draws int) map[int]int {
	t.Helper()
	s := newState(t, p, len(logits), nil, draws)
	sc := NewScratch(len(logits))
	got := map[int]int{}
	for range draws {
		tok, _ := s.Sample(sc, logits)
		got[tok]++
	}
	return got
}

func sortedDesc(logits []float32) []int {
	ids := make([]int, len(logits))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
	return ids
}

func keys(m map[int]int) []int {
	k := make([]int, 0, len(m))
	for id := range m {
		k = append(k, id)
	}
	slices.Sort(k)
	return k
}

func TestTopKMinPAndTopPKeepTheirSets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := randLogits(rng, 64)
	desc := sortedDesc(logits)

	// top_k 1 is greedy, top_k 5 draws exactly the five most likely tokens.
	for seed := range uint64(20) {
		s := newState(t, Params{Temperature: 1.3, TopK: 1, Seed: seed}, len(logits), nil, 1)
		if tok, _ := s.Sample(NewScratch(len(logits)), logits); tok != Argmax(logits) {
			t.Fatalf("top_k 1 drew %d, greedy is %d", tok, Argmax(logits))
		}
	}
	want5 := slices.Sorted(slices.Values(desc[:5]))
	if got := keys(support(t, Params{Temperature: 2, TopK: 5, Seed: 3}, logits, 20000)); !slices.Equal(got, want5) {
		t.Errorf("top_k 5 drew %v, want the five most likely %v", got, want5)
	}

	// min_p: exactly the tokens with p ≥ min_p · p_max (at temperature 1.5).
	const minP, temp = 0.2, 1.5
	var wantMinP []int
	mx := float64(logits[desc[0]])
	for i, v := range logits {
		if math.Exp((float64(v)-mx)/temp) >= minP {
			wantMinP = append(wantMinP, i)
		}
	}
	if got := keys(support(t, Params{Temperature: temp, MinP: minP, Seed: 4}, logits, 40000)); !slices.Equal(got, wantMinP) {
		t.Errorf("min_p %v drew %v, want %v", minP, got, wantMinP)
	}

	// top_p: the smallest prefix of the sorted tokens reaching the mass.
	const topP = 0.6
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	var wantTopP []int
	acc := 0.0
	for _, id := range desc {
		if acc >= topP {
			break
		}
		acc += math.Exp(float64(logits[id])-mx) / sum
		wantTopP = append(wantTopP, id)
	}
	slices.Sort(wantTopP)
	if got := keys(support(t, Params{Temperature: 1, TopP: topP, Seed: 5}, logits, 40000)); !slices.Equal(got, wantTopP) {
		t.Errorf("top_p %v drew %v, want %v", topP, got, wantTopP)
	}

	// top_k then top_p: the nucleus of the renormalised top-k set.
	var sumK float64
	for _, id := range desc[:8] {
		sumK += math.Exp(float64(logits[id]) - mx)
	}
	var wantKP []int
	acc = 0
	for _, id := range desc[:8] {
		if acc >= 0.5 {
			break
		}
		acc += math.Exp(float64(logits[id])-mx) / sumK
		wantKP = append(wantKP, id)
	}
	slices.Sort(wantKP)
	if got := keys(support(t, Params{Temperature: 1, TopK: 8, TopP: 0.5, Seed: 6}, logits, 40000)); !slices.Equal(got, wantKP) {
		t.Errorf("top_k 8 + top_p 0.5 drew %v, want %v", got, wantKP)
	}
}

// TestProcessedLogits checks the logit processors against vLLM's
// definitions written out term by term.
func TestProcessedLogits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const V = 40
	logits := randLogits(rng, V)
	prompt := []int32{3, 5, 5, 7}
	output := []int32{5, 9, 9, 9, 11}
	p := Params{Temperature: 1, RepetitionPenalty: 1.3, FrequencyPenalty: 0.4, PresencePenalty: 0.25,
		LogitBias: map[int]float64{2: 5, 9: -1, 30: 250}, MinTokens: 8, StopTokenIDs: []int{1, 4}}
	s := newState(t, p, V, prompt, 16)
	for _, tok := range output {
		s.accept(tok)
	}
	w := make([]float32, V)
	s.process(w, logits)

	want := slices.Clone(logits)
	for _, id := range []int{1, 4} {
		want[id] = float32(math.Inf(-1)) // min_tokens: 5 < 8 generated
	}
	want[2] += 5
	want[9] -= 1
	want[30] += 100 // clamped
	seen := map[int32]bool{}
	for _, id := range append(slices.Clone(prompt), output...) {
		seen[id] = true
	}
	count := map[int32]int{}
	for _, id := range output {
		count[id]++
	}
	for id := range seen {
		if want[id] > 0 {
			want[id] /= 1.3
		} else {
			want[id] *= 1.3
		}
		if c := count[id]; c > 0 {
			want[id] -= 0.4*float32(c) + 0.25
		}
	}
	if d := gocmp.Diff(want, w, cmpopts.EquateApprox(0, 1e-6)); d != "" {
		t.Errorf("processed logits (-want +got):\n%s", d)
	}

	// After min_tokens tokens the stop ids are no longer masked.
	for range 3 {
		s.accept(20)
	}
	s.process(w, logits)
	if math.IsInf(float64(w[1]), -1) {
		t.Error("stop id still masked after min_tokens tokens")
	}

	// allowed_token_ids: every other token is -inf.
	a := newState(t, Params{AllowedTokenIDs: []int{6, 2, 6}}, V, nil, 1)
	a.process(w, logits)
	for i, v := range w {
		if (i == 2 || i == 6) != !math.IsInf(float64(v), -1) {
			t.Fatalf("allowed [2 6]: token %d has processed logit %v", i, v)
		}
	}
}

// TestLogprobsAreRaw: the reported logprob is the raw log_softmax, whatever
// the processing.
func TestLogprobsAreRaw(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	logits := randLogits(rng, 50)
	lse := LogSumExp(logits)
	s := newState(t, Params{Temperature: 0.7, TopK: 3, LogitBias: map[int]float64{7: 30}, RepetitionPenalty: 2, Seed: 1}, 50, []int32{1, 2}, 4)
	tok, lp := s.Sample(NewScratch(50), logits)
	if tok != 7 {
		t.Fatalf("logit_bias +30 on token 7 drew %d", tok)
	}
	if want := float64(logits[7]) - lse; math.Abs(lp-want) > 1e-12 {
		t.Errorf("logprob %v, want the raw %v", lp, want)
	}
}

// TestLogprobBitsEveryPath: the log-probability Sample returns has the bits
// of logits[tok] − LogSumExp(logits) whichever way it was computed — from
// the draw's own sum (raw logits at temperature 1, nothing filtered) or
// by LogSumExp (any other setting) — over rows with −Inf logits, a NaN,
// large values and lengths that are not a multiple of eight.
func TestLogprobBitsEveryPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const V = 1003
	rows := map[string][]float32{"plain": randLogits(rng, V)}
	masked := randLogits(rng, V)
	for i := range masked {
		if i%3 != 0 {
			masked[i] = float32(math.Inf(-1))
		}
	}
	rows["masked"] = masked
	wide := randLogits(rng, V)
	for i := range wide {
		wide[i] *= 400
	}
	rows["wide"] = wide
	nan := randLogits(rng, V)
	nan[17] = float32(math.NaN())
	rows["nan"] = nan
	for _, p := range []Params{
		{Temperature: 1, Seed: 3},
		{Temperature: 1, TopK: V + 5, Seed: 3},
		{Temperature: 1, TopK: 5, Seed: 3},
		{Temperature: 1, TopP: 0.5, Seed: 3},
		{Temperature: 1, MinP: 0.2, Seed: 3},
		{Temperature: 0.7, Seed: 3},
		{Temperature: 1, LogitBias: map[int]float64{3: 2}, Seed: 3},
		{},
	} {
		for name, logits := range rows {
			s := newState(t, p, V, nil, 20)
			sc := NewScratch(V)
			for range 20 {
				tok, lp := s.Sample(sc, logits)
				want := float64(logits[tok]) - LogSumExp(logits)
				if math.Float64bits(lp) != math.Float64bits(want) && !(math.IsNaN(lp) && math.IsNaN(want)) {
					t.Fatalf("%+v, %s logits: token %d has logprob %v, want %v (logits[tok] − LogSumExp)", p, name, tok, lp, want)
				}
			}
		}
	}
}

func TestTopLogprobsAndRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 50 {
		n := 1 + rng.IntN(300)
		logits := randLogits(rng, n)
		for i := range logits { // ties
			if rng.IntN(4) == 0 {
				logits[i] = float32(rng.IntN(3))
			}
		}
		lse := LogSumExp(logits)
		desc := sortedDesc(logits)
		k := 1 + rng.IntN(25)
		got := TopLogprobs(logits, lse, make([]TokenLogprob, k))
		var want []TokenLogprob
		for _, id := range desc[:min(k, n)] {
			want = append(want, TokenLogprob{Token: int32(id), Logprob: float64(logits[id]) - lse})
		}
		if d := gocmp.Diff(want, got); d != "" {
			t.Fatalf("trial %d: top %d (-sort +TopLogprobs):\n%s", trial, k, d)
		}
		tok := rng.IntN(n)
		wantRank := 0
		for _, v := range logits {
			if v >= logits[tok] {
				wantRank++
			}
		}
		if r := Rank(logits, tok); r != wantRank {
			t.Fatalf("trial %d: rank %d, want %d", trial, r, wantRank)
		}
	}
}

func TestKthLargest(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 500 {
		n := 1 + rng.IntN(100)
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.IntN(12)) - 6
			if rng.IntN(10) == 0 {
				v[i] = float32(math.Inf(-1))
			}
		}
		k := 1 + rng.IntN(n)
		s := slices.Clone(v)
		slices.SortFunc(s, func(a, b float32) int { return cmp.Compare(b, a) })
		if got := kthLargest(v, k); got != s[k-1] {
			t.Fatalf("%d-th largest of %v is %v, want %v", k, s, got, s[k-1])
		}
	}
}

func TestParamsValidate(t *testing.T) {
	for _, p := range []Params{
		{Temperature: -1}, {TopP: 1.5}, {TopP: -0.1}, {Temperature: math.NaN()}, {TopK: -2}, {MinP: 1.5},
		{FrequencyPenalty: 2.5}, {PresencePenalty: -3}, {RepetitionPenalty: -1}, {MinTokens: -1},
		{LogitBias: map[int]float64{3: 1}}, {AllowedTokenIDs: []int{-1}}, {StopTokenIDs: []int{9}},
	} {
		if _, err := NewState(p, 3, nil, 1); err == nil {
			t.Errorf("NewState(%+v) accepted", p)
		}
	}
}

func TestSampleAllocatesNothing(t *testing.T) {
	const V = 1000
	logits := make([]float32, V)
	for i := range logits {
		logits[i] = float32(i%17) * 0.1
	}
	sc := NewScratch(V)
	top := make([]TokenLogprob, 20)
	for _, p := range []Params{
		{}, {Temperature: 0.8}, {Temperature: 0.8, TopP: 0.9}, {Temperature: 0.8, TopK: 40, MinP: 0.05},
		{Temperature: 1, TopK: 50, TopP: 0.9, MinP: 0.01, RepetitionPenalty: 1.1, FrequencyPenalty: 0.5, PresencePenalty: 0.5,
			LogitBias: map[int]float64{3: 2}, AllowedTokenIDs: []int{1, 2, 3, 500}, MinTokens: 1000, StopTokenIDs: []int{2}},
	} {
		s := newState(t, p, V, []int32{1, 2, 3}, 1000)
		if n := testing.AllocsPerRun(50, func() {
			s.Sample(sc, logits)
			TopLogprobs(logits, LogSumExp(logits), top)
		}); n != 0 {
			t.Errorf("%+v: %v allocations per sample", p, n)
		}
	}
}

// BenchmarkSample times one sampling step on a GLM-sized vocabulary
// (129280 logits) for the common settings (temperature1 is vLLM's and the
// OpenAI API's default); compare their ratios to the greedy case, which is
// one pass for the argmax and one for the logprob.
func BenchmarkSample(b *testing.B) {
	const V = 129280
	logits := randLogits(rand.New(rand.NewPCG(1, 1)), V)
	sc := NewScratch(V)
	prompt := make([]int32, 512)
	for i := range prompt {
		prompt[i] = int32(i * 97 % V)
	}
	for _, bc := range []struct {
		name string
		p    Params
	}{
		{"greedy", Params{}},
		{"temperature1", Params{Temperature: 1}},
		{"temperature", Params{Temperature: 0.7}},
		{"top_k50", Params{Temperature: 0.7, TopK: 50}},
		{"top_p0.9", Params{Temperature: 0.7, TopP: 0.9}},
		{"penalties+top_k+top_p+min_p", Params{Temperature: 0.7, TopK: 50, TopP: 0.9, MinP: 0.01, RepetitionPenalty: 1.1, FrequencyPenalty: 0.2, PresencePenalty: 0.2}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := newState(b, bc.p, V, prompt, b.N+1)
			b.ReportAllocs()
			for b.Loop() {
				s.Sample(sc, logits)
			}
		})
	}
}

// TestNucleusMatchesSorting: the partition-based top_p set is the prefix
// of the fully sorted tokens, ties broken by id, on random distributions
// with many ties.
func TestNucleusMatchesSorting(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 300 {
		n := 1 + rng.IntN(3000)
		probs := make([]float64, n)
		var sum float64
		for i := range probs {
			probs[i] = float64(1 + rng.IntN(20)) // many ties
			if rng.IntN(3) == 0 {
				probs[i] = rng.Float64()
			}
			sum += probs[i]
		}
		target := rng.Float64() * sum
		order := make([]int32, n)
		for i := range order {
			order[i] = int32(i)
		}
		ref := slices.Clone(order)
		slices.SortFunc(ref, byProbThenID(probs))
		k, acc := 0, 0.0
		for k < n && acc < target {
			acc += probs[ref[k]]
			k++
		}
		k = max(k, 1)
		got := nucleus(order, probs, target)
		a, b := slices.Clone(order[:got]), slices.Clone(ref[:k])
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			t.Fatalf("trial %d: nucleus of %d tokens, sorting gives %d", trial, got, k)
		}
	}
}
