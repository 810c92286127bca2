// Package eval measures the accuracy lanes of cpmla over the OpenAI
// endpoints of servers running different parallel configurations:
//
//   - agreement: fixed random token prompts (Prompts, Collect), each lane's
//     greedy continuations compared with the single-rank ones (Score);
//   - arithmetic: the held-out word problems of cpmla-tiny's arithmetic task
//     (HeldoutProblems), sent as lm-eval's gsm8k task sends them through
//     local-completions and scored with its strict-match and
//     flexible-extract filters and exact_match (RunArithmetic);
//   - passkey: a five-digit key hidden at chosen depths of filler haystacks
//     of chosen token lengths, asked for through /v1/chat/completions
//     (PasskeyCases, RunPasskey);
//   - MTP acceptance: the servers' vLLM spec-decode counters from /metrics
//     (read by bench.ScrapeSpec), per draft position over the eval's
//     requests.
//
// Compare puts the lanes side by side against the reference lane and says
// which differ: greedy decoding must give every lane the same tokens, so the
// same accuracy and the same accepted drafts.
//
// It talks to servers only over HTTP, so it judges what a client sees. It
// must never sample (every request is greedy), reuse a response across
// lanes, count a malformed or failed response as agreeing or correct, or
// read a response or a problem file beyond its bound.
package eval
