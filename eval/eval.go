package eval

import (
	"context"
	"fmt"
	"net/http"
)

// PromptOptions draw the fixed prompt set.
type PromptOptions struct {
	NumPrompts   int
	Seed         uint64
	MinLen       int
	MaxLen       int
	VocabSize    int
	FirstTokenID int // lowest id drawn (skips special tokens at the bottom of the vocabulary)
}

// Prompts returns NumPrompts token-id prompts with lengths in [MinLen, MaxLen],
// the same for every call with the same options.
func Prompts(o PromptOptions) ([][]int, error) {
	if o.NumPrompts < 1 || o.MinLen < 1 || o.MaxLen < o.MinLen || o.VocabSize <= o.FirstTokenID {
		return nil, fmt.Errorf("prompt options need num prompts ≥ 1, 1 ≤ min len ≤ max len and a vocabulary above the first id, got %+v", o)
	}
	x := o.Seed*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	out := make([][]int, o.NumPrompts)
	for i := range out {
		n := o.MinLen + int(next()%uint64(o.MaxLen-o.MinLen+1))
		out[i] = make([]int, n)
		for j := range out[i] {
			out[i][j] = o.FirstTokenID + int(next()%uint64(o.VocabSize-o.FirstTokenID))
		}
	}
	return out, nil
}

// Completion is one response as a client sees it.
type Completion struct {
	OK     bool   // HTTP 200 with a well-formed body of the requested length
	Text   string // the continuation
	Reason string // why it is not OK
}

type completionRequest struct {
	Model       string  `json:"model"`
	Prompt      []int   `json:"prompt"`
	MaxTokens   int     `json:"max_tokens"`
	Temperature float64 `json:"temperature"`
	IgnoreEOS   bool    `json:"ignore_eos"`
}

type completionResponse struct {
	Choices []struct {
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// Collect sends every prompt to baseURL's /v1/completions (greedy, exactly
// maxTokens tokens) with at most concurrency requests in flight and returns
// the completions in prompt order.
func Collect(ctx context.Context, client *http.Client, baseURL, model string, prompts [][]int, maxTokens, concurrency int) []Completion {
	out := make([]Completion, len(prompts))
	forEach(len(prompts), concurrency, func(i int) {
		out[i] = complete(ctx, client, baseURL, model, prompts[i], maxTokens)
	})
	return out
}

func complete(ctx context.Context, client *http.Client, baseURL, model string, prompt []int, maxTokens int) Completion {
	var r completionResponse
	if err := postJSON(ctx, client, baseURL+"/v1/completions", completionRequest{Model: model, Prompt: prompt, MaxTokens: maxTokens, IgnoreEOS: true}, &r); err != nil {
		return Completion{Reason: err.Error()}
	}
	if len(r.Choices) != 1 {
		return Completion{Reason: fmt.Sprintf("%d choices, want 1", len(r.Choices))}
	}
	if r.Usage.CompletionTokens != maxTokens {
		return Completion{Reason: fmt.Sprintf("%d completion tokens, asked for %d", r.Usage.CompletionTokens, maxTokens)}
	}
	return Completion{OK: true, Text: r.Choices[0].Text}
}

// Outcome is one configuration's lane result.
type Outcome struct {
	Config      string   `json:"config"`
	Completed   int      `json:"completed"`
	Total       int      `json:"total"`
	InvalidRate float64  `json:"invalid_rate"`
	Agreement   float64  `json:"agreement"`
	Agreed      int      `json:"agreed"`
	Problems    []string `json:"problems,omitempty"`
}

// Score compares a configuration's completions with the reference (the
// single-rank configuration). Agreement is the fraction of all prompts whose
// continuation equals the reference's, both well formed; a failed or
// malformed response never agrees.
func Score(config string, got, ref []Completion) Outcome {
	o := Outcome{Config: config, Total: len(got)}
	agree := 0
	for i, c := range got {
		if !c.OK {
			if len(o.Problems) < 5 {
				o.Problems = append(o.Problems, fmt.Sprintf("prompt %d: %s", i, c.Reason))
			}
			continue
		}
		o.Completed++
		if ref[i].OK && ref[i].Text == c.Text {
			agree++
		} else if len(o.Problems) < 5 {
			o.Problems = append(o.Problems, fmt.Sprintf("prompt %d: continuation %q differs from single rank %q", i, c.Text, ref[i].Text))
		}
	}
	if o.Total > 0 {
		o.InvalidRate = float64(o.Total-o.Completed) / float64(o.Total)
		o.Agreement = float64(agree) / float64(o.Total)
	}
	o.Agreed = agree
	return o
}
