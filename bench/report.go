package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// ResultFile is the --result-file JSON, with the key names of vllm bench
// serve's result file. Latencies are in milliseconds except ttfts and itls
// (per request, in seconds, as vLLM writes them).
type ResultFile struct {
	Date                  string      `json:"date"`
	Backend               string      `json:"backend"`
	EndpointType          string      `json:"endpoint_type"`
	BaseURL               string      `json:"base_url"`
	Endpoint              string      `json:"endpoint"`
	ModelID               string      `json:"model_id"`
	NumPrompts            int         `json:"num_prompts"`
	RequestRate           any         `json:"request_rate"` // a number, or "inf"
	Burstiness            float64     `json:"burstiness"`
	MaxConcurrency        *int        `json:"max_concurrency"`
	Duration              float64     `json:"duration"`
	Completed             int         `json:"completed"`
	Failed                int         `json:"failed"`
	TotalInputTokens      int         `json:"total_input_tokens"`
	TotalOutputTokens     int         `json:"total_output_tokens"`
	RequestThroughput     float64     `json:"request_throughput"`
	RequestGoodput        *float64    `json:"request_goodput"`
	OutputThroughput      float64     `json:"output_throughput"`
	TotalTokenThroughput  float64     `json:"total_token_throughput"`
	MaxOutputTokensPerS   float64     `json:"max_output_tokens_per_s"`
	MaxConcurrentRequests int         `json:"max_concurrent_requests"`
	MeanTTFTMs            float64     `json:"mean_ttft_ms"`
	MedianTTFTMs          float64     `json:"median_ttft_ms"`
	StdTTFTMs             float64     `json:"std_ttft_ms"`
	P99TTFTMs             float64     `json:"p99_ttft_ms"`
	MeanTPOTMs            float64     `json:"mean_tpot_ms"`
	MedianTPOTMs          float64     `json:"median_tpot_ms"`
	StdTPOTMs             float64     `json:"std_tpot_ms"`
	P99TPOTMs             float64     `json:"p99_tpot_ms"`
	MeanITLMs             float64     `json:"mean_itl_ms"`
	MedianITLMs           float64     `json:"median_itl_ms"`
	StdITLMs              float64     `json:"std_itl_ms"`
	P99ITLMs              float64     `json:"p99_itl_ms"`
	MeanE2ELMs            float64     `json:"mean_e2el_ms"`
	MedianE2ELMs          float64     `json:"median_e2el_ms"`
	StdE2ELMs             float64     `json:"std_e2el_ms"`
	P99E2ELMs             float64     `json:"p99_e2el_ms"`
	InputLens             []int       `json:"input_lens"`
	OutputLens            []int       `json:"output_lens"`
	TTFTs                 []float64   `json:"ttfts"`
	ITLs                  [][]float64 `json:"itls"`
	StartTimes            []float64   `json:"start_times"`
	GeneratedTexts        []string    `json:"generated_texts"`
	Errors                []string    `json:"errors"`
	// Speculative decoding, from the server's vllm:spec_decode_* counters
	// over the run; absent when the server exports none.
	SpecDecodeAcceptanceRate   *float64  `json:"spec_decode_acceptance_rate,omitempty"`
	SpecDecodeAcceptanceLength *float64  `json:"spec_decode_acceptance_length,omitempty"`
	SpecDecodeNumDrafts        *float64  `json:"spec_decode_num_drafts,omitempty"`
	SpecDecodeDraftTokens      *float64  `json:"spec_decode_draft_tokens,omitempty"`
	SpecDecodeAcceptedTokens   *float64  `json:"spec_decode_accepted_tokens,omitempty"`
	SpecDecodePerPosition      []float64 `json:"spec_decode_per_position_acceptance_rates,omitempty"`
}

// File returns the result in the --result-file layout.
func (r *Result) File() ResultFile {
	m := r.Metrics
	o := r.Options
	f := ResultFile{
		Date: r.Date.Format("20060102-150405"), Backend: "cpmla", EndpointType: "openai",
		BaseURL: o.BaseURL, Endpoint: o.Endpoint, ModelID: o.Model, NumPrompts: len(o.Prompts),
		RequestRate: o.RequestRate, Burstiness: 1,
		Duration: r.Duration, Completed: m.Completed, Failed: m.Failed,
		TotalInputTokens: m.TotalInput, TotalOutputTokens: m.TotalOutput,
		RequestThroughput: m.RequestThroughput, OutputThroughput: m.OutputThroughput,
		TotalTokenThroughput: m.TotalTokenThroughput,
		MaxOutputTokensPerS:  m.MaxOutputTokensPerS, MaxConcurrentRequests: m.MaxConcurrentRequests,
		MeanTTFTMs: m.TTFT.Mean, MedianTTFTMs: m.TTFT.Median, StdTTFTMs: m.TTFT.Std, P99TTFTMs: m.TTFT.P99,
		MeanTPOTMs: m.TPOT.Mean, MedianTPOTMs: m.TPOT.Median, StdTPOTMs: m.TPOT.Std, P99TPOTMs: m.TPOT.P99,
		MeanITLMs: m.ITL.Mean, MedianITLMs: m.ITL.Median, StdITLMs: m.ITL.Std, P99ITLMs: m.ITL.P99,
		MeanE2ELMs: m.E2EL.Mean, MedianE2ELMs: m.E2EL.Median, StdE2ELMs: m.E2EL.Std, P99E2ELMs: m.E2EL.P99,
		OutputLens: m.OutputLens,
	}
	if o.Endpoint == EndpointChat {
		f.EndpointType = "openai-chat"
	}
	if math.IsInf(o.RequestRate, 1) {
		f.RequestRate = "inf"
	}
	if o.MaxConcurrency > 0 {
		c := o.MaxConcurrency
		f.MaxConcurrency = &c
	}
	if c := r.Spec; c != nil {
		rate, length, drafts, draft, acc := c.AcceptanceRate(), c.AcceptanceLength(), c.Drafts, c.DraftTokens, c.AcceptedTokens
		f.SpecDecodeAcceptanceRate, f.SpecDecodeAcceptanceLength = &rate, &length
		f.SpecDecodeNumDrafts, f.SpecDecodeDraftTokens, f.SpecDecodeAcceptedTokens = &drafts, &draft, &acc
		f.SpecDecodePerPosition = c.PerPosRates()
	}
	for _, out := range r.Outputs {
		f.InputLens = append(f.InputLens, out.PromptLen)
		f.TTFTs = append(f.TTFTs, out.TTFT)
		itl := out.ITL
		if itl == nil {
			itl = []float64{}
		}
		f.ITLs = append(f.ITLs, itl)
		f.StartTimes = append(f.StartTimes, out.StartTime)
		f.GeneratedTexts = append(f.GeneratedTexts, out.GeneratedText)
		f.Errors = append(f.Errors, out.Error)
	}
	return f
}

// WriteJSON writes the result file.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r.File()); err != nil {
		return fmt.Errorf("write result file: %w", err)
	}
	return nil
}

// WriteReport prints the summary table vllm bench serve prints.
func (r *Result) WriteReport(w io.Writer) error {
	m := r.Metrics
	var b strings.Builder
	header := func(title, fill string) {
		pad := max(0, 50-len(title))
		fmt.Fprintf(&b, "%s%s%s\n", strings.Repeat(fill, pad/2), title, strings.Repeat(fill, pad-pad/2))
	}
	row := func(label string, v any) {
		switch x := v.(type) {
		case float64:
			fmt.Fprintf(&b, "%-40s %-10.2f\n", label, x)
		default:
			fmt.Fprintf(&b, "%-40s %-10v\n", label, x)
		}
	}
	header(" Serving Benchmark Result ", "=")
	row("Successful requests:", m.Completed)
	row("Failed requests:", m.Failed)
	if r.Options.MaxConcurrency > 0 {
		row("Maximum request concurrency:", r.Options.MaxConcurrency)
	}
	if !math.IsInf(r.Options.RequestRate, 1) {
		row("Request rate configured (RPS):", r.Options.RequestRate)
	}
	row("Benchmark duration (s):", r.Duration)
	row("Total input tokens:", m.TotalInput)
	row("Total generated tokens:", m.TotalOutput)
	row("Request throughput (req/s):", m.RequestThroughput)
	row("Output token throughput (tok/s):", m.OutputThroughput)
	row("Peak output token throughput (tok/s):", m.MaxOutputTokensPerS)
	row("Peak concurrent requests:", float64(m.MaxConcurrentRequests))
	row("Total token throughput (tok/s):", m.TotalTokenThroughput)
	for _, s := range []struct {
		title, name string
		v           Summary
	}{
		{"Time to First Token", "TTFT", m.TTFT},
		{"Time per Output Token (excl. 1st token)", "TPOT", m.TPOT},
		{"Inter-token Latency", "ITL", m.ITL},
		{"End-to-end Latency", "E2EL", m.E2EL},
	} {
		header(s.title, "-")
		row(fmt.Sprintf("Mean %s (ms):", s.name), s.v.Mean)
		row(fmt.Sprintf("Median %s (ms):", s.name), s.v.Median)
		row(fmt.Sprintf("P99 %s (ms):", s.name), s.v.P99)
	}
	if c := r.Spec; c != nil {
		header("Speculative Decoding", "-")
		row("Acceptance rate (%):", 100*c.AcceptanceRate())
		row("Acceptance length:", c.AcceptanceLength())
		row("Drafts:", int64(c.Drafts))
		row("Draft tokens:", int64(c.DraftTokens))
		row("Accepted tokens:", int64(c.AcceptedTokens))
		var per []string
		for _, v := range c.PerPosRates() {
			per = append(per, fmt.Sprintf("%.2f", 100*v))
		}
		row("Per-position acceptance (%):", strings.Join(per, ", "))
	}
	b.WriteString(strings.Repeat("=", 50) + "\n")
	if m.Failed > 0 {
		shown := 0
		for i, out := range r.Outputs {
			if !out.Success && shown < 10 {
				fmt.Fprintf(&b, "request %d failed: %s\n", i, out.Error)
				shown++
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
