// Package sampler turns a row of logits into a token the way vLLM's
// SamplingParams define it, and reports the model's log-probabilities.
//
// One sampling step applies, in vLLM's order: a structured output's mask
// (State.Constrain: the tokens its grammar allows next), allowed_token_ids, min_tokens
// (the stop ids are masked until that many tokens exist), logit_bias, the
// penalties (repetition, multiplicative on every token of the prompt and the
// output; frequency and presence, additive on output tokens), then greedy
// argmax when the temperature is below 1e-5, else temperature, min_p,
// top_k, top_p and a draw from the request's seeded generator.
//
// Log-probabilities are always those of the model's own distribution, the
// log_softmax of the raw logits before any of the steps above (vLLM's
// default logprobs mode, raw_logprobs).
//
// A State holds one sequence's settings, generator and token counts; a
// Scratch holds the vocabulary-sized work buffers and is shared by every
// sequence that one goroutine samples. Sampling is deterministic for a given
// seed and logits. The package must never allocate in Sample or
// TopLogprobs, never read global random state, and never modify the logits
// it is given.
package sampler
