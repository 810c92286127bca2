// Package server is cpmla's OpenAI-compatible HTTP front end: it turns
// /v1/completions and /v1/chat/completions requests into token ids (the
// tokenizer and its chat template), submits them to an engine.Submitter,
// and returns the generated text as one JSON response or as a stream of
// server-sent events. It also serves /v1/models, /health and Prometheus
// metrics on /metrics.
//
// Admission is bounded by the server itself: at most Config.MaxInFlight
// requests are submitted to the engine at once (the engine's running slots
// plus the waiting queue); one more is refused at once with 429 instead of
// being queued without limit. A prompt that leaves no room for a generated
// token within Config.MaxModelLen is refused with 400 naming both numbers.
//
// Text leaves the server only in whole characters (the tokenizer's stream
// decoder holds back incomplete UTF-8) and never past a stop string: text
// that could still become the start of a stop string is held back until
// the next token decides it.
//
// Invariants:
//   - Every request context handed to the engine is cancelled when the
//     response ends for any reason (finished, stop string matched, client
//     gone, write failed), so the engine frees the request's KV at once.
//   - Every admitted request releases its admission slot exactly once.
//   - Error bodies always have the OpenAI shape
//     {"error":{"message","type","param","code"}}.
//
// The package must never run model math or scheduling of its own, never
// block the engine on a slow client for longer than one event (it reads
// events and writes them out in the same goroutine, and a client that
// stops reading cancels its request), and never register metrics in the
// process-wide Prometheus registry (each Server has its own).
package server
