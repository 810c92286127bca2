// Package engine serves generation requests: continuous batching with
// chunked prefill, KV block management with prefix caching and preemption,
// the start-up memory budget and workspaces, warm-up, and the executor
// interface that runs model steps on one or many ranks.
//
// The Scheduler is a deterministic state machine: given the same calls (Add,
// Abort, Schedule, Complete with the sampled tokens) it produces the same
// StepPlans, so every rank of a deployment can derive the same plan, and the
// collectives that follow from it, from the replicated inputs. Block
// accounting uses the most loaded DCP rank's local length
// (kvcache.Layout.LocalLen); one block id covers --block-size positions of a
// request, stored as --block-size/N slots on each of the N DCP ranks, so the
// prefix cache hits at the granularity of one such block whatever N is.
//
// The Engine runs the scheduler in a single goroutine. All memory is sized at
// start-up: a profile step measures the activation peak, the executor's
// persistent buffers are listed and counted, and the KV cache gets what the
// plan.Budget leaves (or --kv-cache-memory). A configuration that cannot hold
// one --max-model-len request is refused before serving, naming the smallest
// utilization and memory limit that work. Before a caller loads weights or
// builds an executor, RunnerBytes says what building one allocates (without
// allocating) and Options.CheckMemory refuses a start-up that cannot fit in
// the memory the process may use (AvailableMemory: RAM, cgroup, ulimit -v,
// GOMEMLIMIT), naming the bytes and a setting that fits. A step that fails
// ends the engine (Err, Failed): every held request fails with the step's
// error and Submit refuses with ErrFailed.
//
// Invariants: a block is free, held (reference count ≥ 1) or evictable
// (cached, unreferenced), never two of them; a shared block is a full,
// computed, cached block no holder writes; decode steps after warm-up
// allocate nothing on the heap and build no kernel plan.
//
// The package must never grow a buffer during serving, let ranks derive
// different step plans, block its step loop on a slow reader, or keep a
// cancelled request's blocks past the next step.
package engine
