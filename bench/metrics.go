package bench

import (
	"math"
	"slices"
)

// RequestOutput is what the client measured for one request. Times are in
// seconds.
type RequestOutput struct {
	Success bool
	Error   string
	// PromptLen is the request's input tokens.
	PromptLen int
	// OutputTokens is the request's generated tokens (server-reported).
	OutputTokens  int
	GeneratedText string
	// StartTime is when the request was sent, relative to the start of
	// the benchmark.
	StartTime float64
	TTFT      float64
	// ITL are the gaps between consecutive chunks.
	ITL []float64
	// Latency is E2EL: the last chunk's time − the send time.
	Latency float64
}

// Summary is the distribution of one metric, in milliseconds.
type Summary struct {
	Mean, Median, Std, P99 float64
}

// Metrics are a benchmark's results, defined as vllm bench serve defines
// them (see the package documentation).
type Metrics struct {
	Completed, Failed       int
	TotalInput, TotalOutput int
	RequestThroughput       float64 // requests/s
	OutputThroughput        float64 // output tokens/s
	TotalTokenThroughput    float64 // (input + output) tokens/s
	TTFT, TPOT, ITL, E2EL   Summary
	MaxOutputTokensPerS     float64
	MaxConcurrentRequests   int
	OutputLens              []int // per request; 0 for failed ones
}

// Compute derives the metrics of a run that took duration seconds.
func Compute(outputs []RequestOutput, duration float64) Metrics {
	var m Metrics
	var ttfts, tpots, itls, e2els []float64
	m.OutputLens = make([]int, len(outputs))
	for i, o := range outputs {
		if !o.Success {
			m.Failed++
			continue
		}
		m.Completed++
		m.OutputLens[i] = o.OutputTokens
		m.TotalInput += o.PromptLen
		m.TotalOutput += o.OutputTokens
		if o.OutputTokens > 1 {
			tpots = append(tpots, (o.Latency-o.TTFT)/float64(o.OutputTokens-1))
		}
		itls = append(itls, o.ITL...)
		ttfts = append(ttfts, o.TTFT)
		e2els = append(e2els, o.Latency)
	}
	if duration > 0 {
		m.RequestThroughput = float64(m.Completed) / duration
		m.OutputThroughput = float64(m.TotalOutput) / duration
		m.TotalTokenThroughput = float64(m.TotalInput+m.TotalOutput) / duration
	}
	m.TTFT = summarize(ttfts)
	m.TPOT = summarize(tpots)
	m.ITL = summarize(itls)
	m.E2EL = summarize(e2els)
	m.MaxOutputTokensPerS, m.MaxConcurrentRequests = peaks(outputs)
	return m
}

// summarize returns the distribution of xs (seconds) in milliseconds.
func summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Summary{
		Mean:   mean(s) * 1000,
		Median: Percentile(s, 50) * 1000,
		Std:    std(s) * 1000,
		P99:    Percentile(s, 99) * 1000,
	}
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// std is the population standard deviation (NumPy's default, ddof 0).
func std(xs []float64) float64 {
	mu := mean(xs)
	var ss float64
	for _, x := range xs {
		ss += (x - mu) * (x - mu)
	}
	return math.Sqrt(ss / float64(len(xs)))
}

// Percentile is NumPy's default percentile of sorted values: the value at
// rank p/100·(n−1), interpolated linearly between the neighbouring
// values. It returns 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := p / 100 * float64(n-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, n-1)
	frac := rank - float64(lo)
	return sorted[lo] + (sorted[hi]-sorted[lo])*frac
}

// peaks returns the largest number of chunks received in one second of the
// run and the largest number of requests in flight in one second, counted
// in whole seconds from the first request's start as vLLM counts them.
func peaks(outputs []RequestOutput) (float64, int) {
	first, last, found := math.Inf(1), math.Inf(-1), false
	for _, o := range outputs {
		if o.Success {
			found = true
			first = min(first, o.StartTime)
			last = max(last, o.StartTime+o.Latency)
		}
	}
	if !found {
		return 0, 0
	}
	seconds := int(math.Ceil(last-first)) + 1
	tokens := make([]float64, seconds)
	running := make([]int, seconds)
	for _, o := range outputs {
		if !o.Success {
			continue
		}
		t := o.StartTime + o.TTFT
		bump := func(t float64) {
			if b := int(t - first); b >= 0 && b < seconds {
				tokens[b]++
			}
		}
		bump(t)
		for _, gap := range o.ITL {
			t += gap
			bump(t)
		}
		for s := int(o.StartTime - first); s <= int(o.StartTime+o.Latency-first) && s < seconds; s++ {
			running[s]++
		}
	}
	return slices.Max(tokens), slices.Max(running)
}
