// Package eval measures the accuracy lanes of cpmla: it sends a fixed set of
// greedy completion requests through the OpenAI endpoint of servers running
// different parallel configurations and compares each configuration's
// continuations with the single-rank one (exact match), counting failed and
// malformed responses.
//
// It talks to servers only over HTTP, so it judges what a client sees. It must
// never sample (every request is greedy), reuse a response across
// configurations, or count a malformed response as agreeing.
package eval
