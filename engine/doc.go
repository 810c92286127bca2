// Package engine serves generation requests: continuous batching with
// chunked prefill, KV block management with prefix caching and preemption,
// the start-up memory budget and workspaces, and the rank executor that runs
// model steps.
//
// All memory is sized at start-up from the configuration; a configuration
// that cannot fit is refused before any weight loads. The package must never
// grow a buffer during serving or let ranks derive different step plans.
package engine
