package server

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The request and response bodies of the OpenAI API, as far as cpmla
// implements it. Fields the server does not know are ignored, as the
// OpenAI API ignores them; fields it knows but cannot honour (n > 1,
// top_logprobs > 0, echo, best_of > 1) are refused with 400.

// StreamOptions is the stream_options object of a request.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// samplingFields are the request fields shared by both endpoints.
type samplingFields struct {
	Model               string         `json:"model"`
	Stream              bool           `json:"stream"`
	StreamOptions       *StreamOptions `json:"stream_options"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Temperature         *float64       `json:"temperature"`
	TopP                *float64       `json:"top_p"`
	Seed                *int64         `json:"seed"`
	Stop                StopList       `json:"stop"`
	N                   *int           `json:"n"`
	// IgnoreEOS keeps generating through end-of-sequence tokens (an
	// extension also understood by vLLM, used by benchmarks).
	IgnoreEOS bool `json:"ignore_eos"`
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	samplingFields
	Messages    []ChatMessage `json:"messages"`
	Logprobs    bool          `json:"logprobs"`
	TopLogprobs *int          `json:"top_logprobs"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	samplingFields
	Prompt   Prompt `json:"prompt"`
	Logprobs *int   `json:"logprobs"`
	Echo     bool   `json:"echo"`
	BestOf   *int   `json:"best_of"`
}

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role    string      `json:"role"`
	Content ChatContent `json:"content"`
}

// ChatContent is a message's content: a string, or an array of parts of
// which only {"type":"text","text":...} parts are accepted.
type ChatContent struct {
	Text string
	Null bool
}

// UnmarshalJSON accepts a string, null, or an array of text parts.
func (c *ChatContent) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*c = ChatContent{Null: true}
		return nil
	case len(b) > 0 && b[0] == '"':
		c.Null = false
		return json.Unmarshal(b, &c.Text)
	case len(b) > 0 && b[0] == '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var buf bytes.Buffer
		for i, p := range parts {
			if p.Type != "text" || p.Text == nil {
				return fmt.Errorf("content part %d has type %q; only text parts ({\"type\":\"text\",\"text\":...}) are supported", i, p.Type)
			}
			buf.WriteString(*p.Text)
		}
		*c = ChatContent{Text: buf.String()}
		return nil
	}
	return fmt.Errorf("content must be a string or an array of text parts, got %.40s", b)
}

// Prompt is the prompt of a completion request: a string, an array of
// token ids, or a one-element array of either.
type Prompt struct {
	Text  string
	IDs   []int
	IsIDs bool
	Set   bool
}

// UnmarshalJSON accepts "text", ["text"], [1,2,3] and [[1,2,3]].
func (p *Prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*p = Prompt{}
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		*p = Prompt{Set: true}
		return json.Unmarshal(b, &p.Text)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("prompt must be a string or an array of token ids: %w", err)
	}
	if len(raw) == 0 {
		*p = Prompt{Set: true, IsIDs: true, IDs: []int{}}
		return nil
	}
	first := bytes.TrimSpace(raw[0])
	if len(first) > 0 && (first[0] == '"' || first[0] == '[') {
		if len(raw) != 1 {
			return fmt.Errorf("prompt holds %d prompts; this server takes one prompt per request (send them as separate requests)", len(raw))
		}
		return p.UnmarshalJSON(first)
	}
	var ids []int
	if err := json.Unmarshal(b, &ids); err != nil {
		return fmt.Errorf("prompt must be a string or an array of token ids: %w", err)
	}
	*p = Prompt{Set: true, IsIDs: true, IDs: ids}
	return nil
}

// StopList is the stop field: null, a string, or an array of strings.
type StopList []string

// UnmarshalJSON accepts a string or an array of strings.
func (s *StopList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = StopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop must be a string or an array of strings: %w", err)
	}
	*s = many
	return nil
}

// Usage counts the tokens of one request.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatLogprobs is the logprobs object of a chat choice.
type ChatLogprobs struct {
	Content []ChatTokenLogprob `json:"content"`
}

// ChatTokenLogprob is one generated token's entry in ChatLogprobs.
type ChatTokenLogprob struct {
	Token       string             `json:"token"`
	Logprob     float64            `json:"logprob"`
	Bytes       []int              `json:"bytes"`
	TopLogprobs []ChatTokenLogprob `json:"top_logprobs"`
}

// CompletionLogprobs is the logprobs object of a completion choice.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// ChatResponse is a non-streamed chat completion.
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // "chat.completion"
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage"`
}

// ChatChoice is the single choice of a ChatResponse.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      ChatOutput    `json:"message"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

// ChatOutput is the assistant message of a ChatChoice.
type ChatOutput struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatChunk is one server-sent event of a streamed chat completion.
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"` // "chat.completion.chunk"
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage"`
}

// ChatChunkChoice is the choice of a ChatChunk.
type ChatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// ChatDelta is the new text of a ChatChunkChoice.
type ChatDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

// CompletionResponse is a completion, whole or one streamed chunk
// (object "text_completion" in both cases, as OpenAI sends it).
type CompletionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage"`
}

// CompletionChoice is the single choice of a CompletionResponse.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string      `json:"object"` // "list"
	Data   []ModelCard `json:"data"`
}

// ModelCard describes the served model.
type ModelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"` // "model"
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root"`
	MaxModelLen int    `json:"max_model_len"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error object of an ErrorBody.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
