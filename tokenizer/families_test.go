package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The tokenizer families of testdata/families, checked against reference
// ids written by Hugging Face's tokenizers library (tools/tokref/families.mjs)
// on a corpus with long, multilingual and adversarial texts.

func gunzip(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// llama3Pipeline gives a cl100k tokenizer.json Llama 3's pipeline options,
// exactly as families.mjs does.
func llama3Pipeline(t testing.TB, tokJSON []byte) []byte {
	t.Helper()
	var tj map[string]any
	if err := json.Unmarshal(tokJSON, &tj); err != nil {
		t.Fatal(err)
	}
	tj["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternLlama3}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
	}}
	var bosID float64
	for _, a := range tj["added_tokens"].([]any) {
		if m := a.(map[string]any); m["content"] == "<|endoftext|>" {
			bosID = m["id"].(float64)
		}
	}
	bos := map[string]any{"SpecialToken": map[string]any{"id": "<|endoftext|>", "type_id": 0}}
	tj["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
		map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
		map[string]any{"type": "TemplateProcessing", "single": []any{bos, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<|endoftext|>": map[string]any{"id": "<|endoftext|>", "ids": []any{bosID}, "tokens": []any{"<|endoftext|>"}}}},
	}}
	tj["model"].(map[string]any)["ignore_merges"] = true
	out, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// familyFiles returns tokenizer.json and tokenizer_config.json of a family.
func familyFiles(t testing.TB, name string) (tok, cfg []byte) {
	t.Helper()
	switch name {
	case "deepseek-v3":
		return defaultTokenizerJSON, defaultConfigJSON
	case "llama3-pipeline":
		tok, _ = familyFiles(t, "gpt35turbo")
		return llama3Pipeline(t, tok), nil
	}
	dir := filepath.Join("testdata/families", name)
	cfg, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	return gunzip(t, filepath.Join(dir, TokenizerFile+".gz")), cfg
}

func TestFamilyParity(t *testing.T) {
	var corpus []string
	readJSON(t, "testdata/families/corpus.json", &corpus)
	var ref struct {
		Families map[string][]struct {
			With    []int   `json:"with"`
			Without []int   `json:"without"`
			Plain   []int   `json:"plain"`
			Decoded *string `json:"decoded"`
		} `json:"families"`
	}
	if err := json.Unmarshal(gunzip(t, "testdata/families/reference.json.gz"), &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Families) < 5 || len(corpus) < 700 {
		t.Fatalf("reference has %d families and %d texts, want at least 5 and 700", len(ref.Families), len(corpus))
	}
	for name, entries := range ref.Families {
		t.Run(name, func(t *testing.T) {
			tokJSON, cfgJSON := familyFiles(t, name)
			for _, force := range []bool{false, true} {
				tk, err := parse(tokJSON, cfgJSON, force)
				if err != nil {
					t.Fatal(err)
				}
				if len(entries) != len(corpus) {
					t.Fatalf("%d reference entries for %d texts", len(entries), len(corpus))
				}
				bad := 0
				for i, e := range entries {
					text := corpus[i]
					for _, c := range []struct {
						mode string
						want []int
						opts EncodeOptions
					}{
						{"add_special_tokens=True", e.With, EncodeOptions{AddSpecial: true, ParseSpecial: true}},
						{"add_special_tokens=False", e.Without, EncodeOptions{ParseSpecial: true}},
						{"plain text", e.Plain, EncodeOptions{}},
					} {
						got := tk.EncodeWith(text, c.opts)
						if diff := cmp.Diff(c.want, got, cmp.Comparer(func(a, b []int) bool { return slicesEqual(a, b) })); diff != "" {
							bad++
							if bad <= 5 {
								t.Errorf("regexp2=%v text %d %.60q %s (-reference +got):\n%.600s", force, i, text, c.mode, diff)
							}
						}
					}
					if e.Decoded != nil && !force {
						if got := tk.Decode(e.With, false); got != *e.Decoded {
							bad++
							if bad <= 5 {
								t.Errorf("text %d %.60q: Decode = %.80q, reference %.80q", i, text, got, *e.Decoded)
							}
						}
					}
				}
				if bad > 0 {
					t.Errorf("regexp2=%v: %d mismatches", force, bad)
				}
			}
		})
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BenchmarkFamilyEncode encodes the families corpus (about 250 KB) with each
// family's tokenizer, its split patterns on the hand-written matchers and
// on the general regex engine; the ratio of the two is the matchers' gain.
func BenchmarkFamilyEncode(b *testing.B) {
	var corpus []string
	readJSON(b, "testdata/families/corpus.json", &corpus)
	size := 0
	for _, s := range corpus {
		size += len(s)
	}
	for _, name := range []string{"deepseek-v3", "qwen3", "gpt35turbo", "gpt4o"} {
		tokJSON, cfg := familyFiles(b, name)
		for _, force := range []bool{false, true} {
			tk, err := parse(tokJSON, cfg, force)
			if err != nil {
				b.Fatal(err)
			}
			engine := "hand"
			if force {
				engine = "regexp2"
			}
			b.Run(name+"/"+engine, func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					for _, s := range corpus {
						// Distinct words defeat the word cache less than
						// real traffic does; this times the split and BPE.
						tk.EncodeWith(s, EncodeOptions{ParseSpecial: true})
					}
				}
			})
		}
	}
}
