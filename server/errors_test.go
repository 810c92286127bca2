package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// post sends body to path and decodes an error body if there is one.
func (e *testEnv) post(t *testing.T, path, body string) (int, *ErrorBody, string) {
	t.Helper()
	resp, err := e.hc.Post(e.http.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, nil, string(raw)
	}
	var eb ErrorBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&eb); err != nil {
		t.Fatalf("status %d body %q is not an OpenAI error body: %v", resp.StatusCode, raw, err)
	}
	return resp.StatusCode, &eb, string(raw)
}

func TestRefusals(t *testing.T) {
	e := newTestEnv(t, nil)
	// A prompt of exactly max model len tokens: BOS plus the ids.
	longIDs := make([]string, testMaxModelLen)
	for i := range longIDs {
		longIDs[i] = "19923"
	}
	longPrompt := "[" + strings.Join(longIDs, ",") + "]"
	tests := []struct {
		name, path, body string
		status           int
		param            string
		contains         []string
	}{
		{"invalid JSON", "/v1/chat/completions", `{"messages":`, 400, "", []string{"not a valid request"}},
		{"n 0", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":0}`, 400, "n", []string{"n is 0", "from 1 to 4"}},
		{"n above max-num-seqs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":5}`, 400, "n", []string{"n is 5", "(--max-num-seqs)"}},
		{"unknown field", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logits_processors":["x"]}`, 400, "logits_processors", []string{"logits_processors is not supported"}},
		{"tools without a parser", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "tool_choice", []string{"--enable-auto-tool-choice", "glm47"}},
		{"tool_choice required", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`, 400, "tool_choice", []string{"guided decoding"}},
		{"named tool_choice", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`, 400, "tool_choice", []string{"does not force a call"}},
		{"malformed tool", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}],"tool_choice":"none"}`, 400, "tools[0]", []string{"must be"}},
		{"unknown response_format", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"yaml"}}`, 400, "response_format", []string{`"yaml" is not one of text, json_object, json_schema`}},
		{"beam search", "/v1/completions", `{"prompt":"hi","use_beam_search":true}`, 400, "use_beam_search", []string{"without beam search"}},
		{"best_of 3", "/v1/completions", `{"prompt":"hi","best_of":3}`, 400, "best_of", []string{"best_of is 3"}},
		{"priority", "/v1/completions", `{"prompt":"hi","priority":2}`, 400, "priority", []string{"first come, first served"}},
		{"suffix", "/v1/completions", `{"prompt":"hi","suffix":"x"}`, 400, "suffix", []string{"suffix is not supported"}},
		{"top_k -2", "/v1/completions", `{"prompt":"hi","top_k":-2}`, 400, "top_k", []string{"top_k is -2"}},
		{"min_p 2", "/v1/completions", `{"prompt":"hi","min_p":2}`, 400, "min_p", []string{"min_p is 2"}},
		{"frequency_penalty 3", "/v1/completions", `{"prompt":"hi","frequency_penalty":3}`, 400, "frequency_penalty", []string{"from -2 to 2"}},
		{"repetition_penalty 0", "/v1/completions", `{"prompt":"hi","repetition_penalty":0}`, 400, "repetition_penalty", []string{"(0, 2]"}},
		{"logit_bias key", "/v1/completions", `{"prompt":"hi","logit_bias":{"x":1}}`, 400, "logit_bias", []string{`key "x"`}},
		{"logit_bias out of vocab", "/v1/completions", `{"prompt":"hi","logit_bias":{"129280":1}}`, 400, "logit_bias", []string{`"129280"`}},
		{"stop_token_ids out of vocab", "/v1/completions", `{"prompt":"hi","stop_token_ids":[-1]}`, 400, "stop_token_ids", []string{"stop_token_ids[0] = -1"}},
		{"min_tokens above max_tokens", "/v1/completions", `{"prompt":"hi","min_tokens":5,"max_tokens":2}`, 400, "min_tokens", []string{"min_tokens 5"}},
		{"prompt_logprobs streamed", "/v1/completions", `{"prompt":"hi","prompt_logprobs":1,"stream":true}`, 400, "prompt_logprobs", []string{"stream true"}},
		{"logprobs above max", "/v1/completions", `{"prompt":"hi","logprobs":21}`, 400, "logprobs", []string{"logprobs is 21", "0 to 20 (--max-logprobs)"}},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_logprobs":3}`, 400, "top_logprobs", []string{"set logprobs true"}},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, 404, "model", []string{`"gpt-9"`, `serves "glm5-mini"`}},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, "messages", []string{"messages is empty"}},
		{"bad role", "/v1/chat/completions", `{"messages":[{"role":"robot","content":"hi"}]}`, 400, "messages[0].role", []string{`"robot"`, "use system, user, assistant or tool"}},
		{"image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content", []string{"only text parts"}},
		{"temperature 3", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"temperature":3}`, 400, "temperature", []string{"temperature is 3", "from 0 (greedy) to 2"}},
		{"top_p 0", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_p":0}`, 400, "top_p", []string{"top_p is 0", "(0, 1]"}},
		{"five stops", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stop":["a","b","c","d","e"]}`, 400, "stop", []string{"5 strings", "at most 4"}},
		{"empty stop", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stop":""}`, 400, "stop", []string{"stop[0] is empty"}},
		{"max_tokens 0", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400, "max_tokens", []string{"max_tokens is 0", "at least 1"}},
		{"stream_options without stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, 400, "stream_options", []string{"only allowed with stream true"}},
		{"max_tokens 0 without echo", "/v1/completions", `{"prompt":"hi","max_tokens":0}`, 400, "max_tokens", []string{"0 only with echo"}},
		{"bad prompt batch", "/v1/completions", `{"prompt":["a",1]}`, 400, "prompt", []string{"prompt[1] must be a string"}},
		{"no prompt", "/v1/completions", `{"max_tokens":3}`, 400, "prompt", []string{"prompt is missing"}},
		{"empty id prompt", "/v1/completions", `{"prompt":[]}`, 400, "prompt", []string{"empty array"}},
		{"id out of vocab", "/v1/completions", `{"prompt":[1,129280]}`, 400, "prompt", []string{"prompt[1] = 129280", "0 to 129279"}},
		{"prompt as long as the model", "/v1/completions", `{"prompt":` + longPrompt + `}`, 400, "prompt",
			[]string{fmt.Sprintf("prompt has %d tokens", testMaxModelLen), fmt.Sprintf("--max-model-len) is %d", testMaxModelLen), fmt.Sprintf("--max-model-len %d or more", testMaxModelLen+1)}},
		{"prompt plus max_tokens too long", "/v1/completions", `{"prompt":[1,2,3,4],"max_tokens":253}`, 400, "max_tokens",
			[]string{"prompt has 4 tokens", "max_tokens is 253", "257 in all", fmt.Sprintf("(--max-model-len) %d", testMaxModelLen), "at most 252 tokens"}},
		{"max_completion_tokens too long", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":100000}`, 400, "max_completion_tokens", []string{"max_completion_tokens is 100000"}},
		{"unknown route", "/v1/embeddings", `{}`, 404, "", []string{"no route POST /v1/embeddings"}},
		// Type errors name the field as JSON names it and the JSON types.
		{"max_tokens a string", "/v1/completions", `{"prompt":"hi","max_tokens":"5"}`, 400, "max_tokens", []string{"max_tokens must be an integer, got a string"}},
		{"max_tokens out of range", "/v1/completions", `{"prompt":"hi","max_tokens":1e999}`, 400, "max_tokens", []string{"max_tokens must be an integer", "1e999"}},
		{"temperature a string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, 400, "temperature", []string{"temperature must be a number, got a string"}},
		{"role a number", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},{"role":1,"content":"hi"}]}`, 400, "messages[1].role", []string{"messages[1].role must be a string, got a number"}},
		{"messages an object", "/v1/chat/completions", `{"messages":{"role":"user"}}`, 400, "messages", []string{"messages must be an array, got an object"}},
		{"include_usage a string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":"yes"}}`, 400, "stream_options.include_usage", []string{"must be true or false, got a string"}},
		{"stop a number", "/v1/completions", `{"prompt":"hi","stop":5}`, 400, "stop", []string{"stop must be a string or an array of strings, got a number"}},
		{"prompt an object", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt", []string{"prompt must be a string, an array of token ids", "got an object"}},
		{"prompt ids with a string", "/v1/completions", `{"prompt":[1,"a"]}`, 400, "prompt", []string{"prompt must be a string, an array of token ids", "got a string"}},
		{"body an array", "/v1/completions", `[1,2]`, 400, "", []string{"must be a JSON object, got an array"}},
		{"body cut short", "/v1/completions", `{"prompt":"hi",`, 400, "", []string{"not a valid request"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, eb, raw := e.post(t, tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("status = %d, want %d (body %s)", status, tc.status, raw)
			}
			param := ""
			if eb.Error.Param != nil {
				param = *eb.Error.Param
			}
			if diff := cmp.Diff(tc.param, param); diff != "" {
				t.Errorf("param (-want +got):\n%s", diff)
			}
			if eb.Error.Type == "" {
				t.Error("error type is empty")
			}
			for _, c := range tc.contains {
				if !strings.Contains(eb.Error.Message, c) {
					t.Errorf("message %q lacks %q", eb.Error.Message, c)
				}
			}
			// The decoder's Go names never reach a client.
			for _, leak := range []string{"Go struct", "Go value", "of type", "samplingFields", "Request.", "json:", "unmarshal"} {
				if strings.Contains(eb.Error.Message, leak) {
					t.Errorf("message %q leaks %q", eb.Error.Message, leak)
				}
			}
		})
	}
	// The largest prompt that fits is accepted.
	okIDs := strings.Join(longIDs[:testMaxModelLen-1], ",")
	if status, _, raw := e.post(t, "/v1/completions", `{"prompt":[`+okIDs+`],"max_tokens":1}`); status != http.StatusOK {
		t.Errorf("prompt of max model len - 1 tokens: status %d (%s), want 200", status, raw)
	}
	if n := e.fake.submittedCount(); n != 1 {
		t.Errorf("%d requests reached the engine, want only the valid one", n)
	}
}

// A text prompt or a chat whose tokens the model does not have (a tokenizer
// larger than the model's vocabulary) is the client's 400 naming the field,
// not the engine's 503.
func TestTokenizerBeyondTheModelsVocabulary(t *testing.T) {
	e := newTestEnv(t, func(_ *fakeEngine, c *Config) { c.VocabSize = 1000 })
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/completions", `{"prompt":"Quantum chromodynamics in Zürich"}`, "prompt"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, "messages"},
	} {
		status, eb, raw := e.post(t, tc.path, tc.body)
		if status != 400 || eb == nil || eb.Error.Param == nil || *eb.Error.Param != tc.param || !strings.Contains(eb.Error.Message, "tokenizer does not match the model") {
			t.Errorf("%s %s: status %d, body %s; want 400 naming %q and the tokenizer", tc.path, tc.body, status, raw, tc.param)
		}
	}
}
