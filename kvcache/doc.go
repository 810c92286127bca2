// Package kvcache is the paged KV cache of one rank: the ownership function of
// decode context parallelism (which DCP rank holds token p of a request, and at
// which local index), slot mapping, index localization, the block pool, and
// the per-layer storage of MLA rows and indexer keys in f32, bf16 or
// fp8_ds_mla / fp8.
//
// The ownership function lives here and nowhere else. Token p of a request
// lives on DCP rank (p/I) mod N at local index (p/(N·I))·I + p mod I (Layout).
// Slot mapping, local sequence lengths, chunk planning, index localization and
// the indexer merge all call Layout; no other package re-derives it.
//
// Invariants:
//   - Block ids are the same on every DCP rank: rank r stores its B local
//     tokens of logical block j in its own physical block BlockTable[j].
//   - 1 ≤ I ≤ B and B mod I == 0 (Layout.Validate), so a local block holds
//     exactly B tokens of one logical block of N·B positions.
//   - Storage is allocated once, in NewCache and NewPool; cache reads and
//     writes never allocate.
//
// This package must never run attention, talk to other ranks, decide which
// request gets blocks (that is the scheduler's job), or grow its storage after
// construction.
package kvcache
