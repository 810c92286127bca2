// Package sampler turns a row of logits into a token: greedy, temperature
// and nucleus (top-p) sampling from a seeded generator, plus the model's
// log-probabilities.
//
// Sampling is deterministic for a given seed and logits. The package must
// never allocate per token after construction, and never read global random
// state: every request owns its generator.
package sampler
