package tokenizer

import (
	"encoding/json"
	"os"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// referenceIDs is testdata/reference_ids.json, written by tools/tokref/gen.mjs
// with an independent implementation of the tokenizer.json pipeline.
type referenceIDs struct {
	BOS     int `json:"bos"`
	Entries []struct {
		Text    string `json:"text"`
		Special []int  `json:"special"`
		Plain   []int  `json:"plain"`
	} `json:"entries"`
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func defaultForTest(t testing.TB) *Tokenizer {
	t.Helper()
	tk, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// regexTokenizer is the embedded tokenizer with every split pattern on the
// general regular-expression engine instead of the hand-written matchers.
var regexTokenizer = sync.OnceValues(func() (*Tokenizer, error) {
	return parse(defaultTokenizerJSON, defaultConfigJSON, true)
})

func TestReferenceParity(t *testing.T) {
	var ref referenceIDs
	readJSON(t, "testdata/reference_ids.json", &ref)
	if len(ref.Entries) < 150 {
		t.Fatalf("reference corpus has %d entries, want at least 150", len(ref.Entries))
	}
	hand := defaultForTest(t)
	general, err := regexTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if hand.BOS() != ref.BOS {
		t.Errorf("BOS() = %d, reference %d", hand.BOS(), ref.BOS)
	}
	for name, tk := range map[string]*Tokenizer{"hand-written matchers": hand, "regexp2": general} {
		t.Run(name, func(t *testing.T) {
			for i, e := range ref.Entries {
				if diff := cmp.Diff(e.Special, tk.Encode(e.Text, true)); diff != "" {
					t.Errorf("entry %d %q with special tokens (-reference +got):\n%s", i, e.Text, diff)
				}
				if diff := cmp.Diff(e.Plain, tk.Encode(e.Text, false)); diff != "" {
					t.Errorf("entry %d %q without special tokens (-reference +got):\n%s", i, e.Text, diff)
				}
			}
		})
	}
}

func TestChatTemplateParity(t *testing.T) {
	var ref struct {
		Chats []struct {
			Messages []struct {
				Role      string  `json:"role"`
				Content   *string `json:"content"`
				ToolCalls []struct {
					Type     string `json:"type"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"messages"`
			AddGenerationPrompt bool   `json:"add_generation_prompt"`
			Rendered            string `json:"rendered"`
		} `json:"chats"`
	}
	readJSON(t, "testdata/chat_reference.json", &ref)
	if len(ref.Chats) < 10 {
		t.Fatalf("chat reference has %d renderings, want at least 10", len(ref.Chats))
	}
	tk := defaultForTest(t)
	for i, c := range ref.Chats {
		msgs := make([]Message, len(c.Messages))
		for j, m := range c.Messages {
			msgs[j] = Message{Role: m.Role}
			if m.Content != nil {
				msgs[j].Content = *m.Content
			}
			for _, tc := range m.ToolCalls {
				msgs[j].ToolCalls = append(msgs[j].ToolCalls, ToolCall{Type: tc.Type, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
		}
		got, err := tk.ApplyChatTemplate(msgs, c.AddGenerationPrompt)
		if err != nil {
			t.Errorf("chat %d: %v", i, err)
			continue
		}
		if diff := cmp.Diff(c.Rendered, got); diff != "" {
			t.Errorf("chat %d (add_generation_prompt=%v) (-reference +got):\n%s", i, c.AddGenerationPrompt, diff)
		}
	}
}

// TestEncodeChat checks that a rendered conversation tokenizes into exactly
// one BOS and the control tokens as single ids.
func TestEncodeChat(t *testing.T) {
	tk := defaultForTest(t)
	ids, err := tk.EncodeChat([]Message{{Role: "user", Content: "Hi"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	user, _ := tk.TokenID("<｜User｜>")
	assistant, _ := tk.TokenID("<｜Assistant｜>")
	want := append(append([]int{tk.BOS(), user}, tk.Encode("Hi", false)...), assistant)
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("EncodeChat (-want +got):\n%s", diff)
	}
}
