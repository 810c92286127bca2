// Package mla is the single-rank math of Multi-head Latent Attention with
// DeepSeek Sparse Attention: the absorbed sparse MQA form the decode and
// sparse-prefill paths run over cache rows, the non-absorbed causal MHA form
// used for dense prefill and as a cross-check, the lightning-indexer scores and
// top-k, and the exact log-sum-exp combine of partial results.
//
// Conventions:
//   - A cache row is 576 float32: the 512-wide normalized latent c_kv, then the
//     64-wide RoPE key k_pe. Values are the first 512 dims of the same row.
//   - LSE is float32 and natural log everywhere. A row that sees no key has
//     output 0 and LSE −Inf (never +Inf, never NaN); NaN and +Inf partial LSEs
//     are treated as empty by CombineLSE.
//   - Sparse indices are cache slots; any negative index is "no key" and may
//     appear anywhere in a row. Top-k ties go to the lowest position.
//   - The softmax scale is passed in by the caller (config.Model.SoftmaxScale),
//     never derived from the 576-wide row.
//
// SparseAttention and IndexerScores have a fast path on the assembly kernels
// of package kernels (kernels.AttendRows, AttendRowsBF16, AttendDecodedRows,
// ScoreKeys) that reads exactly the rows and keys the reference reads; it
// agrees with the reference within float32 rounding and keeps every query
// row's bits independent of the other rows. Sources say how they store
// rows: BF16KVSource rows are read in place, DecodingKVSource records
// (fp8_ds_mla) are prefetched ahead and decoded a block at a time, and
// DecodingKeySource records (fp8 keys) are decoded a gather chunk per call. CPMLA_KERNELS=ref runs the reference.
//
// This package must never read a cache row for an invalid index, allocate on
// the hot path (SparseAttention, IndexerScores, IndexerTopK and CombineLSE are
// allocation-free), start goroutines, know about ranks or collectives, or
// decide ownership of positions (that is kvcache.Layout).
package mla
