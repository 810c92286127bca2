package server

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cpmla/cpmla/tokenizer"
)

// A text prompt that provably exceeds --max-model-len is refused without
// being tokenized: the refusal allocates a fraction of what tokenizing the
// text would, and names the limit.
func TestOversizedTextPromptIsRefusedUnread(t *testing.T) {
	e := newTestEnv(t, nil)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 15<<20/45) // ~15 MB
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, ae := e.srv.encodeText("prompt", text, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}, 0)
	runtime.ReadMemStats(&after)
	if ae == nil || ae.code != "context_length_exceeded" || !strings.Contains(ae.msg, "--max-model-len") {
		t.Fatalf("refusal %+v, want context_length_exceeded naming --max-model-len", ae)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("refusing a 15 MB prompt allocated %d bytes: it was tokenized", got)
	}
	for _, path := range []string{"/v1/completions", "/tokenize"} {
		status, eb, raw := e.post(t, path, `{"prompt":"`+text+`"}`)
		if status != http.StatusBadRequest || eb == nil || eb.Error.Param == nil || *eb.Error.Param != "prompt" {
			t.Errorf("%s: status %d, body %.300s", path, status, raw)
		}
	}
	chat := `{"messages":[{"role":"user","content":"` + text + `"}]}`
	if status, eb, raw := e.post(t, "/v1/chat/completions", chat); status != http.StatusBadRequest || eb.Error.Param == nil || *eb.Error.Param != "messages" {
		t.Errorf("chat: status %d, body %.300s", status, raw)
	}
}

// The limit is exact: a text prompt of max-model-len − 1 tokens is served,
// one of max-model-len tokens is refused.
func TestTextPromptLimitIsExact(t *testing.T) {
	e := newTestEnv(t, nil)
	tk := e.tk
	// " world" is one token; BOS is added.
	fits := strings.Repeat(" world", testMaxModelLen-2)
	if n := len(tk.Encode(fits, true)); n != testMaxModelLen-1 {
		t.Fatalf("test prompt has %d tokens, want %d", n, testMaxModelLen-1)
	}
	if status, _, raw := e.post(t, "/v1/completions", `{"prompt":"`+fits+`","max_tokens":1}`); status != http.StatusOK {
		t.Errorf("prompt of max-model-len − 1 tokens: status %d %.300s", status, raw)
	}
	if status, eb, raw := e.post(t, "/v1/completions", `{"prompt":"`+fits+` world","max_tokens":1}`); status != http.StatusBadRequest || eb.Error.Code == nil || *eb.Error.Code != "context_length_exceeded" {
		t.Errorf("prompt of max-model-len tokens: status %d %.300s", status, raw)
	}
}

// Prompts wait for a slot of the prompt pool; a request whose client gives
// up while it waits never reaches the engine, and the slot's holder is not
// disturbed.
func TestPromptPoolBoundsTokenization(t *testing.T) {
	e := newTestEnv(t, func(_ *fakeEngine, c *Config) { c.PromptWorkers = 1 })
	release, ae := e.srv.prepare(context.Background()) // the only slot
	if ae != nil {
		t.Fatal(ae)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.http.URL+"/v1/completions", strings.NewReader(`{"prompt":"hello","max_tokens":2}`))
	if _, err := e.hc.Do(req); err == nil {
		t.Fatal("a request went through while the pool's only slot was held")
	}
	waitFor(t, "the waiting request to leave", func() bool { return len(e.srv.prompts.slots) == 1 })
	if n := e.fake.submittedCount(); n != 0 {
		t.Errorf("%d requests reached the engine", n)
	}
	release()
	if status, _, raw := e.post(t, "/v1/completions", `{"prompt":"hello","max_tokens":2}`); status != http.StatusOK {
		t.Errorf("after the slot freed: status %d %s", status, raw)
	}
}
