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
// A client holds only what HTTPLimits allow: time to send its headers and
// body, an idle keep-alive connection, header bytes, open connections
// (LimitListener answers one too many with 503) and the life of a request
// (504 past it). A text prompt or rendered chat is tokenized with an early
// exit at Config.MaxModelLen tokens, for at most Config.PromptWorkers
// requests at once. A request body that does not decode is refused in its
// own JSON terms (param is the JSON path of the value), never with the
// decoder's Go types. An engine that has failed (its Err is set) makes
// /health answer 503 and new requests 503 engine_failed.
//
// Structured output (response_format, structured_outputs, guided_*;
// structured.go) is compiled by the grammar package after admission,
// within its limits, and every sequence of the request draws under its own
// matcher; what the grammar cannot enforce is refused with 400 naming the
// field and the keyword, never approximated.
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
