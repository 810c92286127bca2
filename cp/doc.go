// Package cp holds the cross-rank algorithms of context parallelism in
// cpmla: the decode-context-parallel (DCP) combine of partial attention
// results (ag_rs, a2a, and the all-reduce form used when the DCP group spans
// PCP), the all-gather of absorbed queries over the DCP group, the exact
// global top-k merge of per-rank indexer candidates, the localization of
// global top-k positions to this rank's cache slots, the prefill-context-
// parallel (PCP) DualChunkSwap partition and its restore index, and the
// backend plan that decides, per row kind, which attention path runs and which
// collective combines it.
//
// Every type is built once from sizes known at start-up (rank counts, the
// maximum rows of a step, heads, widths) and owns every buffer its methods
// need; the methods take slices and do not allocate.
//
// Invariants:
//   - Ownership of positions comes from kvcache.Layout only (Owner, Global,
//     Localize); nothing here re-derives it.
//   - Every rank of a group issues the same collectives in the same order
//     with the same counts. Counts derive from values every rank holds equally
//     (the replicated step plan: row counts, all-rank maxima), never from a
//     rank's local data; padding is explicit.
//   - The combine is exact: LSE = ln Σ_r exp(lse_r), o = Σ_r exp(lse_r − LSE)·o_r
//     in float32 natural-log units; NaN and +Inf partial LSEs are empty, and a
//     row no rank has keys for gets output 0 and LSE −Inf, never NaN.
//   - The global top-k is the single-rank top-k over all keys: score
//     descending, then lowest global position, identical on every rank.
//
// This package must never re-derive ownership, let ranks diverge in the
// collectives they issue, allocate per step after construction, or run the
// attention math itself (that is package mla).
package cp
