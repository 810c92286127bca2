package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/tokenizer"
)

func TestParseIDList(t *testing.T) {
	cases := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{"1,2,3", []int{1, 2, 3}, ""},
		{" 0, 19923 ,2058 ", []int{0, 19923, 2058}, ""},
		{"[4,5]", []int{4, 5}, ""},
		{"", nil, "--ids is empty"},
		{"1,,2", nil, `item 2 ""`},
		{"-1", nil, "not a non-negative integer"},
		{"1;2", nil, "not a non-negative integer"},
	}
	for _, c := range cases {
		got, err := parseIDList("--ids", c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("parseIDList(%q) error %v, want one containing %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseIDList(%q): %v", c.in, err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("parseIDList(%q) (-want +got):\n%s", c.in, diff)
		}
	}
}

func FuzzParseIDList(f *testing.F) {
	f.Add("1,2,3")
	f.Add("[0, 7]")
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := parseIDList("--ids", s)
		if err != nil {
			return
		}
		for _, id := range ids {
			if id < 0 {
				t.Fatalf("parseIDList(%q) accepted negative id %d", s, id)
			}
		}
	})
}

// TestTokenizeRoundTripCommand runs tokenize and detokenize through the
// command tree: the ids printed by one give back the text in the other.
func TestTokenizeRoundTripCommand(t *testing.T) {
	run := func(args ...string) string {
		t.Helper()
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("cpmla %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSuffix(out.String(), "\n")
	}
	text := "Hello, 世界 <｜User｜>"
	ids := run("tokenize", "--text", text)
	if !strings.HasPrefix(ids, "[0,") {
		t.Errorf("tokenize output %q does not start with BOS", ids)
	}
	if got := run("detokenize", "--skip-special", "--ids", ids); got != text {
		t.Errorf("detokenize gave %q, want %q", got, text)
	}
	plain := run("tokenize", "--no-special", "--text", text)
	if got := run("detokenize", "--ids", plain); got != text {
		t.Errorf("detokenize of --no-special ids gave %q, want %q", got, text)
	}
}

// runCLIErr runs the command tree and returns its output and error.
func runCLIErr(args ...string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestTokenizeModes runs the three special-token modes and a rendered chat
// through the command tree.
func TestTokenizeModes(t *testing.T) {
	tk, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	text := "<｜User｜>Hi"
	for _, c := range []struct {
		flag string
		opts tokenizer.EncodeOptions
	}{
		{"", tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}},
		{"--no-add-special", tokenizer.EncodeOptions{ParseSpecial: true}},
		{"--no-special", tokenizer.EncodeOptions{}},
	} {
		args := []string{"tokenize", "--text", text}
		if c.flag != "" {
			args = append(args, c.flag)
		}
		out := runCLI(t, args...)
		want, _ := json.Marshal(tk.EncodeWith(text, c.opts))
		if strings.TrimSpace(out) != string(want) {
			t.Errorf("%v printed %s, want %s", args, out, want)
		}
	}
	msgs := filepath.Join(t.TempDir(), "m.json")
	if err := os.WriteFile(msgs, []byte(`[{"role": "user", "content": "Hi"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runCLI(t, "tokenize", "--messages", msgs, "--render", "--chat-template", "{% for m in messages %}[{{ m.role }}:{{ m.content }}|{{ enable_thinking }}]{% endfor %}", "--chat-template-kwargs", `{"enable_thinking": false}`)
	if out != "[user:Hi|False]" {
		t.Errorf("rendered chat: %q", out)
	}
	ids := runCLI(t, "tokenize", "--messages", msgs)
	want, _ := tk.EncodeChatInput(tokenizer.ChatInput{Messages: []tokenizer.Message{{Role: "user", Content: "Hi"}}, AddGenerationPrompt: true})
	if w, _ := json.Marshal(want); strings.TrimSpace(ids) != string(w) {
		t.Errorf("tokenize --messages printed %s, want %s", ids, w)
	}
	if _, err := runCLIErr("tokenize", "--text", "x", "--no-special", "--no-add-special"); err == nil {
		t.Error("--no-special with --no-add-special accepted")
	}
}
