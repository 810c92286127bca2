package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/goleak"

	"github.com/cpmla/cpmla/tokenizer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testModel       = "glm5-mini"
	testMaxModelLen = 256
	testVocab       = 129280
)

// replyText is what the fake engine generates (then EOS). "🙂" on its own
// is two tokens that each end inside the character, so streaming must hold
// the first one back.
var replyParts = []string{"Hello, world! 你好", "🙂", " The end."}

func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tk, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// replyIDs is the fake's script: the reply's tokens, then EOS.
func replyIDs(tk *tokenizer.Tokenizer) []int {
	var ids []int
	for _, p := range replyParts {
		ids = append(ids, tk.Encode(p, false)...)
	}
	return append(ids, tk.EOS())
}

type testEnv struct {
	tk     *tokenizer.Tokenizer
	fake   *fakeEngine
	srv    *Server
	http   *httptest.Server
	client openai.Client
	hc     *http.Client
}

func newTestEnv(t *testing.T, configure func(*fakeEngine, *Config)) *testEnv {
	t.Helper()
	tk := testTokenizer(t)
	fake := newFakeEngine(replyIDs(tk), tk.EOS())
	cfg := Config{
		Engine: fake, Tokenizer: tk, ModelName: testModel, MaxModelLen: testMaxModelLen,
		VocabSize: testVocab, StopTokenIDs: []int{tk.EOS()}, MaxInFlight: 64, MaxN: 4, MaxLogprobs: 20,
		Stats: fakeStats{kv: []float64{0.25, 0.5}, collective: 1.5, builds: 0},
	}
	if configure != nil {
		configure(fake, &cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	hc := &http.Client{Transport: &http.Transport{}}
	e := &testEnv{tk: tk, fake: fake, srv: srv, http: hs, hc: hc,
		client: openai.NewClient(option.WithBaseURL(hs.URL+"/v1"), option.WithAPIKey("unused"),
			option.WithMaxRetries(0), option.WithHTTPClient(hc))}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		hs.Close()
		waitFor(t, "fake engine to finish every request", func() bool { return fake.liveRequests() == 0 })
		if n := srv.InFlight(); n != 0 {
			t.Errorf("%d admission slots still held after all requests ended", n)
		}
	})
	return e
}

// waitFor polls cond until it holds; it fails the test after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// expectedText is the reply the fake generates for maxTokens tokens,
// decoded in one piece by the tokenizer (the independent reference for
// the streamed pieces).
func (e *testEnv) expectedText(maxTokens int) (string, int) {
	ids := e.fake.script
	if maxTokens < len(ids) {
		ids = ids[:maxTokens]
	}
	return e.tk.Decode(ids, true), len(ids)
}

func chatParams(maxTokens int64) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say hello.")},
		Seed:     openai.Int(7),
	}
	if maxTokens > 0 {
		p.MaxTokens = openai.Int(maxTokens)
	}
	return p
}

func TestChat(t *testing.T) {
	full := 0 // 0: no max_tokens, the whole reply
	tests := []struct {
		name       string
		maxTokens  int64
		wantFinish string
		finalToken bool
	}{
		{"whole reply ends at EOS", int64(full), "stop", false},
		{"whole reply, token on finishing event", int64(full), "stop", true},
		{"cut by max_tokens inside the emoji", 5, "length", false},
		{"cut by max_tokens, token on finishing event", 4, "length", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, func(f *fakeEngine, _ *Config) { f.finalCarriesToken = tc.finalToken })
			msgs := []tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Say hello."}}
			promptIDs, err := e.tk.EncodeChat(msgs, true)
			if err != nil {
				t.Fatal(err)
			}
			limit := len(e.fake.script)
			if tc.maxTokens > 0 {
				limit = int(tc.maxTokens)
			}
			wantText, wantTokens := e.expectedText(limit)
			wantUsage := openai.CompletionUsage{PromptTokens: int64(len(promptIDs)), CompletionTokens: int64(wantTokens), TotalTokens: int64(len(promptIDs) + wantTokens)}
			ctx := context.Background()

			// Non-streamed.
			resp, err := e.client.Chat.Completions.New(ctx, chatParams(tc.maxTokens))
			if err != nil {
				t.Fatalf("chat: %v", err)
			}
			if len(resp.Choices) != 1 {
				t.Fatalf("got %d choices, want 1", len(resp.Choices))
			}
			got := struct{ Text, Finish, Role string }{resp.Choices[0].Message.Content, resp.Choices[0].FinishReason, string(resp.Choices[0].Message.Role)}
			if diff := cmp.Diff(struct{ Text, Finish, Role string }{wantText, tc.wantFinish, "assistant"}, got); diff != "" {
				t.Errorf("non-streamed choice (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantUsage, resp.Usage, cmpopts.IgnoreFields(openai.CompletionUsage{}, "JSON", "CompletionTokensDetails", "PromptTokensDetails")); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			sent := e.fake.lastRequest()
			if diff := cmp.Diff(promptIDs, sent.PromptIDs); diff != "" {
				t.Errorf("engine got other prompt ids than the rendered chat template (-want +got):\n%s", diff)
			}
			if sent.Sampling.Seed != 7 || sent.Sampling.Temperature != 1 || sent.Sampling.TopP != 1 {
				t.Errorf("sampling = %+v, want seed 7, temperature 1, top_p 1 (OpenAI defaults)", sent.Sampling)
			}
			if tc.maxTokens == 0 && sent.MaxTokens != testMaxModelLen-len(promptIDs) {
				t.Errorf("engine max tokens = %d, want the room left in max model len: %d", sent.MaxTokens, testMaxModelLen-len(promptIDs))
			}

			// Streamed with usage.
			p := chatParams(tc.maxTokens)
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := e.client.Chat.Completions.NewStreaming(ctx, p)
			var acc openai.ChatCompletionAccumulator
			var pieces []string
			for stream.Next() {
				c := stream.Current()
				acc.AddChunk(c)
				if len(c.Choices) > 0 {
					pieces = append(pieces, c.Choices[0].Delta.Content)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			stream.Close()
			for i, p := range pieces {
				if !utf8.ValidString(p) {
					t.Errorf("chunk %d %q splits a character", i, p)
				}
			}
			if len(acc.Choices) != 1 {
				t.Fatalf("accumulated %d choices, want 1", len(acc.Choices))
			}
			got = struct{ Text, Finish, Role string }{acc.Choices[0].Message.Content, acc.Choices[0].FinishReason, string(acc.Choices[0].Message.Role)}
			if diff := cmp.Diff(struct{ Text, Finish, Role string }{wantText, tc.wantFinish, "assistant"}, got); diff != "" {
				t.Errorf("streamed choice (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantUsage, acc.Usage, cmpopts.IgnoreFields(openai.CompletionUsage{}, "JSON", "CompletionTokensDetails", "PromptTokensDetails")); diff != "" {
				t.Errorf("streamed usage (-want +got):\n%s", diff)
			}
		})
	}
}

func completionParams(prompt string, maxTokens int64) openai.CompletionNewParams {
	return openai.CompletionNewParams{
		Model:     testModel,
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(maxTokens),
	}
}

func TestCompletions(t *testing.T) {
	e := newTestEnv(t, nil)
	ctx := context.Background()
	textPrompt := "The capital of France is"
	idPrompt := []int64{0, 19923, 14, 2058}
	tests := []struct {
		name      string
		prompt    openai.CompletionNewParamsPromptUnion
		wantIDs   []int
		maxTokens int64
	}{
		{"text prompt gets BOS", openai.CompletionNewParamsPromptUnion{OfString: openai.String(textPrompt)}, e.tk.Encode(textPrompt, true), 100},
		{"token-id prompt is used as is", openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: idPrompt}, []int{0, 19923, 14, 2058}, 3},
		{"one-element array of token ids", openai.CompletionNewParamsPromptUnion{OfArrayOfTokenArrays: [][]int64{idPrompt}}, []int{0, 19923, 14, 2058}, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantText, n := e.expectedText(int(tc.maxTokens))
			wantFinish := "length"
			if int(tc.maxTokens) >= len(e.fake.script) {
				wantFinish = "stop"
			}
			p := openai.CompletionNewParams{Model: testModel, Prompt: tc.prompt, MaxTokens: openai.Int(tc.maxTokens)}
			resp, err := e.client.Completions.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantIDs, e.fake.lastRequest().PromptIDs); diff != "" {
				t.Errorf("prompt ids (-want +got):\n%s", diff)
			}
			type result struct {
				Text, Finish        string
				Prompt, Completions int64
			}
			want := result{wantText, wantFinish, int64(len(tc.wantIDs)), int64(n)}
			got := result{resp.Choices[0].Text, string(resp.Choices[0].FinishReason), resp.Usage.PromptTokens, resp.Usage.CompletionTokens}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("non-streamed (-want +got):\n%s", diff)
			}

			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := e.client.Completions.NewStreaming(ctx, p)
			var text strings.Builder
			got = result{}
			for stream.Next() {
				c := stream.Current()
				if len(c.Choices) > 0 {
					text.WriteString(c.Choices[0].Text)
					if c.Choices[0].FinishReason != "" {
						got.Finish = string(c.Choices[0].FinishReason)
					}
				} else {
					got.Prompt, got.Completions = c.Usage.PromptTokens, c.Usage.CompletionTokens
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			stream.Close()
			got.Text = text.String()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("streamed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLogprobs(t *testing.T) {
	e := newTestEnv(t, nil)
	ctx := context.Background()
	n := len(e.fake.script)
	var want []float64
	var wantTokens []string
	for i, id := range e.fake.script {
		want = append(want, fakeLogprob(i))
		wantTokens = append(wantTokens, e.tk.Decode([]int{id}, false))
	}

	// Chat, whole and streamed.
	p := chatParams(0)
	p.Logprobs = openai.Bool(true)
	p.TopLogprobs = openai.Int(0)
	resp, err := e.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	var gotTokens []string
	for _, c := range resp.Choices[0].Logprobs.Content {
		got = append(got, c.Logprob)
		gotTokens = append(gotTokens, c.Token)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("chat logprobs (-want +got):\n%s", diff)
	}
	// Tokens that end inside a character come back with U+FFFD through
	// JSON; compare after the same replacement.
	if diff := cmp.Diff(validUTF8(wantTokens), gotTokens); diff != "" {
		t.Errorf("chat logprob tokens (-want +got):\n%s", diff)
	}
	b := resp.Choices[0].Logprobs.Content[0].Bytes
	if string(bytesOf(b)) != wantTokens[0] {
		t.Errorf("bytes of the first token = %v, want those of %q", b, wantTokens[0])
	}

	stream := e.client.Chat.Completions.NewStreaming(ctx, p)
	got = nil
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			for _, c := range ch.Logprobs.Content {
				got = append(got, c.Logprob)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("streamed chat logprobs (-want +got):\n%s", diff)
	}

	// Completions with logprobs 0: the chosen token's logprob and its
	// offset in the generated text.
	cp := completionParams("Hi", int64(n))
	cp.Logprobs = openai.Int(0)
	cresp, err := e.client.Completions.New(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	lp := cresp.Choices[0].Logprobs
	if diff := cmp.Diff(want, lp.TokenLogprobs, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("completion token_logprobs (-want +got):\n%s", diff)
	}
	// Offsets: each token starts where the text of the tokens before it
	// ends, counting an incomplete character with the token completing it.
	var wantOffsets []int64
	for i := range e.fake.script {
		prefix := e.tk.Decode(e.fake.script[:i], true)
		wantOffsets = append(wantOffsets, int64(completeLen(prefix)))
	}
	if diff := cmp.Diff(wantOffsets, lp.TextOffset); diff != "" {
		t.Errorf("text_offset (-want +got):\n%s", diff)
	}
}

// completeLen is the length of s without a trailing character that later
// bytes could still complete.
func completeLen(s string) int {
	for k := 1; k <= 3 && k <= len(s); k++ {
		if utf8.RuneStart(s[len(s)-k]) {
			if utf8.FullRuneInString(s[len(s)-k:]) {
				return len(s)
			}
			return len(s) - k
		}
	}
	return len(s)
}

// validUTF8 replaces every byte that is not part of a valid character
// with U+FFFD, as encoding/json does.
func validUTF8(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		var b strings.Builder
		for len(s) > 0 {
			r, n := utf8.DecodeRuneInString(s)
			b.WriteRune(r) // RuneError for an invalid byte
			s = s[n:]
		}
		out[i] = b.String()
	}
	return out
}

func bytesOf(b []int64) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		out[i] = byte(v)
	}
	return out
}

func TestStopStrings(t *testing.T) {
	// The reply is "Hello, world! 你好🙂 The end." then EOS.
	tests := []struct {
		name       string
		stop       []string
		wantText   string
		wantFinish string
		cancels    bool // the engine request is cancelled before it ends
	}{
		{"stop inside one token", []string{"orl"}, "Hello, w", "stop", true},
		{"stop across tokens", []string{"d! 你"}, "Hello, worl", "stop", true},
		{"earliest of several wins", []string{"end", "world", "Hello,"}, "", "stop", true},
		{"stop on the split emoji", []string{"🙂 The"}, "Hello, world! 你好", "stop", true},
		{"stop that never occurs", []string{"xyz", "Hello!"}, "Hello, world! 你好🙂 The end.", "stop", false},
		{"prefix held back, then released", []string{"end!"}, "Hello, world! 你好🙂 The end.", "stop", false},
		{"stop at the very end", []string{"end."}, "Hello, world! 你好🙂 The ", "stop", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, func(f *fakeEngine, _ *Config) { f.delay = 100 * time.Microsecond })
			if got := e.tk.Decode(e.fake.script, true); got != "Hello, world! 你好🙂 The end." {
				t.Fatalf("script decodes to %q; the table assumes another reply", got)
			}
			for _, stream := range []bool{false, true} {
				p := chatParams(0)
				p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: tc.stop}
				var text, finish string
				if stream {
					s := e.client.Chat.Completions.NewStreaming(context.Background(), p)
					var acc openai.ChatCompletionAccumulator
					for s.Next() {
						acc.AddChunk(s.Current())
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					s.Close()
					text, finish = acc.Choices[0].Message.Content, acc.Choices[0].FinishReason
				} else {
					resp, err := e.client.Chat.Completions.New(context.Background(), p)
					if err != nil {
						t.Fatal(err)
					}
					text, finish = resp.Choices[0].Message.Content, resp.Choices[0].FinishReason
				}
				if diff := cmp.Diff([2]string{tc.wantText, tc.wantFinish}, [2]string{text, finish}); diff != "" {
					t.Errorf("stream=%v: text, finish (-want +got):\n%s", stream, diff)
				}
			}
			waitFor(t, "requests to end", func() bool { return e.fake.liveRequests() == 0 })
			nCancelled := e.fake.cancelledCount()
			if want := map[bool]int{true: 2, false: 0}[tc.cancels]; nCancelled != want {
				t.Errorf("engine saw %d cancellations, want %d (a matched stop string must cancel the request)", nCancelled, want)
			}
		})
	}
}

func TestClientDisconnectCancels(t *testing.T) {
	e := newTestEnv(t, func(f *fakeEngine, _ *Config) { f.delay = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	p := chatParams(0)
	s := e.client.Chat.Completions.NewStreaming(ctx, p)
	if !s.Next() {
		t.Fatalf("no first chunk: %v", s.Err())
	}
	id := e.fake.lastRequest().ID
	cancel()
	s.Close()
	select {
	case got := <-e.fake.cancelCh:
		if got != id {
			t.Errorf("cancelled request %q, want %q", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the engine never saw the request cancelled after the client went away")
	}
	waitFor(t, "the admission slot to be released", func() bool { return e.srv.InFlight() == 0 })
}

func TestOverloadGets429(t *testing.T) {
	e := newTestEnv(t, func(f *fakeEngine, c *Config) { f.block = true; c.MaxInFlight = 2 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := e.client.Chat.Completions.New(ctx, chatParams(4))
			done <- err
		}()
	}
	waitFor(t, "two requests in flight", func() bool { return e.fake.liveRequests() == 2 })
	_, err := e.client.Chat.Completions.New(context.Background(), chatParams(4))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request: err = %v, want a 429 API error", err)
	}
	if !strings.Contains(apiErr.Message, "2 requests in flight") || !strings.Contains(apiErr.Message, "--max-queue") {
		t.Errorf("429 message %q should name the limit (2) and the setting (--max-queue)", apiErr.Message)
	}
	cancel()
	for range 2 {
		if err := <-done; err == nil {
			t.Error("a blocked request returned without error after its context was cancelled")
		}
	}
	waitFor(t, "blocked requests to be cancelled", func() bool { return e.fake.liveRequests() == 0 && e.srv.InFlight() == 0 })
	// Capacity is back.
	e.fake.block = false
	if _, err := e.client.Chat.Completions.New(context.Background(), chatParams(2)); err != nil {
		t.Errorf("after the load went away: %v", err)
	}
}

func TestModelsAndHealth(t *testing.T) {
	e := newTestEnv(t, nil)
	page, err := e.client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if diff := cmp.Diff([]string{testModel}, ids); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	resp, err := e.hc.Get(e.http.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health = %d, want 200", resp.StatusCode)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	tk := testTokenizer(t)
	good := Config{Engine: newFakeEngine(nil, 1), Tokenizer: tk, ModelName: "m", MaxModelLen: 16, VocabSize: 10, MaxInFlight: 1}
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no engine", func(c *Config) { c.Engine = nil }, "Engine is nil"},
		{"no tokenizer", func(c *Config) { c.Tokenizer = nil }, "Tokenizer is nil"},
		{"no name", func(c *Config) { c.ModelName = "" }, "ModelName is empty"},
		{"max model len 1", func(c *Config) { c.MaxModelLen = 1 }, "max model len 1"},
		{"vocab 0", func(c *Config) { c.VocabSize = 0 }, "vocab size 0"},
		{"no slots", func(c *Config) { c.MaxInFlight = 0 }, "--max-queue"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.change(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := New(good); err != nil {
		t.Errorf("New(good config): %v", err)
	}
}
