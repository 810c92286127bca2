package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// requestSeeds are bodies of both endpoints, valid and not, that the fuzz
// targets start from.
var requestSeeds = []string{
	`{"prompt":"hello","max_tokens":4}`,
	`{"prompt":[1,2,3],"max_tokens":2,"temperature":0.5,"top_p":0.9,"seed":7,"stop":["a"],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"prompt":[[5,6]],"logprobs":0,"ignore_eos":true}`,
	`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":3}`,
	`{"messages":[{"role":"user","content":"x"},{"role":1,"content":"hi"}]}`,
	`{"prompt":"hi","max_tokens":"5"}`,
	`{"prompt":"hi","max_tokens":1e999}`,
	`{"model":"glm5-mini","prompt":["a","b"]}`,
	`[1,2]`, `{"prompt":`, `null`, `"x"`, `{"stop":5}`, `{"messages":{"a":1}}`,
}

// fuzzServer is a server over the fake engine for the decoders' fuzz targets.
func fuzzServer(f *testing.F) *Server {
	tk := testTokenizer(f)
	srv, err := New(Config{Engine: newFakeEngine(nil, tk.EOS()), Tokenizer: tk, ModelName: testModel, MaxModelLen: testMaxModelLen,
		VocabSize: testVocab, StopTokenIDs: []int{tk.EOS()}, MaxInFlight: 1, MaxN: 4, MaxLogprobs: 20})
	if err != nil {
		f.Fatal(err)
	}
	return srv
}

// checkRefusal holds every refusal to the API's rules: a client error
// status, a message in the request's terms, and a param that names a field
// of the body when the decoder refused it.
func checkRefusal(t *testing.T, body []byte, e *apiError, decoding bool) {
	t.Helper()
	if e.status < 400 || e.status > 499 {
		t.Errorf("status %d for %q", e.status, body)
	}
	if e.msg == "" {
		t.Errorf("empty message for %q", body)
	}
	for _, leak := range []string{"Go struct", "Go value", "of type", "samplingFields", "Request.", "json:", "unmarshal"} {
		if strings.Contains(e.msg, leak) {
			t.Errorf("message %q for %q leaks %q", e.msg, body, leak)
		}
	}
	if decoding && e.param != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			t.Fatalf("param %q for a body that is not an object: %q", e.param, body)
		}
		named := false
		for k := range obj {
			if e.param == k || strings.HasPrefix(e.param, k+".") || strings.HasPrefix(e.param, k+"[") {
				named = true
			}
		}
		if !named {
			t.Errorf("param %q names no field of %q", e.param, body)
		}
	}
}

// checkJob holds an accepted request to its limits.
func checkJob(t *testing.T, body []byte, j *job) {
	t.Helper()
	if len(j.prompts) == 0 {
		t.Errorf("accepted %q with no prompt", body)
	}
	for _, p := range j.prompts {
		if len(p.ids) < 1 || p.maxTokens < 0 || len(p.ids)+p.maxTokens > testMaxModelLen {
			t.Errorf("accepted %q as %d prompt tokens and max_tokens %d, beyond max model len %d", body, len(p.ids), p.maxTokens, testMaxModelLen)
		}
		for _, id := range p.ids {
			if id < 0 || id >= testVocab {
				t.Errorf("accepted %q with token id %d outside [0, %d)", body, id, testVocab)
			}
		}
	}
}

// decodeAs decodes body as the server does for an endpoint serving fields.
func decodeAs(body []byte, v any, served []string) *apiError {
	if e := decodeJSON(body, v); e != nil {
		return e
	}
	if f := unknownField(body, served); f != "" {
		return badRequest(f, "%s is not supported by this server", f)
	}
	return nil
}

func FuzzCompletionRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req CompletionRequest
		if e := decodeAs(body, &req, servedCompletion); e != nil {
			checkRefusal(t, body, e, true)
			return
		}
		j, e := s.parseCompletion(&req)
		if e != nil {
			checkRefusal(t, body, e, false)
			return
		}
		checkJob(t, body, j)
	})
}

func FuzzChatRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		if bytes.Count(body, []byte("{")) > 64 {
			return // deep nesting only costs the template time here
		}
		var req ChatRequest
		if e := decodeAs(body, &req, servedChat); e != nil {
			checkRefusal(t, body, e, true)
			return
		}
		j, e := s.parseChat(&req)
		if e != nil {
			checkRefusal(t, body, e, false)
			return
		}
		checkJob(t, body, j)
	})
}

// FuzzTokenizeRequest posts arbitrary bodies to /tokenize through the
// server's handler: the answer is 200 with a token count within
// --max-model-len, or a refusal by the API's rules.
func FuzzTokenizeRequest(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"hello world"}`, `{"prompt":"hi","add_special_tokens":false,"return_token_strs":true}`,
		`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true}`,
		`{"prompt":"a","messages":[]}`, `{"prompt":5}`, `{"messages":[{"role":1}]}`, `{}`, `[`, `{"model":"x","prompt":"y"}`,
	} {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/tokenize", bytes.NewReader(body)))
		switch {
		case w.Code == http.StatusOK:
			var resp TokenizeResponse
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.Count != len(resp.Tokens) || resp.Count > testMaxModelLen {
				t.Errorf("%q answered 200 with %s", body, w.Body.Bytes())
			}
		case w.Code >= 400 && w.Code < 500:
			var eb ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error.Message == "" {
				t.Fatalf("%q: status %d with a body that is not an OpenAI error: %s", body, w.Code, w.Body.Bytes())
			}
			checkRefusal(t, body, &apiError{status: w.Code, msg: eb.Error.Message}, false)
		default:
			t.Errorf("%q: status %d: %s", body, w.Code, w.Body.Bytes())
		}
	})
}
