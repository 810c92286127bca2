package engine

import (
	"context"

	"github.com/cpmla/cpmla/sampler"
)

// Request is one generation request as the engine receives it.
type Request struct {
	// ID names the request in logs and metrics (unique per engine).
	ID string
	// PromptIDs are the prompt's token ids (already templated and tokenized).
	PromptIDs []int
	// MaxTokens bounds the generated tokens.
	MaxTokens int
	// Sampling selects greedy, temperature or nucleus sampling and the seed.
	Sampling sampler.Params
	// StopTokenIDs end the request when generated (the model's EOS unless IgnoreEOS).
	StopTokenIDs []int
	// IgnoreEOS keeps generating through end-of-sequence tokens.
	IgnoreEOS bool
}

// Finish reasons, as OpenAI reports them.
const (
	FinishStop   = "stop"   // a stop token was generated
	FinishLength = "length" // MaxTokens reached
	FinishAbort  = "abort"  // cancelled or failed
)

// Event is one step of a request's output stream: a generated token, or the
// end of the stream (Finish set), or an error.
type Event struct {
	Token   int
	Logprob float64 // natural log under the model's distribution
	// Finish is set on the last event of the stream.
	Finish string
	// PromptTokens and OutputTokens are set on the last event.
	PromptTokens, OutputTokens int
	Err                        error
}

// Submitter is what front ends (the HTTP server, benchmarks, evaluation)
// need from an engine: submit a request and read its events until Finish or
// Err. Cancelling ctx aborts the request and frees its KV blocks at once.
type Submitter interface {
	Submit(ctx context.Context, req Request) (<-chan Event, error)
}
