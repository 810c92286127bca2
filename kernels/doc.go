// Package kernels holds the numeric building blocks of the engine in plain Go:
// the Linear layer (MatMulT/MatVecT over f32 or bf16 weights), dot products,
// RMSNorm and LayerNorm, SiLU/SwiGLU, softmax and log-sum-exp, a deterministic
// top-k, and rotary position embeddings with DeepSeek-style YaRN.
//
// These functions are the reference implementation: they always build on
// every platform, they are written for clarity first, and they are the oracle
// that faster (assembly) kernels are tested against. Their numerics are pinned
// down so that an oracle comparison is meaningful:
//
//   - Dot products sum in a fixed order: four lanes (lane l takes the
//     elements k ≡ l mod 4 of the largest multiple of four), the tail is added
//     to lane 0 in order, and the lanes are combined as (l0+l1)+(l2+l3).
//     Every product is rounded to float32 before it is added (an explicit
//     conversion, which forbids FMA fusion), so the result has the same bits
//     on every GOAMD64 level.
//   - MatMulT computes each output element with exactly that Dot, so row i of
//     a batched product has the same bits as MatVecT on row i alone: results
//     never depend on how many other rows share the batch.
//   - bf16 weights are widened exactly to float32 before they are multiplied.
//   - RoPE angles pos·inv_freq and their cos/sin are computed in float64 and
//     rounded to float32 once; the rotation itself is float32 (Apply) or
//     float64 (Apply64).
//
// Invariants and what the package must never do:
//
//   - The hot functions (MatMulT, MatVecT, Dot, Axpy, RMSNorm, LayerNorm,
//     SwiGLU, Softmax, LogSumExp, TopK, Rope.Apply, Rope.Apply64) never
//     allocate: callers own every buffer, and tests assert zero allocations.
//   - They never start goroutines and keep no state between calls; a Rope is
//     immutable after NewRope and safe for concurrent use.
//   - They never silently truncate: a length mismatch is a programming error
//     and panics with the lengths involved.
//   - TopK never selects a −Inf or NaN score and breaks ties by the lowest
//     index, so every caller that sees the same scores selects the same set in
//     the same order.
//   - Nothing here knows about ranks, caches or models; model code composes
//     these kernels.
package kernels
