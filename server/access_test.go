package server

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func (e *testEnv) get(t *testing.T, method, path string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestAPIKey: with a key, every /v1 route needs it as a Bearer token;
// /health, /metrics and the tokenizer routes stay open, as in vLLM.
func TestAPIKey(t *testing.T) {
	e := newTestEnv(t, func(_ *fakeEngine, c *Config) { c.APIKey = "s3cret" })
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/v1/models", "", 401},
		{"/v1/models", "Bearer wrong", 401},
		{"/v1/models", "Bearer s3cret-and-more", 401},
		{"/v1/models", "s3cret", 401},
		{"/v1/models", "Bearer s3cret", 200},
		{"/health", "", 200},
		{"/metrics", "", 200},
		{"/version", "", 200},
	} {
		h := map[string]string{}
		if tc.auth != "" {
			h["Authorization"] = tc.auth
		}
		if got := e.get(t, "GET", tc.path, h).StatusCode; got != tc.want {
			t.Errorf("GET %s with %q: status %d, want %d", tc.path, tc.auth, got, tc.want)
		}
	}
	// The official client with the right key, and with a wrong one.
	good := openai.NewClient(option.WithBaseURL(e.http.URL+"/v1"), option.WithAPIKey("s3cret"), option.WithMaxRetries(0), option.WithHTTPClient(e.hc))
	if _, err := good.Completions.New(context.Background(), completionParams("hi", 2)); err != nil {
		t.Errorf("right key: %v", err)
	}
	var apiErr *openai.Error
	if _, err := e.client.Completions.New(context.Background(), completionParams("hi", 2)); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Errorf("wrong key: %v, want 401", err)
	}
	if n := e.fake.submittedCount(); n != 1 {
		t.Errorf("%d requests reached the engine, want only the authorized one", n)
	}
}

func TestCORS(t *testing.T) {
	e := newTestEnv(t, func(_ *fakeEngine, c *Config) {
		c.CORS = CORS{Origins: []string{"https://app.example"}, Methods: []string{"GET", "POST"}, Headers: []string{"Authorization", "Content-Type"}}
		c.APIKey = "k"
	})
	pre := func(origin, method, headers string) *http.Response {
		return e.get(t, "OPTIONS", "/v1/chat/completions", map[string]string{"Origin": origin,
			"Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers})
	}
	if r := pre("https://app.example", "POST", "authorization, content-type"); r.StatusCode != 200 ||
		r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || r.Header.Get("Access-Control-Allow-Methods") != "GET, POST" {
		t.Errorf("allowed preflight: %d %v", r.StatusCode, r.Header)
	}
	for _, bad := range [][3]string{{"https://evil.example", "POST", ""}, {"https://app.example", "DELETE", ""}, {"https://app.example", "POST", "X-Secret"}} {
		if r := pre(bad[0], bad[1], bad[2]); r.StatusCode != 400 || r.Header.Get("Access-Control-Allow-Methods") != "" {
			t.Errorf("preflight %v: %d %v, want 400", bad, r.StatusCode, r.Header)
		}
	}
	if r := e.get(t, "GET", "/health", map[string]string{"Origin": "https://app.example"}); r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("simple request from an allowed origin: %v", r.Header)
	}
	if r := e.get(t, "GET", "/health", map[string]string{"Origin": "https://evil.example"}); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("simple request from another origin got %q", r.Header.Get("Access-Control-Allow-Origin"))
	}
	any := newTestEnv(t, func(_ *fakeEngine, c *Config) {
		c.CORS = CORS{Origins: []string{"*"}, Methods: []string{"*"}, Headers: []string{"*"}}
	})
	if r := any.get(t, "GET", "/v1/models", map[string]string{"Origin": "https://x.example"}); r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("wildcard origin: %v", r.Header)
	}
}
