package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// Spec is the growth of the server's spec-decode counters over the
	// run (nil when it exports none).
	Spec *SpecCounters
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
	// The spec-decode counters before and after: a server that serves no
	// /metrics, or cannot be read, simply has none.
	specBefore, _ := ScrapeSpec(ctx, o.Client, base)
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
	res := &Result{Options: o, Duration: duration, Outputs: outputs, Metrics: Compute(outputs, duration), Date: start}
	if after, err := ScrapeSpec(ctx, o.Client, base); err == nil && after != nil {
		res.Spec = after.Since(specBefore)
	}
	return res, nil
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
	sv, err := Discover(ctx, client, base, "")
	return sv.Model, err
}

// Served is what a server says about the model it serves.
type Served struct {
	Model       string
	MaxModelLen int // 0 when the server does not say
	// VocabSize is the number of token ids the served model takes (ids
	// run from 0 to VocabSize−1), 0 when the server does not say; Source
	// says where it was read.
	VocabSize   int
	VocabSource string
}

// Discover asks the server at base which model it serves (the card of
// model in /v1/models, or its first card when model is empty) and how many
// token ids that model takes: the card's vocab_size, else the vocab_size of
// GET /tokenizer_info (vLLM's tokenizer-info endpoint, whose tokenizer is
// the model's), else unknown.
func Discover(ctx context.Context, client *http.Client, base, model string) (Served, error) {
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
			VocabSize   int    `json:"vocab_size"`
		} `json:"data"`
	}
	if err := getJSON(ctx, client, base+"/v1/models", &list); err != nil {
		return Served{}, fmt.Errorf("ask %s/v1/models for the served model: %w", base, err)
	}
	if len(list.Data) == 0 {
		return Served{}, fmt.Errorf("%s/v1/models lists no model; pass --model", base)
	}
	card := list.Data[0]
	if model != "" {
		found := false
		for _, c := range list.Data {
			if c.ID == model {
				card, found = c, true
			}
		}
		if !found {
			card.ID, card.MaxModelLen, card.VocabSize = model, 0, 0
		}
	}
	sv := Served{Model: card.ID, MaxModelLen: card.MaxModelLen, VocabSize: card.VocabSize}
	if sv.VocabSize > 0 {
		sv.VocabSource = base + "/v1/models vocab_size"
		return sv, nil
	}
	var info struct {
		VocabSize int `json:"vocab_size"`
	}
	if err := getJSON(ctx, client, base+"/tokenizer_info", &info); err == nil && info.VocabSize > 0 {
		sv.VocabSize, sv.VocabSource = info.VocabSize, base+"/tokenizer_info vocab_size"
	}
	return sv, nil
}

// getJSON GETs url and decodes a 200 answer (at most 1 MiB) into v.
func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}
