// Package plan is the deployment planner and the memory model of cpmla.
//
// It answers, before anything is launched, whether a configuration fits:
// the KV budget left by a utilization fraction of device (or host) memory
// once non-KV memory and graph memory are taken out, how many tokens each
// rank can cache, how many full-length requests fit, the smallest
// utilization or memory limit that would fit, the workspaces a sparse-MLA
// backend needs under decode context parallelism (DCP), and which attention
// backend can serve an exact TP/PCP/DCP/KV-dtype combination.
//
// The device-neutral part (Budget, the KV byte functions, the backend
// capability table and SelectBackend) is shared with the CPU engine, which
// sizes its own caches and validates its own backend with the same
// functions. The GPU part (device catalog, FlashInfer sparse workspace, DCP
// all-to-all buffer, autotuner headroom) sits on top and produces a Plan.
//
// Invariants:
//   - KV bytes per token come from one place (MLARowBytes, IndexerKeyBytes,
//     KVSlotBytes); nothing else in the module re-derives them.
//   - Every refusal and every warning names the constraint, the values and a
//     setting that works.
//   - Arithmetic is integer bytes wherever the inputs are bytes; fractions
//     appear only for utilizations and ratios.
//
// The package must never allocate device memory, read weights, start ranks
// or talk to a GPU: it is arithmetic on configuration and measured numbers.
package plan
