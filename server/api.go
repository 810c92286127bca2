package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The request and response bodies of the OpenAI API with vLLM's
// extensions, as far as cpmla implements them. Every field of a request is
// either honoured, accepted because it changes nothing by definition (see
// fields.go), or refused with 400 naming it.

// StreamOptions is the stream_options object of a request.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsageStats adds the usage so far to every chunk (vLLM).
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// samplingFields are the request fields shared by both endpoints: OpenAI's
// and vLLM's SamplingParams.
type samplingFields struct {
	Model             string             `json:"model"`
	Stream            bool               `json:"stream"`
	StreamOptions     *StreamOptions     `json:"stream_options"`
	MaxTokens         *int               `json:"max_tokens"`
	Temperature       *float64           `json:"temperature"`
	TopP              *float64           `json:"top_p"`
	TopK              *int               `json:"top_k"`
	MinP              *float64           `json:"min_p"`
	Seed              *int64             `json:"seed"`
	Stop              StopList           `json:"stop"`
	StopTokenIDs      []int              `json:"stop_token_ids"`
	N                 *int               `json:"n"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	AllowedTokenIDs   []int              `json:"allowed_token_ids"`
	MinTokens         *int               `json:"min_tokens"`
	// IgnoreEOS keeps generating through end-of-sequence tokens.
	IgnoreEOS              bool   `json:"ignore_eos"`
	IncludeStopStrInOutput bool   `json:"include_stop_str_in_output"`
	SkipSpecialTokens      *bool  `json:"skip_special_tokens"`
	PromptLogprobs         *int   `json:"prompt_logprobs"`
	TruncatePromptTokens   *int   `json:"truncate_prompt_tokens"`
	ReturnTokensAsTokenIDs bool   `json:"return_tokens_as_token_ids"`
	RequestID              string `json:"request_id"`
	Priority               *int   `json:"priority"`
	UseBeamSearch          bool   `json:"use_beam_search"`
	BestOf                 *int   `json:"best_of"`
	structuredFields
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	samplingFields
	Messages            []ChatMessage `json:"messages"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
	// Tools, rendered by the chat template and, with tool_choice "auto",
	// parsed out of the output by --tool-call-parser.
	Tools              []json.RawMessage          `json:"tools"`
	ToolChoice         json.RawMessage            `json:"tool_choice"`
	ParallelToolCalls  *bool                      `json:"parallel_tool_calls"`
	Documents          []json.RawMessage          `json:"documents"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	samplingFields
	Prompt           Prompt `json:"prompt"`
	Logprobs         *int   `json:"logprobs"`
	Echo             bool   `json:"echo"`
	AddSpecialTokens *bool  `json:"add_special_tokens"`
}

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role    string      `json:"role"`
	Content ChatContent `json:"content"`
	// ToolCalls are an assistant turn's calls; ToolCallID answers one in a
	// tool message; Name is the message's author name.
	ToolCalls  []ChatToolCall `json:"tool_calls"`
	ToolCallID string         `json:"tool_call_id"`
	Name       string         `json:"name"`
	// ReasoningContent (or Reasoning) is an assistant turn's reasoning.
	ReasoningContent *string `json:"reasoning_content"`
	Reasoning        *string `json:"reasoning"`
}

// ChatToolCall is a tool call of an assistant message, in a request or a
// response.
type ChatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function ChatFunction `json:"function"`
}

// ChatFunction is the function of a ChatToolCall: its name and the
// arguments as a JSON object text.
type ChatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatToolCallDelta is a streamed piece of a tool call: the first of a call
// has its id, type and name, later ones fragments of the arguments.
type ChatToolCallDelta struct {
	Index    int               `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function ChatFunctionDelta `json:"function"`
}

// ChatFunctionDelta is the function part of a ChatToolCallDelta.
type ChatFunctionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
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
// token ids, or an array of either (a batch of prompts).
type Prompt struct {
	Items []PromptItem
	Set   bool
}

// PromptItem is one prompt of a batch: text, or token ids.
type PromptItem struct {
	Text  string
	IDs   []int
	IsIDs bool
}

// UnmarshalJSON accepts "text", ["a","b"], [1,2,3] and [[1,2],[3]].
func (p *Prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*p = Prompt{}
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*p = Prompt{Set: true, Items: []PromptItem{{Text: s}}}
		return nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("prompt must be a string, an array of token ids or an array of either: %w", err)
	}
	if len(raw) == 0 {
		return errors.New("prompt is an empty array; give a string or at least one token id")
	}
	first := bytes.TrimSpace(raw[0])
	if len(first) == 0 || (first[0] != '"' && first[0] != '[') {
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return fmt.Errorf("prompt must be a string, an array of token ids or an array of either: %w", err)
		}
		*p = Prompt{Set: true, Items: []PromptItem{{IDs: ids, IsIDs: true}}}
		return nil
	}
	items := make([]PromptItem, len(raw))
	for i, r := range raw {
		r = bytes.TrimSpace(r)
		switch {
		case len(r) > 0 && r[0] == '"':
			if err := json.Unmarshal(r, &items[i].Text); err != nil {
				return fmt.Errorf("prompt[%d]: %w", i, err)
			}
		case len(r) > 0 && r[0] == '[':
			items[i].IsIDs = true
			if err := json.Unmarshal(r, &items[i].IDs); err != nil {
				return fmt.Errorf("prompt[%d] must be an array of token ids: %w", i, err)
			}
		default:
			return fmt.Errorf("prompt[%d] must be a string or an array of token ids, like prompt[0]", i)
		}
	}
	*p = Prompt{Set: true, Items: items}
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
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []ChatTopLogprob `json:"top_logprobs"`
}

// ChatTopLogprob is one of the most likely tokens of a step.
type ChatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// PromptLogprob is vLLM's entry of prompt_logprobs: the logprob of a token
// at a prompt position, its rank and its text. A position's entries are
// keyed by token id.
type PromptLogprob struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// CompletionLogprobs is the logprobs object of a completion choice.
type CompletionLogprobs struct {
	Tokens []string `json:"tokens"`
	// TokenLogprobs and TopLogprobs are null at an echoed prompt's first
	// token, which has nothing to be predicted from.
	TokenLogprobs []*float64           `json:"token_logprobs"`
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
	// PromptLogprobs answers vLLM's prompt_logprobs.
	PromptLogprobs []map[string]PromptLogprob `json:"prompt_logprobs,omitempty"`
}

// ChatChoice is the single choice of a ChatResponse.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      ChatOutput    `json:"message"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
	// StopReason is vLLM's: the stop string or stop token id that ended
	// the choice, null otherwise.
	StopReason any `json:"stop_reason"`
}

// ChatOutput is the assistant message of a ChatChoice.
type ChatOutput struct {
	Role string `json:"role"`
	// Content is null when the output is only reasoning or tool calls.
	Content          *string        `json:"content"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []ChatToolCall `json:"tool_calls,omitempty"`
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
	Role             string              `json:"role,omitempty"`
	Content          string              `json:"content,omitempty"`
	ReasoningContent string              `json:"reasoning_content,omitempty"`
	ToolCalls        []ChatToolCallDelta `json:"tool_calls,omitempty"`
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
	StopReason   any                 `json:"stop_reason"`
	// PromptLogprobs answers vLLM's prompt_logprobs (whole responses only).
	PromptLogprobs []map[string]PromptLogprob `json:"prompt_logprobs,omitempty"`
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
	// VocabSize is how many token ids the model takes: a prompt of ids is
	// refused when one is not below it (a client drawing random prompts,
	// like `cpmla bench serve`, reads it here).
	VocabSize int `json:"vocab_size"`
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
