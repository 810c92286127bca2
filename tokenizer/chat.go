package tokenizer

import (
	"errors"
	"fmt"
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
}

// ToolCall is a function call made by the assistant.
type ToolCall struct {
	Type      string // "function"
	Name      string
	Arguments string // JSON text
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
