package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cpmla/cpmla/tokenizer"
)

// The endpoints the benchmark can drive.
const (
	EndpointCompletions = "/v1/completions"
	EndpointChat        = "/v1/chat/completions"
)

// Options configure a serving benchmark.
type Options struct {
	// BaseURL is the server, e.g. http://127.0.0.1:8000.
	BaseURL string
	// Endpoint is EndpointCompletions or EndpointChat.
	Endpoint string
	// Model is sent as "model"; empty asks the server's /v1/models.
	Model string
	// Prompts are the requests, sent in order.
	Prompts []Prompt
	// MaxConcurrency bounds the requests in flight; 0 means no bound.
	MaxConcurrency int
	// RequestRate is the mean arrival rate of a Poisson process in
	// requests per second; +Inf sends every request at once.
	RequestRate float64
	// IgnoreEOS asks the server to generate every requested token.
	IgnoreEOS bool
	// Seed seeds the arrival times.
	Seed uint64
	// Tokenizer counts output tokens when a server reports no usage.
	Tokenizer *tokenizer.Tokenizer
	// Client sends the requests; nil uses a client without a timeout.
	Client *http.Client
	// Progress, if set, is called once per finished request.
	Progress func()
}

func (o *Options) validate() error {
	switch {
	case o.BaseURL == "":
		return errors.New("--base-url is empty; give the server, e.g. http://127.0.0.1:8000")
	case o.Endpoint != EndpointCompletions && o.Endpoint != EndpointChat:
		return fmt.Errorf("--endpoint is %q; use %s or %s", o.Endpoint, EndpointCompletions, EndpointChat)
	case len(o.Prompts) == 0:
		return errors.New("no prompts to send; use --num-prompts 1 or more")
	case o.MaxConcurrency < 0:
		return fmt.Errorf("--max-concurrency is %d; use 0 (no bound) or more", o.MaxConcurrency)
	case !(o.RequestRate > 0):
		return fmt.Errorf("--request-rate is %v; use a positive rate or inf", o.RequestRate)
	}
	return nil
}

// requestBody is the JSON body of one benchmark request.
func (o *Options) requestBody(p Prompt) ([]byte, error) {
	body := map[string]any{
		"model":          o.Model,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
		"temperature":    0,
		"ignore_eos":     o.IgnoreEOS,
	}
	if o.Endpoint == EndpointChat {
		body["messages"] = []map[string]string{{"role": "user", "content": p.Text}}
		body["max_completion_tokens"] = p.OutputLen
	} else {
		body["prompt"] = p.IDs
		body["max_tokens"] = p.OutputLen
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return b, nil
}

// arrivals returns each request's send offset from the start: all zero
// for an infinite rate, otherwise the cumulative sum of exponential gaps
// with mean 1/rate (a Poisson process).
func arrivals(n int, rate float64, seed uint64) []time.Duration {
	out := make([]time.Duration, n)
	if math.IsInf(rate, 1) {
		return out
	}
	rng := rand.New(rand.NewPCG(seed, 0xbb67ae8584caa73b))
	t := 0.0
	for i := range out {
		t += rng.ExpFloat64() / rate
		out[i] = time.Duration(t * float64(time.Second))
	}
	return out
}

// Result is a finished run: the options it ran with, every request's
// measurements and the metrics.
type Result struct {
	Options  Options
	Duration float64 // seconds
	Outputs  []RequestOutput
	Metrics  Metrics
	Date     time.Time
}

// Run sends every prompt, measures the responses and computes the metrics.
// Failed requests are results, not errors; Run fails only when the
// benchmark cannot run at all.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	}
	base := strings.TrimRight(o.BaseURL, "/")
	if o.Model == "" {
		m, err := firstModel(ctx, o.Client, base)
		if err != nil {
			return nil, err
		}
		o.Model = m
	}
	bodies := make([][]byte, len(o.Prompts))
	for i, p := range o.Prompts {
		b, err := o.requestBody(p)
		if err != nil {
			return nil, err
		}
		bodies[i] = b
	}
	at := arrivals(len(o.Prompts), o.RequestRate, o.Seed)
	var slots chan struct{}
	if o.MaxConcurrency > 0 {
		slots = make(chan struct{}, o.MaxConcurrency)
	}
	outputs := make([]RequestOutput, len(o.Prompts))
	start := time.Now()
	var wg sync.WaitGroup
	var progressMu sync.Mutex
	for i := range o.Prompts {
		if wait := time.Until(start.Add(at[i])); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				wg.Wait()
				return nil, fmt.Errorf("benchmark interrupted: %w", ctx.Err())
			case <-t.C:
			}
		}
		wg.Go(func() {
			if slots != nil {
				slots <- struct{}{}
				defer func() { <-slots }()
			}
			outputs[i] = o.one(ctx, base+o.Endpoint, bodies[i], o.Prompts[i], start)
			if o.Progress != nil {
				progressMu.Lock()
				o.Progress()
				progressMu.Unlock()
			}
		})
	}
	wg.Wait()
	duration := time.Since(start).Seconds()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("benchmark interrupted: %w", err)
	}
	return &Result{Options: o, Duration: duration, Outputs: outputs, Metrics: Compute(outputs, duration), Date: start}, nil
}

// one sends one request and measures it.
func (o *Options) one(ctx context.Context, url string, body []byte, p Prompt, start time.Time) RequestOutput {
	m, sent, err := stream(ctx, o.Client, url, body)
	out := RequestOutput{PromptLen: len(p.IDs), StartTime: sent.Sub(start).Seconds(), GeneratedText: string(m.text)}
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Success = true
	out.TTFT, out.ITL, out.Latency = m.ttft, m.itl, m.latency
	if out.ITL == nil {
		out.ITL = []float64{}
	}
	switch {
	case m.usage:
		out.OutputTokens = m.completionTokens
		if o.Endpoint == EndpointChat && m.promptTokens > 0 {
			out.PromptLen = m.promptTokens
		}
	case o.Tokenizer != nil:
		out.OutputTokens = len(o.Tokenizer.Encode(string(m.text), false))
	default:
		out.OutputTokens = len(m.itl) + 1 // one token per chunk
	}
	return out
}

// firstModel asks the server which model it serves.
func firstModel(ctx context.Context, client *http.Client, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("build /v1/models request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("ask %s/v1/models for the served model (or pass --model): %w", base, err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s/v1/models answered HTTP %d; pass --model", base, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", fmt.Errorf("decode %s/v1/models: %w", base, err)
	}
	if len(list.Data) == 0 {
		return "", fmt.Errorf("%s/v1/models lists no model; pass --model", base)
	}
	return list.Data[0].ID, nil
}
