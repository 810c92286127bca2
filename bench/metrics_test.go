package bench

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPercentile(t *testing.T) {
	// Values NumPy's np.percentile (linear) gives, derived by hand from
	// its definition: rank = p/100·(n−1), linear between neighbours.
	tests := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{nil, 50, 0},
		{[]float64{5}, 99, 5},
		{[]float64{1, 2, 3, 4}, 50, 2.5},                     // rank 1.5
		{[]float64{1, 2, 3, 4}, 0, 1},                        // rank 0
		{[]float64{1, 2, 3, 4}, 100, 4},                      // rank 3
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 9.91}, // rank 8.91
		{[]float64{10, 20}, 25, 12.5},                        // rank 0.25
	}
	for _, tc := range tests {
		if got := Percentile(tc.xs, tc.p); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
		}
	}
}

func TestCompute(t *testing.T) {
	outputs := []RequestOutput{
		{Success: true, PromptLen: 10, OutputTokens: 4, StartTime: 0, TTFT: 0.1, ITL: []float64{0.02, 0.03, 0.05}, Latency: 0.2},
		{Success: true, PromptLen: 20, OutputTokens: 1, StartTime: 0.5, TTFT: 0.3, ITL: []float64{}, Latency: 0.3},
		{Success: false, PromptLen: 7, Error: "HTTP 500"},
	}
	got := Compute(outputs, 2.0)
	// Hand-computed from the definitions in the package documentation.
	want := Metrics{
		Completed: 2, Failed: 1,
		TotalInput: 30, TotalOutput: 5, // the failed request counts for nothing
		RequestThroughput:    1.0,  // 2 / 2 s
		OutputThroughput:     2.5,  // 5 / 2 s
		TotalTokenThroughput: 17.5, // 35 / 2 s
		// TTFT {0.1, 0.3}: mean 200, median 200, std 100, p99 at rank 0.99: 100 + 200·0.99.
		TTFT: Summary{Mean: 200, Median: 200, Std: 100, P99: 298},
		// TPOT only for the request with more than one token: (0.2 − 0.1)/3.
		TPOT: Summary{Mean: 100.0 / 3, Median: 100.0 / 3, Std: 0, P99: 100.0 / 3},
		// ITL {20, 30, 50} ms: mean 100/3, median 30, std sqrt(((−40/3)²+(−10/3)²+(50/3)²)/3),
		// p99 at rank 1.98: 30 + 20·0.98.
		ITL: Summary{Mean: 100.0 / 3, Median: 30, Std: math.Sqrt((1600.0/9 + 100.0/9 + 2500.0/9) / 3), P99: 49.6},
		// E2EL {0.2, 0.3}.
		E2EL: Summary{Mean: 250, Median: 250, Std: 50, P99: 299},
		// All 5 chunks (at 0.1, 0.12, 0.15, 0.2 and 0.8 s) fall in second 0,
		// and both requests run during second 0.
		MaxOutputTokensPerS:   5,
		MaxConcurrentRequests: 2,
		OutputLens:            []int{4, 1, 0},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(1e-9, 1e-9)); diff != "" {
		t.Errorf("Compute (-want +got):\n%s", diff)
	}
}

func TestComputeNothingSucceeded(t *testing.T) {
	got := Compute([]RequestOutput{{Error: "refused"}, {Error: "refused"}}, 1)
	want := Metrics{Failed: 2, OutputLens: []int{0, 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Compute of failures (-want +got):\n%s", diff)
	}
}

func TestArrivals(t *testing.T) {
	if diff := cmp.Diff(make([]time.Duration, 4), arrivals(4, math.Inf(1), 1)); diff != "" {
		t.Errorf("infinite rate: every request at once (-want +got):\n%s", diff)
	}
	// A Poisson process at 50 requests/s: gaps are exponential with mean
	// 20 ms and standard deviation 20 ms; over 20 000 gaps the sample mean
	// lies within 5 standard errors (0.7 ms) of 20 ms. The draw is seeded,
	// so the check is deterministic.
	const n, rate = 20000, 50.0
	at := arrivals(n, rate, 42)
	meanGap := at[n-1].Seconds() / n
	if math.Abs(meanGap-1/rate) > 5*(1/rate)/math.Sqrt(n) {
		t.Errorf("mean gap %.5f s, want %.5f s ± 5 standard errors", meanGap, 1/rate)
	}
	for i := 1; i < n; i++ {
		if at[i] < at[i-1] {
			t.Fatalf("arrival %d (%v) before arrival %d (%v)", i, at[i], i-1, at[i-1])
		}
	}
	if diff := cmp.Diff(at[:10], arrivals(10, rate, 42)); diff != "" {
		t.Errorf("same seed, other arrivals (-want +got):\n%s", diff)
	}
}
