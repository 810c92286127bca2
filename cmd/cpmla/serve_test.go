package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/server"
	"github.com/cpmla/cpmla/tokenizer"
)

// TestServeStartsAndAnswers starts `cpmla serve` on glm5-mini on a free
// port, asks for a completion and shuts it down.
func TestServeStartsAndAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-mini")
	}
	var o serveOptions
	cmd := &cobra.Command{}
	addServeFlags(cmd, &o)
	if err := cmd.ParseFlags([]string{"--model", "glm5-mini", "--port", "0", "--max-model-len", "64", "--max-num-batched-tokens", "16",
		"--max-num-seqs", "2", "--max-queue", "2", "--memory-limit", "1GiB"}); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	s, err := startServe(o, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close(5 * time.Second)
	if !strings.Contains(stderr.String(), "KV") {
		t.Errorf("start-up printed no memory table:\n%s", stderr.String())
	}
	resp, err := http.Post(s.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":[0,19923,14],"max_tokens":3,"temperature":0}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out server.CompletionResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, decode err %v", resp.StatusCode, err)
	}
	if out.Model != "glm5-mini" || out.Usage == nil || out.Usage.CompletionTokens != 3 || out.Usage.PromptTokens != 3 {
		t.Errorf("response %+v: want model glm5-mini and 3 prompt + 3 completion tokens", out)
	}
	// A prompt longer than --max-model-len is refused naming both numbers.
	long := `{"prompt":[` + strings.Repeat("5,", 64) + `5]}`
	resp2, err := http.Post(s.URL+"/v1/completions", "application/json", strings.NewReader(long))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte("65 tokens")) || !bytes.Contains(body, []byte("is 64")) {
		t.Errorf("long prompt: status %d body %s; want 400 naming 65 and 64", resp2.StatusCode, body)
	}
}

// countingEngine generates MaxTokens copies of one token, finishing with
// the last one.
type countingEngine struct{ token int }

func (e countingEngine) Submit(ctx context.Context, req engine.Request) (<-chan engine.Event, error) {
	ch := make(chan engine.Event, req.MaxTokens)
	for i := range req.MaxTokens {
		ev := engine.Event{Token: e.token}
		if i == req.MaxTokens-1 {
			ev.Finish, ev.PromptTokens, ev.OutputTokens = engine.FinishLength, len(req.PromptIDs), req.MaxTokens
		}
		ch <- ev
	}
	close(ch)
	return ch, nil
}

func TestBenchServeWritesResultFile(t *testing.T) {
	tk, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Engine: countingEngine{token: 2058}, Tokenizer: tk, ModelName: "m",
		MaxModelLen: 256, VocabSize: tk.VocabSize(), MaxInFlight: 16})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	file := filepath.Join(t.TempDir(), "result.json")
	root := newRoot()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"bench", "serve", "--base-url", hs.URL, "--endpoint", "/v1/chat/completions",
		"--num-prompts", "6", "--random-input-len", "8", "--random-output-len", "5", "--max-concurrency", "2",
		"--request-rate", "100", "--seed", "3", "--result-file", file})
	if err := root.Execute(); err != nil {
		t.Fatalf("bench serve: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Successful requests:                     6") {
		t.Errorf("report:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "6/6") {
		t.Errorf("no progress bar on stderr: %q", stderr.String())
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res["completed"] != 6.0 || res["total_output_tokens"] != 30.0 || res["model_id"] != "m" || res["request_rate"] != 100.0 {
		t.Errorf("result file: completed %v, total_output_tokens %v, model_id %v, request_rate %v; want 6, 30, m, 100",
			res["completed"], res["total_output_tokens"], res["model_id"], res["request_rate"])
	}
	root.SetArgs([]string{"bench", "serve", "--request-rate", "0"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "positive number") {
		t.Errorf("--request-rate 0: err %v, want a refusal naming the constraint", err)
	}
}

// TestServeAccessFlags: the API key comes from VLLM_API_KEY when --api-key
// is not given, CORS origins take vLLM's JSON-list form, and the start-up
// line names the served model.
func TestServeAccessFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-mini")
	}
	t.Setenv("VLLM_API_KEY", "env-key")
	var o serveOptions
	cmd := &cobra.Command{}
	addServeFlags(cmd, &o)
	if err := cmd.ParseFlags([]string{"--port", "0", "--max-model-len", "32", "--max-num-batched-tokens", "8",
		"--max-num-seqs", "2", "--memory-limit", "1GiB", "--served-model-name", "glm-5", "--allowed-origins", `["https://ui.example"]`}); err != nil {
		t.Fatal(err)
	}
	s, err := startServe(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close(5 * time.Second)
	if line := startupLine(s, o.model); !strings.Contains(line, `served as "glm-5"`) || !strings.Contains(line, s.URL) {
		t.Errorf("start-up line %q", line)
	}
	do := func(method, path string, h map[string]string) *http.Response {
		req, _ := http.NewRequest(method, s.URL+path, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := do("GET", "/v1/models", nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("no key: status %d, want 401", r.StatusCode)
	}
	if r := do("GET", "/v1/models", map[string]string{"Authorization": "Bearer env-key"}); r.StatusCode != http.StatusOK {
		t.Errorf("VLLM_API_KEY: status %d, want 200", r.StatusCode)
	}
	r := do("OPTIONS", "/v1/completions", map[string]string{"Origin": "https://ui.example", "Access-Control-Request-Method": "POST"})
	if r.StatusCode != http.StatusOK || r.Header.Get("Access-Control-Allow-Origin") != "https://ui.example" {
		t.Errorf("preflight from the allowed origin: %d %v", r.StatusCode, r.Header)
	}
}
