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
		{"n 2", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2}`, 400, "n", []string{"n is 2", "use n 1"}},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, 404, "model", []string{`"gpt-9"`, `serves "glm5-mini"`}},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, "messages", []string{"messages is empty"}},
		{"bad role", "/v1/chat/completions", `{"messages":[{"role":"robot","content":"hi"}]}`, 400, "messages[0].role", []string{`"robot"`, "use system, user, assistant or tool"}},
		{"image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "", []string{"only text parts"}},
		{"top_logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":3}`, 400, "top_logprobs", []string{"top_logprobs is 3", "top_logprobs 0"}},
		{"temperature 3", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"temperature":3}`, 400, "temperature", []string{"temperature is 3", "from 0 (greedy) to 2"}},
		{"top_p 0", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_p":0}`, 400, "top_p", []string{"top_p is 0", "(0, 1]"}},
		{"five stops", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stop":["a","b","c","d","e"]}`, 400, "stop", []string{"5 strings", "at most 4"}},
		{"empty stop", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stop":""}`, 400, "stop", []string{"stop[0] is empty"}},
		{"max_tokens 0", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400, "max_tokens", []string{"max_tokens is 0", "at least 1"}},
		{"stream_options without stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, 400, "stream_options", []string{"only allowed with stream true"}},
		{"completion logprobs 2", "/v1/completions", `{"prompt":"hi","logprobs":2}`, 400, "logprobs", []string{"logprobs is 2", "use logprobs 0"}},
		{"echo", "/v1/completions", `{"prompt":"hi","echo":true}`, 400, "echo", []string{"echo is not supported"}},
		{"two prompts", "/v1/completions", `{"prompt":["a","b"]}`, 400, "", []string{"2 prompts", "one prompt per request"}},
		{"no prompt", "/v1/completions", `{"max_tokens":3}`, 400, "prompt", []string{"prompt is missing"}},
		{"empty id prompt", "/v1/completions", `{"prompt":[]}`, 400, "prompt", []string{"prompt is empty"}},
		{"id out of vocab", "/v1/completions", `{"prompt":[1,129280]}`, 400, "prompt", []string{"prompt[1] = 129280", "0 to 129279"}},
		{"prompt as long as the model", "/v1/completions", `{"prompt":` + longPrompt + `}`, 400, "prompt",
			[]string{fmt.Sprintf("prompt has %d tokens", testMaxModelLen), fmt.Sprintf("--max-model-len) is %d", testMaxModelLen), fmt.Sprintf("--max-model-len %d or more", testMaxModelLen+1)}},
		{"prompt plus max_tokens too long", "/v1/completions", `{"prompt":[1,2,3,4],"max_tokens":253}`, 400, "max_tokens",
			[]string{"prompt has 4 tokens", "max_tokens is 253", "257 in all", fmt.Sprintf("(--max-model-len) %d", testMaxModelLen), "at most 252 tokens"}},
		{"max_completion_tokens too long", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":100000}`, 400, "max_completion_tokens", []string{"max_completion_tokens is 100000"}},
		{"unknown route", "/v1/embeddings", `{}`, 404, "", []string{"no route POST /v1/embeddings"}},
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
		})
	}
	// The largest prompt that fits is accepted.
	okIDs := strings.Join(longIDs[:testMaxModelLen-1], ",")
	if status, _, raw := e.post(t, "/v1/completions", `{"prompt":[`+okIDs+`],"max_tokens":1}`); status != http.StatusOK {
		t.Errorf("prompt of max model len - 1 tokens: status %d (%s), want 200", status, raw)
	}
	if n := len(e.fake.submitted); n != 1 {
		t.Errorf("%d requests reached the engine, want only the valid one", n)
	}
}
