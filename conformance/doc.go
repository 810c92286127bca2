// Package conformance checks the engine's kernels against golden case files
// produced by an independent reference implementation (tools/reference, Python
// and numpy, float64 math). A case file is a safetensors file whose
// __metadata__ names the kernel ("kernel") and its parameters (strings) and
// whose tensors are the kernel's inputs; Run validates every input, calls the
// engine's own implementation and returns the output tensors; Compare checks
// them against a want file with the kernel's tolerances.
//
// Kernels and their contracts (all tensors F32 unless noted, indices I32):
//
//   - sparse_mla_prefill (sm_scale, d_v = 512): q [s_q,h_q,576], kv [s_kv,576],
//     indices [s_q,topk] (invalid: < 0 or ≥ s_kv), optional topk_length [s_q]
//     → out [s_q,h_q,512], lse [s_q,h_q], max_logits [s_q,h_q]. Calls
//     mla.SparseAttention over mla.DenseKV.
//   - sparse_mla_decode (sm_scale, page_size): q [b,s_q,h_q,576], kv_cache
//     [num_blocks,page_size,656] U8 fp8_ds_mla records, indices [b,s_q,topk]
//     slots (−1 invalid), optional topk_length [b] → out [b,s_q,h_q,512],
//     lse [b,s_q,h_q]. Rows are decoded with numfmt.DecodeDSMLA on demand.
//   - fp8_ds_mla_quantize: kv [n,576] → records [n,656] U8
//     (numfmt.EncodeDSMLA); fp8_ds_mla_dequantize: records → kv
//     (numfmt.DecodeDSMLA).
//   - indexer_topk (topk): q [t,H,d], k [s,d], w [t,H], ends [t] I32 →
//     scores [t,s] (−Inf where masked) and indices [t,topk] (score
//     descending, then lowest index, −1 padding at the end). w is the final
//     per-head weight: the H_I^-0.5·d_I^-0.5 factor is already in it.
//     Calls mla.IndexerScores and mla.IndexerTopK.
//   - lse_combine: out [n,t,h,d], lse [n,t,h] → out [t,h,d], lse [t,h]
//     (mla.CombineLSE). NaN, +Inf and −Inf partial LSEs are empty ranks; a
//     row with only empty ranks gives out 0 and lse −Inf.
//   - dcp_local_seq_lens (dcp_size, dcp_rank, interleave): seq_lens [R] →
//     local_seq_lens [R] (kvcache.Layout.LocalSeqLens).
//   - dcp_localize_indices (block_size, dcp_size, dcp_rank, interleave,
//     compact "true"/"false"): indices [T,K] request positions, block_table
//     [R,max_blocks], req_id [T] → slots [T,K], valid_counts [T]
//     (kvcache.Layout.Localize per token with its request's block-table row;
//     compact keeps the kept slots in their original order).
//
// Conversions at the boundary. The engine reports a row that sees no key
// with lse −Inf (natural log, everywhere); FlashMLA's sparse kernels report
// +Inf, and the case files follow FlashMLA, so Run turns −Inf into +Inf for
// the lse of sparse_mla_prefill and sparse_mla_decode (max_logits stays −Inf,
// out stays 0). Prefill indices ≥ s_kv become −1 before the engine sees
// them; decode entries past topk_length are ignored entirely (they may hold
// anything), while counted decode entries must be −1 or a slot of kv_cache.
// The lse_combine output keeps the engine's −Inf for all-empty rows.
//
// Comparison follows FlashMLA's comparator: ±Inf and NaN positions must
// match exactly; an element passes when |a−r| < abs or |a−r|/(|r|+1e-6) <
// rel; cos_diff = 1 − 2Σar/Σ(a²+r²) over the finite elements must stay
// below its bound. Tolerances per kernel and tensor are in Tolerances; the
// sparse-attention ones are FlashMLA's test thresholds. Integer and byte
// outputs must be equal. Indexer indices must be equal except at positions
// the want file marks in indices_tie (another key within twice the score
// tolerance), where any key whose reference score is that close is
// accepted; exact ties are never marked and must go to the lowest index.
//
// A malformed case — unknown or missing kernel, missing tensor, a tensor the
// kernel does not read, wrong dtype, wrong rank or shape, dimensions that
// disagree between tensors, a bad metadata value, an index or length out of
// range — gives a one-line error
// naming the tensor or field, what was expected and what was found. Run must
// never panic on any input file, never modify the input's tensors (they may
// be read-only file mappings), and never carry math of its own: every number
// it returns comes from the engine's packages.
package conformance
