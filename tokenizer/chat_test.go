package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/tokenizer/jinja"
)

// copyTiny writes the tiny test tokenizer into a fresh directory, with the
// given extra files.
func copyTiny(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/tiny-merge-strings/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{TokenizerFile: string(data)}
	for k, v := range extra {
		files[k] = v
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestChatTemplateSources(t *testing.T) {
	cfg := `{"chat_template": "config:{% for m in messages %}{{ m.content }}{% endfor %}"}`
	dir := copyTiny(t, map[string]string{ConfigFile: cfg, ChatTemplateFile: "file:{% for m in messages %}{{ m.content }}{% endfor %}"})
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "user", Content: "hi"}}
	if got, err := tk.RenderChat(ChatInput{Messages: msgs}); err != nil || got != "file:hi" {
		t.Errorf("chat_template.jinja should win over tokenizer_config.json: %q, %v", got, err)
	}
	over, err := tk.WithChatTemplate("over:{{ messages[0].content }}")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := over.RenderChat(ChatInput{Messages: msgs}); got != "over:hi" {
		t.Errorf("WithChatTemplate: %q", got)
	}
	if got, _ := tk.RenderChat(ChatInput{Messages: msgs}); got != "file:hi" {
		t.Errorf("WithChatTemplate changed the original: %q", got)
	}
	path := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(path, []byte("from file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for arg, want := range map[string]string{path: "from file", "{{ x }}": "{{ x }}"} {
		if got, err := LoadChatTemplate(arg); err != nil || got != want {
			t.Errorf("LoadChatTemplate(%q) = %q, %v; want %q", arg, got, err, want)
		}
	}
	if _, err := LoadChatTemplate(filepath.Join(t.TempDir(), "missing.jinja")); err == nil {
		t.Error("LoadChatTemplate of a missing file that is no template succeeded")
	}
	if _, err := Load(copyTiny(t, map[string]string{ChatTemplateFile: "{% if %}"})); err == nil || !strings.Contains(err.Error(), ChatTemplateFile) {
		t.Errorf("a broken chat_template.jinja: %v, want an error naming the file", err)
	}
}

// TestRenderChat checks what the template sees, as vLLM gives it.
func TestRenderChat(t *testing.T) {
	tpl := `{{ tools | tojson }}|{{ documents | tojson }}|{{ enable_thinking }}|{% for m in messages %}{{ m.role }}:{{ m.content }}` +
		`{% if m.tool_calls %}{% for c in m.tool_calls %}[{{ c.id }} {{ c.function.name }}{% for k, v in c.function.arguments.items() %} {{ k }}={{ v | tojson }}{% endfor %}]{% endfor %}{% endif %}` +
		`{% if m.reasoning_content is defined %}<r:{{ m.reasoning_content }}>{% endif %}{% if m.tool_call_id %}({{ m.tool_call_id }}){% endif %};{% endfor %}{{ add_generation_prompt }}`
	tk, err := Parse([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tk, err = tk.WithChatTemplate(tpl); err != nil {
		t.Fatal(err)
	}
	think := "hmm"
	in := ChatInput{
		Messages: []Message{
			{Role: "user", Content: "weather?"},
			{Role: "assistant", Reasoning: &think, ToolCalls: []ToolCall{{ID: "c1", Name: "get", Arguments: `{"z": 1, "a": [true, "é"]}`}, {Name: "noargs"}}},
			{Role: "tool", Content: "sunny", ToolCallID: "c1"},
		},
		Tools:               []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {"z": {"type": "integer"}}}}}`)},
		Kwargs:              map[string]json.RawMessage{"enable_thinking": json.RawMessage(`false`)},
		AddGenerationPrompt: true,
	}
	got, err := tk.RenderChat(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {"z": {"type": "integer"}}}}}]|null|False|` +
		`user:weather?;assistant:[c1 get z=1 a=[true, "é"]][ noargs]<r:hmm>;tool:sunny(c1);True`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RenderChat (-want +got):\n%s", diff)
	}
	in.Kwargs = map[string]json.RawMessage{"messages": json.RawMessage(`[]`)}
	if _, err := tk.RenderChat(in); err == nil {
		t.Error("chat_template_kwargs replacing messages was accepted")
	}
	in.Kwargs = nil
	in.Messages[1].ToolCalls[0].Arguments = "{not json"
	if got, err := tk.RenderChat(in); err != nil || !strings.Contains(got, "[c1 get]") {
		t.Errorf("non-JSON arguments should render as {} (vLLM): %q, %v", got, err)
	}
	loop, _ := tk.WithChatTemplate("{% for i in range(100) %}{% for m in messages %}x{% endfor %}{% endfor %}")
	_, err = loop.RenderChat(ChatInput{Messages: []Message{{Role: "user"}, {Role: "user"}}, Limits: jinja.Limits{MaxIterations: 50}})
	if !errors.Is(err, jinja.ErrIterationLimit) {
		t.Errorf("render over its iteration limit: %v, want ErrIterationLimit", err)
	}
}

func TestStreamDecoderKeepingSpecial(t *testing.T) {
	tk := defaultForTest(t)
	user, _ := tk.TokenID("<｜User｜>")
	ids := append(append([]int{tk.BOS(), user}, tk.Encode("héllo wörld 😀", false)...), tk.EOS())
	for _, keep := range []bool{false, true} {
		d := tk.NewStreamDecoder()
		if keep {
			d = tk.NewStreamDecoderKeepingSpecial()
		}
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Add(id))
		}
		b.WriteString(d.Flush())
		if want := tk.Decode(ids, !keep); b.String() != want {
			t.Errorf("keep special %v: streamed %q, Decode %q", keep, b.String(), want)
		}
	}
}

// TestAbsurdSizesRefused checks that sizes are refused before they are
// allocated.
func TestAbsurdSizesRefused(t *testing.T) {
	cases := map[string]string{
		"id far past the count": `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 2000000000}, "merges": []}}`,
		"added id far past":     `{"added_tokens": [{"id": 16000000, "content": "<x>"}], "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`,
		"token too long":        `{"model": {"type": "BPE", "vocab": {"` + strings.Repeat("a", maxTokenBytes+1) + `": 0}, "merges": []}}`,
		"pattern too long":      `{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "` + strings.Repeat("a", maxPatternBytes+1) + `"}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`,
	}
	for name, js := range cases {
		if _, err := Parse([]byte(js), nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxTokenizerFileBytes + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("Load of an oversized tokenizer.json: %v, want a size refusal", err)
	}
}
