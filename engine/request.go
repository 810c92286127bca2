package engine

import (
	"context"
	"time"

	"github.com/cpmla/cpmla/sampler"
)

// Request is one generation request as the engine receives it.
type Request struct {
	// ID names the request in logs and metrics (unique per engine).
	ID string
	// PromptIDs are the prompt's token ids (already templated and tokenized).
	PromptIDs []int
	// MaxTokens bounds the generated tokens of each sequence. 0 is allowed
	// only with ScorePrompt: the prompt is scored and nothing is generated.
	MaxTokens int
	// N sequences are sampled from the prompt, which is computed once and
	// whose KV blocks they share (0 means 1). Sequence k draws from seed
	// Sampling.Seed + k.
	N int
	// Sampling are the sampling settings of every sequence. The engine sets
	// Sampling.StopTokenIDs to the request's stop ids for min_tokens.
	Sampling sampler.Params
	// StopTokenIDs end a sequence when generated (the model's EOS unless IgnoreEOS).
	StopTokenIDs []int
	// IgnoreEOS keeps generating through end-of-sequence tokens.
	IgnoreEOS bool
	// TopLogprobs is the number of most likely tokens reported with every
	// generated token (Event.Top).
	TopLogprobs int
	// ScorePrompt asks for the logprob of every prompt token after the first
	// and its PromptTopLogprobs most likely alternatives (Event.Prompt).
	ScorePrompt       bool
	PromptTopLogprobs int
	// Constraint, when set, constrains every sequence's output (structured
	// output): each sequence gets its own sampler.Constraint, whose mask
	// applies to every draw. A sequence whose constraint fails (no token
	// allowed, a token refused) ends its request with the error.
	Constraint ConstraintFactory
	// StopText, when set, gives every sequence a StopMatcher for stops that
	// are not token ids (stop strings): the token it reports ends the
	// sequence with FinishStop in the step that generated it, as a stop
	// token would, so no step runs past it.
	StopText StopMatcherFactory
}

// StopMatcher watches one sequence's generated tokens for a stop that is
// not a token id. Ends is called once per generated token, in order, on the
// engine's goroutine (never for a token that a stop id or a limit ended the
// sequence at first), and reports that the token ends the sequence. It is on
// the decode path: it must not block, and should not allocate per call.
type StopMatcher interface {
	Ends(token int) bool
}

// StopMatcherFactory makes the StopMatcher of each sequence of a request.
type StopMatcherFactory interface {
	NewStopMatcher() StopMatcher
}

// ConstraintFactory makes the constraint of one sequence: endTokens are the
// ids that end it (the model's EOS unless IgnoreEOS, and the request's stop
// ids), maxTokens the most tokens it generates.
type ConstraintFactory interface {
	NewConstraint(endTokens []int, maxTokens int) (sampler.Constraint, error)
}

// Finish reasons, as OpenAI reports them.
const (
	FinishStop   = "stop"   // a stop token (or a StopMatcher's stop) was generated
	FinishLength = "length" // MaxTokens reached
	FinishAbort  = "abort"  // cancelled or failed
)

// Event is one step of a request's output stream: a generated token of
// sequence Index, or the end of that sequence (Finish set), or an error.
// The stream closes after every sequence has finished.
type Event struct {
	// Index is the sequence (0 … N-1) the event belongs to.
	Index   int
	Token   int
	Logprob float64 // natural log under the model's distribution
	// Top holds the Request.TopLogprobs most likely tokens of this step
	// under the model's distribution, most likely first. It is valid until
	// the stream closes.
	Top []sampler.TokenLogprob
	// Prompt, on the first event of the stream when Request.ScorePrompt is
	// set, holds one entry per prompt position; position 0 has no logprob.
	Prompt []PromptLogprob
	// Scheduled, on the first event of the stream, is when the request was
	// first scheduled into a step (the end of its queueing).
	Scheduled time.Time
	// Finish is set on the last event of a sequence.
	Finish string
	// PromptTokens and OutputTokens are set on the last event of a sequence.
	PromptTokens, OutputTokens int
	Err                        error
}

// PromptLogprob scores one prompt token under the model's distribution
// given the tokens before it.
type PromptLogprob struct {
	Logprob float64
	// Rank is the number of tokens at least as likely (1 = the most likely).
	Rank int
	// Top are the most likely tokens at this position, most likely first.
	Top []sampler.TokenLogprob
}

// Submitter is what front ends (the HTTP server, benchmarks, evaluation)
// need from an engine: submit a request and read its events until every
// sequence has finished (the channel then closes). Cancelling ctx aborts
// the request and frees its KV blocks at once.
type Submitter interface {
	Submit(ctx context.Context, req Request) (<-chan Event, error)
}
