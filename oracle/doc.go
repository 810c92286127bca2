// Package oracle is a naive float64 implementation of a whole sparse-MLA
// model (DeepSeek-V3.2 / GLM-5 family, dense SwiGLU MLP in every layer),
// written straight from the formulas: RMSNorm, YaRN RoPE, the MLA
// projections, the DSA lightning indexer with its exact top-k, attention in
// the non-absorbed MHA form, the MLP and the LM head with a float64
// log-softmax.
//
// It exists to judge the engine: tests and `cpmla verify` run it next to the
// engine and compare logprobs, greedy tokens and the indexer's selected
// sets. To be a judge it must stay independent of the engine's code paths:
// it imports only config and numfmt (for the storage rounding of the KV and
// indexer-key caches) and never mla, kvcache, model or kernels.
//
// It must never be called on a serving path, never take numerical shortcuts
// (no absorbed form, no float32 arithmetic, no approximate top-k), and never
// keep a KV cache: every Run recomputes the sequence from its tokens.
//
// Invariants:
//   - the cached MLA row [c_kv | k_pe] is rounded exactly as the configured KV
//     cache dtype stores it, and the indexer key as the indexer key dtype
//     stores it; everything else is float64;
//   - the selected set of token t is the top min(K, t+1) index scores over
//     positions s ≤ t, score descending, ties to the lowest position;
//   - logprobs at position t depend only on tokens[:t+1].
package oracle
