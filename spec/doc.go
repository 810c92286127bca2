// Package spec is speculative decoding's bookkeeping: the
// --speculative-config of vLLM (method "mtp" with num_speculative_tokens,
// every other key refused by name), the acceptance of draft tokens, and the
// acceptance statistics every report shows.
//
// Acceptance never changes what plain decoding would produce: greedy drafts
// are accepted while they equal the target's greedy token at their position
// (the first mismatch is replaced by the target's token, and after K
// accepted drafts the target's next token is a bonus), so a greedy output
// with speculation is the greedy output without it, token for token.
//
// The package must never run a model or sample: callers give it the target's
// choices and the drafts.
package spec
