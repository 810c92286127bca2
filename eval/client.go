package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/cpmla/cpmla/internal/boundedread"
)

// MaxResponseBytes bounds one response body eval reads: a completion of a
// few hundred tokens is a few KiB, so a longer body is refused unread.
const MaxResponseBytes = 1 << 20

// Seed is the seed lm-eval's API models send with every request (TemplateAPI's
// default); greedy requests do not depend on it.
const Seed = 1234

// postJSON posts body to url and decodes a 200 response into out; any other
// status, a body over MaxResponseBytes or a malformed body is an error
// saying which.
func postJSON(ctx context.Context, client *http.Client, url string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := boundedread.All(resp.Body, "the response body", MaxResponseBytes)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		const show = 512
		if len(data) > show {
			data = data[:show]
		}
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("malformed body: %w", err)
	}
	return nil
}

// forEach runs do(i) for i in [0, n) with at most concurrency calls at once.
func forEach(n, concurrency int, do func(i int)) {
	sem := make(chan struct{}, max(concurrency, 1))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			do(i)
		}()
	}
	wg.Wait()
}

// textRequest is a greedy /v1/completions request of a text prompt, as
// lm-eval's local-completions sends a generate_until request.
type textRequest struct {
	Model       string   `json:"model"`
	Prompt      string   `json:"prompt"`
	MaxTokens   int      `json:"max_tokens"`
	Temperature float64  `json:"temperature"`
	Stop        []string `json:"stop,omitempty"`
	Seed        int      `json:"seed"`
}

// chatMessage is one message of a chat request.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatRequest is a greedy /v1/chat/completions request, as lm-eval's
// local-chat-completions sends one.
type chatRequest struct {
	Model       string        `json:"model"`
	Messages    []chatMessage `json:"messages"`
	MaxTokens   int           `json:"max_tokens"`
	Temperature float64       `json:"temperature"`
	Stop        []string      `json:"stop,omitempty"`
	Seed        int           `json:"seed"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type textResponse struct {
	Choices []struct {
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

// Reply is one generated answer as a client sees it.
type Reply struct {
	OK           bool   `json:"ok"`                // HTTP 200 with a well-formed body of one choice
	Text         string `json:"text"`              // the completion's text or the message's content
	FinishReason string `json:"finish_reason"`     // stop or length
	PromptTokens int    `json:"prompt_tokens"`     // as the server counted them
	Problem      string `json:"problem,omitempty"` // why it is not OK
}

// responseProblem says what is wrong with a response of choices choices and
// usage u to a request of at most maxTokens tokens, or "".
func responseProblem(choices int, u usage, maxTokens int) string {
	if choices != 1 {
		return fmt.Sprintf("%d choices, want 1", choices)
	}
	if u.CompletionTokens < 0 || u.CompletionTokens > maxTokens {
		return fmt.Sprintf("%d completion tokens, asked for at most %d", u.CompletionTokens, maxTokens)
	}
	return ""
}

// completeText sends one text completion request.
func completeText(ctx context.Context, client *http.Client, baseURL string, req textRequest) Reply {
	var r textResponse
	if err := postJSON(ctx, client, baseURL+"/v1/completions", req, &r); err != nil {
		return Reply{Problem: err.Error()}
	}
	if p := responseProblem(len(r.Choices), r.Usage, req.MaxTokens); p != "" {
		return Reply{Problem: p}
	}
	c := r.Choices[0]
	return Reply{OK: true, Text: c.Text, FinishReason: c.FinishReason, PromptTokens: r.Usage.PromptTokens}
}

// completeChat sends one chat completion request.
func completeChat(ctx context.Context, client *http.Client, baseURL string, req chatRequest) Reply {
	var r chatResponse
	if err := postJSON(ctx, client, baseURL+"/v1/chat/completions", req, &r); err != nil {
		return Reply{Problem: err.Error()}
	}
	if p := responseProblem(len(r.Choices), r.Usage, req.MaxTokens); p != "" {
		return Reply{Problem: p}
	}
	c := r.Choices[0]
	if c.Message.Content == nil {
		return Reply{Problem: "the message has no content"}
	}
	return Reply{OK: true, Text: *c.Message.Content, FinishReason: c.FinishReason, PromptTokens: r.Usage.PromptTokens}
}
