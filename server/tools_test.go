package server

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/chatparse"
)

const weatherTool = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",` +
	`"properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}`

// toolEnv serves a fake model whose output is text (then EOS), with the
// given parsers.
func toolEnv(t *testing.T, text, toolParser, reasoningParser string) *testEnv {
	t.Helper()
	return newTestEnv(t, func(f *fakeEngine, c *Config) {
		f.script = append(c.Tokenizer.Encode(text, false), c.Tokenizer.EOS())
		c.ToolCallParser, c.ReasoningParser, c.AutoToolChoice = toolParser, reasoningParser, toolParser != ""
	})
}

// streamChat posts a streamed chat request and returns the decoded chunks.
func (e *testEnv) streamChat(t *testing.T, body string) []ChatChunk {
	t.Helper()
	resp, err := e.hc.Post(e.http.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var chunks []ChatChunk
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c ChatChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	return chunks
}

// TestToolCallsAndReasoning serves GLM-5 and DeepSeek-V3.2 style outputs
// with vLLM's parser flags: the whole response carries reasoning_content,
// content and typed tool_calls exactly as chatparse parses the text, with
// finish_reason tool_calls; the stream's deltas add up to the same message.
func TestToolCallsAndReasoning(t *testing.T) {
	glm := "<think>The user wants the weather.</think>Let me look it up." +
		"<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
	dsml := "</think>Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n" +
		"<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n" +
		"<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"
	for _, tc := range []struct {
		name, text, tool, reasoning string
	}{
		{"glm47+glm45", glm, "glm47", "glm45"},
		{"deepseek_v32+deepseek_r1", dsml, "deepseek_v32", "deepseek_r1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := toolEnv(t, tc.text, tc.tool, tc.reasoning)
			want, err := chatparse.Parse(chatparse.Options{ToolParser: tc.tool, ReasoningParser: tc.reasoning,
				Tools: []chatparse.Tool{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}`)}}}, tc.text)
			if err != nil || len(want.ToolCalls) != 1 || want.Reasoning == nil {
				t.Fatalf("reference parse: %+v, %v", want, err)
			}
			body := `{"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[` + weatherTool + `]`
			status, _, raw := e.post(t, "/v1/chat/completions", body+`}`)
			if status != 200 {
				t.Fatalf("status %d: %s", status, raw)
			}
			var resp ChatResponse
			if err := json.Unmarshal([]byte(raw), &resp); err != nil {
				t.Fatal(err)
			}
			c := resp.Choices[0]
			if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
				t.Fatalf("finish %q, message %+v", c.FinishReason, c.Message)
			}
			call := c.Message.ToolCalls[0]
			if call.Type != "function" || !strings.HasPrefix(call.ID, "chatcmpl-tool-") {
				t.Errorf("call %+v: want type function and a chatcmpl-tool- id", call)
			}
			if d := cmp.Diff(want.ToolCalls[0].Name+" "+want.ToolCalls[0].Arguments, call.Function.Name+" "+call.Function.Arguments); d != "" {
				t.Errorf("tool call (-chatparse +server):\n%s", d)
			}
			if call.Function.Arguments != `{"city": "Paris", "days": 3}` {
				t.Errorf("arguments %s, want the schema-typed {\"city\": \"Paris\", \"days\": 3}", call.Function.Arguments)
			}
			if d := cmp.Diff(want.Reasoning, c.Message.ReasoningContent); d != "" {
				t.Errorf("reasoning_content (-chatparse +server):\n%s", d)
			}
			if d := cmp.Diff(want.Content, c.Message.Content); d != "" {
				t.Errorf("content (-chatparse +server):\n%s", d)
			}

			// Streamed: the deltas add up to the whole message.
			var reasoning, content, name, args, id, finish string
			for _, ch := range e.streamChat(t, body+`,"stream":true}`) {
				for _, cc := range ch.Choices {
					reasoning += cc.Delta.ReasoningContent
					content += cc.Delta.Content
					for _, d := range cc.Delta.ToolCalls {
						if d.Index != 0 {
							t.Errorf("tool call delta index %d", d.Index)
						}
						name += d.Function.Name
						args += d.Function.Arguments
						id += d.ID
					}
					if cc.FinishReason != nil {
						finish = *cc.FinishReason
					}
				}
			}
			wantContent := ""
			if want.Content != nil {
				wantContent = *want.Content
			}
			if reasoning != *want.Reasoning || strings.TrimSpace(content) != strings.TrimSpace(wantContent) || name != "get_weather" ||
				args != want.ToolCalls[0].Arguments || finish != "tool_calls" || !strings.HasPrefix(id, "chatcmpl-tool-") {
				t.Errorf("stream: reasoning %q content %q call %s(%s) id %q finish %q", reasoning, content, name, args, id, finish)
			}

			// tool_choice none: the text is content, nothing is parsed as a call.
			status, _, raw = e.post(t, "/v1/chat/completions", body+`,"tool_choice":"none"}`)
			var none ChatResponse
			if status != 200 || json.Unmarshal([]byte(raw), &none) != nil || len(none.Choices[0].Message.ToolCalls) != 0 ||
				none.Choices[0].FinishReason != "stop" || none.Choices[0].Message.Content == nil ||
				!strings.Contains(*none.Choices[0].Message.Content, "get_weather") {
				t.Errorf("tool_choice none: %s", raw)
			}
		})
	}
}

// TestReasoningSwitchAndSpecialTokens: with a reasoning parser the text the
// parser sees keeps special tokens (here BOS inside the output), and
// chat_template_kwargs enable_thinking false makes glm45 treat it all as
// content.
func TestReasoningSwitchAndSpecialTokens(t *testing.T) {
	e := newTestEnv(t, func(f *fakeEngine, c *Config) {
		tk := c.Tokenizer
		f.script = append(append(tk.Encode("<think>hm</think>a", false), tk.BOS()), append(tk.Encode("b", false), tk.EOS())...)
		c.ReasoningParser = "glm45"
	})
	bos := e.tk.Decode([]int{e.tk.BOS()}, false)
	var resp ChatResponse
	status, _, raw := e.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
	if status != 200 || json.Unmarshal([]byte(raw), &resp) != nil {
		t.Fatalf("%d %s", status, raw)
	}
	m := resp.Choices[0].Message
	if m.ReasoningContent == nil || *m.ReasoningContent != "hm" || m.Content == nil || *m.Content != "a"+bos+"b" {
		t.Errorf("reasoning %q content %q, want \"hm\" and \"a%sb\"", deref(m.ReasoningContent), deref(m.Content), bos)
	}
	status, _, raw = e.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false}}`)
	resp = ChatResponse{}
	if status != 200 || json.Unmarshal([]byte(raw), &resp) != nil {
		t.Fatalf("%d %s", status, raw)
	}
	if m := resp.Choices[0].Message; m.ReasoningContent != nil || m.Content == nil || !strings.Contains(*m.Content, "hm") {
		t.Errorf("enable_thinking false: reasoning %v content %v, want all content", m.ReasoningContent, m.Content)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestSkipSpecialTokens: special tokens leave generated text by default and
// stay in it with skip_special_tokens false; the stop token's text never
// shows.
func TestSkipSpecialTokens(t *testing.T) {
	e := newTestEnv(t, func(f *fakeEngine, c *Config) {
		tk := c.Tokenizer
		f.script = append(append(tk.Encode("a", false), tk.BOS()), append(tk.Encode("b", false), tk.EOS())...)
	})
	bos := e.tk.Decode([]int{e.tk.BOS()}, false)
	for _, tc := range []struct{ extra, want string }{{"", "ab"}, {`,"skip_special_tokens":true`, "ab"}, {`,"skip_special_tokens":false`, "a" + bos + "b"}} {
		status, _, raw := e.post(t, "/v1/completions", `{"prompt":"x"`+tc.extra+`}`)
		var resp CompletionResponse
		if status != 200 || json.Unmarshal([]byte(raw), &resp) != nil || resp.Choices[0].Text != tc.want {
			t.Errorf("%s: %d %s, want text %q", tc.extra, status, raw, tc.want)
		}
	}
}
