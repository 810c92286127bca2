package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cpmla/cpmla/tokenizer/jinja"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string // "system", "user", "assistant" or "tool"
	Content string
	// ToolCalls are the calls an assistant turn makes. An assistant
	// message with tool calls and empty Content is given to the template
	// with content none, which is how the DeepSeek-V3 template tells a
	// tool-call turn from a reply.
	ToolCalls []ToolCall
	// Name and ToolCallID are a message's "name" and a tool result's
	// "tool_call_id"; Reasoning is an assistant turn's reasoning (the
	// template sees it as both "reasoning" and "reasoning_content", as
	// vLLM gives it). Empty (nil) ones are not given to the template.
	Name       string
	ToolCallID string
	Reasoning  *string
}

// ToolCall is a function call made by the assistant.
type ToolCall struct {
	ID        string // optional
	Type      string // "function"
	Name      string
	Arguments string // JSON text
}

// ChatInput is everything a chat template is rendered with, as vLLM hands
// it to Hugging Face's apply_chat_template.
type ChatInput struct {
	Messages []Message
	// Tools and Documents are the request's "tools" and "documents", each
	// element as the request sent it (key order is kept, so tojson writes
	// what the client wrote). Nil means the template sees none.
	Tools     []json.RawMessage
	Documents []json.RawMessage
	// AddGenerationPrompt ends the prompt with the assistant's opening.
	AddGenerationPrompt bool
	// Kwargs are chat_template_kwargs (e.g. "enable_thinking": false),
	// JSON values by name. They cannot replace the variables above.
	Kwargs map[string]json.RawMessage
	// Limits bound the render; zero fields mean jinja.DefaultLimits.
	Limits jinja.Limits
}

// ErrNoChatTemplate is returned by ApplyChatTemplate when the tokenizer's
// configuration has no chat_template.
var ErrNoChatTemplate = errors.New("tokenizer has no chat_template; use a tokenizer_config.json that defines one")

// ApplyChatTemplate renders messages with the tokenizer's chat template. The
// template sees messages (role, content and, when present, tool_calls),
// add_generation_prompt and the bos/eos/pad/unk token strings.
func (t *Tokenizer) ApplyChatTemplate(messages []Message, addGenerationPrompt bool) (string, error) {
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	vars := make(map[string]any, len(t.chatVars)+2)
	for k, v := range t.chatVars {
		vars[k] = v
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msg := map[string]any{"role": m.Role, "content": m.Content}
		if len(m.ToolCalls) > 0 {
			calls := make([]any, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				typ := c.Type
				if typ == "" {
					typ = "function"
				}
				calls[j] = map[string]any{
					"type":     typ,
					"function": map[string]any{"name": c.Name, "arguments": c.Arguments},
				}
			}
			msg["tool_calls"] = calls
			if m.Content == "" {
				msg["content"] = nil
			}
		}
		msgs[i] = msg
	}
	vars["messages"] = msgs
	vars["add_generation_prompt"] = addGenerationPrompt
	out, err := t.chat.Render(vars)
	if err != nil {
		return "", fmt.Errorf("apply chat template: %w", err)
	}
	return out, nil
}

// reservedChatVars are the variables RenderChat sets itself.
var reservedChatVars = []string{"messages", "tools", "documents", "add_generation_prompt"}

// RenderChat renders a conversation with the chat template as vLLM does:
// content is always a string (a null content is ""), assistant tool-call
// arguments are given to the template as JSON values (parsed from their
// text; empty or invalid JSON means {}), tools and documents as the request sent them, and
// the chat_template_kwargs as extra variables. The render runs under
// in.Limits.
func (t *Tokenizer) RenderChat(in ChatInput) (string, error) {
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	vars := make(map[string]any, len(t.chatVars)+len(in.Kwargs)+4)
	for k, v := range t.chatVars {
		vars[k] = v
	}
	for k, raw := range in.Kwargs {
		for _, r := range reservedChatVars {
			if k == r {
				return "", fmt.Errorf("chat_template_kwargs may not set %q (it is set from the request)", k)
			}
		}
		v, err := jinja.FromJSON(raw)
		if err != nil {
			return "", fmt.Errorf("chat_template_kwargs[%q]: %w", k, err)
		}
		vars[k] = v
	}
	msgs := make([]any, len(in.Messages))
	for i, m := range in.Messages {
		d, err := templateMessage(m)
		if err != nil {
			return "", fmt.Errorf("messages[%d]: %w", i, err)
		}
		msgs[i] = d
	}
	vars["messages"] = msgs
	vars["add_generation_prompt"] = in.AddGenerationPrompt
	for name, list := range map[string][]json.RawMessage{"tools": in.Tools, "documents": in.Documents} {
		if list == nil {
			vars[name] = nil
			continue
		}
		vals := make([]any, len(list))
		for i, raw := range list {
			v, err := jinja.FromJSON(raw)
			if err != nil {
				return "", fmt.Errorf("%s[%d]: %w", name, i, err)
			}
			vals[i] = v
		}
		vars[name] = vals
	}
	out, err := t.chat.RenderLimited(vars, in.Limits)
	if err != nil {
		return "", fmt.Errorf("apply chat template: %w", err)
	}
	return out, nil
}

// templateMessage builds the dict a template sees for one message, keys in
// the order of the OpenAI message object.
func templateMessage(m Message) (*jinja.Dict, error) {
	d := jinja.NewDict()
	d.Set("role", m.Role)
	// vLLM gives the template a string always: a null content is "".
	d.Set("content", m.Content)
	if len(m.ToolCalls) > 0 {
		calls := make([]any, len(m.ToolCalls))
		for j, c := range m.ToolCalls {
			// vLLM: arguments that are not JSON (or empty) become {}.
			var args any = jinja.NewDict()
			if v, err := jinja.FromJSON([]byte(c.Arguments)); err == nil {
				args = v
			}
			fn := jinja.NewDict()
			fn.Set("name", c.Name)
			fn.Set("arguments", args)
			call := jinja.NewDict()
			if c.ID != "" {
				call.Set("id", c.ID)
			}
			typ := c.Type
			if typ == "" {
				typ = "function"
			}
			call.Set("type", typ)
			call.Set("function", fn)
			calls[j] = call
		}
		d.Set("tool_calls", calls)
	}
	if m.Reasoning != nil {
		d.Set("reasoning", *m.Reasoning)
		d.Set("reasoning_content", *m.Reasoning)
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", m.ToolCallID)
	}
	if m.Name != "" {
		d.Set("name", m.Name)
	}
	return d, nil
}

// EncodeChatInput renders with RenderChat and tokenizes the result as
// EncodeChat does.
func (t *Tokenizer) EncodeChatInput(in ChatInput) ([]int, error) {
	text, err := t.RenderChat(in)
	if err != nil {
		return nil, err
	}
	return t.EncodeWith(text, EncodeOptions{ParseSpecial: true}), nil
}

// EncodeChat renders messages with the chat template and tokenizes the
// result. The rendering carries its own BOS and control tokens, so it is
// encoded with ParseSpecial and without AddSpecial.
func (t *Tokenizer) EncodeChat(messages []Message, addGenerationPrompt bool) ([]int, error) {
	text, err := t.ApplyChatTemplate(messages, addGenerationPrompt)
	if err != nil {
		return nil, err
	}
	return t.EncodeWith(text, EncodeOptions{ParseSpecial: true}), nil
}
