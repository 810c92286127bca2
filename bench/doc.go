// Package bench is the serving benchmark behind `cpmla bench serve`: it
// drives any OpenAI-compatible server with a random dataset, streams every
// response over a plain net/http + bufio server-sent-events reader that
// timestamps each chunk, and reports what `vllm bench serve` reports, with
// the same definitions:
//
//   - TTFT: first chunk with a choice − send time.
//   - ITL: every gap between consecutive chunks with a choice, pooled over
//     all requests.
//   - E2EL: last chunk with a choice − send time.
//   - TPOT per request: (E2EL − TTFT) / (output tokens − 1), for requests
//     with more than one output token.
//   - Throughputs: completed requests, output tokens, and input plus
//     output tokens, each divided by the benchmark's wall-clock duration.
//   - Mean, median, population standard deviation and the 99th percentile
//     of each, with NumPy's default (linear) percentile interpolation; an
//     empty sample reports 0.
//
// Output tokens are the completion_tokens of the server's usage chunk (the
// client always asks for stream_options.include_usage); a server that
// sends none is measured by re-tokenizing the generated text.
//
// The package measures and reports; it must never retry a failed request
// (a failure is a result), never let the client's own decoding or
// bookkeeping sit between reading a chunk and taking its timestamp, and
// never send more than --max-concurrency requests at once.
package bench
