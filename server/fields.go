package server

import (
	"encoding/json"
	"slices"
	"strings"
)

// Every request field is one of three kinds: served (decoded into the
// request structs and used), inert (changes nothing by definition, so it is
// accepted and not used), or refused with 400 naming it. A field that is
// neither served nor inert is refused, so no field is ever silently ignored.

// servedCommon are the fields both endpoints decode and use.
var servedCommon = append([]string{
	"model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
	"stop", "stop_token_ids", "n", "frequency_penalty", "presence_penalty", "repetition_penalty",
	"logit_bias", "allowed_token_ids", "min_tokens", "ignore_eos", "include_stop_str_in_output",
	"skip_special_tokens", "prompt_logprobs", "truncate_prompt_tokens", "return_tokens_as_token_ids",
	"request_id", "priority", "use_beam_search", "best_of",
}, structuredFieldNames...)

var (
	servedChat = append(slices.Clone(servedCommon), "messages", "logprobs", "top_logprobs", "max_completion_tokens", "add_generation_prompt",
		"tools", "tool_choice", "parallel_tool_calls", "documents", "chat_template_kwargs")
	servedCompletion = append(slices.Clone(servedCommon), "prompt", "logprobs", "echo", "add_special_tokens")
)

// inertFields change nothing a server computes: end-user and bookkeeping
// labels (user, metadata, store, safety_identifier, prompt_cache_key,
// service_tier), and length_penalty, which acts only with beam search (refused
// separately).
var inertFields = []string{"user", "metadata", "store", "safety_identifier", "prompt_cache_key", "service_tier", "length_penalty"}

// unknownField returns the first top-level key of body (a JSON object) that
// is neither served nor inert, or "".
func unknownField(body []byte, served []string) string {
	var keys map[string]json.RawMessage
	if json.Unmarshal(body, &keys) != nil {
		return ""
	}
	var bad []string
	for k, v := range keys {
		if slices.Contains(served, k) || slices.Contains(inertFields, k) {
			continue
		}
		// A null is how many clients write "not set".
		if strings.TrimSpace(string(v)) == "null" {
			continue
		}
		bad = append(bad, k)
	}
	if len(bad) == 0 {
		return ""
	}
	slices.Sort(bad)
	return bad[0]
}
