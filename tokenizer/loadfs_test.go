package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

// LoadFS reads the same three files as Load: a tokenizer read from an fs.FS
// encodes and renders chats as the one read from its directory, and a
// chat_template.jinja overrides tokenizer_config.json's template in both.
func TestLoadFSMatchesLoad(t *testing.T) {
	const dir = "data/deepseek-v3"
	m := fstest.MapFS{}
	for _, name := range []string{TokenizerFile, ConfigFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		m[name] = &fstest.MapFile{Data: data}
	}
	want, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadFS(m, "built-in x")
	if err != nil {
		t.Fatal(err)
	}
	const text = "Hello <｜User｜> world, 12345 ünïcode"
	if d := cmp.Diff(want.Encode(text, true), got.Encode(text, true)); d != "" {
		t.Errorf("encodings differ (-Load +LoadFS):\n%s", d)
	}
	msgs := []Message{{Role: "user", Content: "hi"}}
	a, errA := want.ApplyChatTemplate(msgs, true)
	b, errB := got.ApplyChatTemplate(msgs, true)
	if errA != nil || errB != nil || a != b {
		t.Errorf("chat: Load %q (%v), LoadFS %q (%v)", a, errA, b, errB)
	}
	m[ChatTemplateFile] = &fstest.MapFile{Data: []byte("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")}
	over, err := LoadFS(m, "built-in x")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := over.ApplyChatTemplate(msgs, false); err != nil || s != "[hi]" {
		t.Errorf("chat_template.jinja: %q, %v; want [hi]", s, err)
	}
	delete(m, TokenizerFile)
	if _, err := LoadFS(m, "built-in x"); err == nil || !strings.Contains(err.Error(), "load tokenizer from built-in x") {
		t.Errorf("without tokenizer.json: %v", err)
	}
	if _, err := LoadFS(fstest.MapFS{TokenizerFile: {Data: []byte("{}")}, ConfigFile + "/x": {}}, "built-in x"); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory as tokenizer_config.json: %v", err)
	}
}
