// Package verify runs a model under a parallel configuration (TP × PCP ranks
// with DCP-sharded KV, on in-process ranks) and checks it against the
// single-rank engine and the float64 oracle: greedy tokens, log-probabilities
// over the whole vocabulary, every row's top-k selection, bit-identical
// logits on every rank, and identical collective sequences within every
// group.
//
// It validates the configuration before any weight loads. It must never be
// used on a serving path, and never loosen a tolerance to make a run pass:
// a difference is reported with where it happened.
package verify
