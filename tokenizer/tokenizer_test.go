package tokenizer

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/tokenizer/jinja"
)

func corpusForTest(t testing.TB) []string {
	t.Helper()
	var corpus []string
	readJSON(t, "testdata/corpus.json", &corpus)
	return corpus
}

// TestTinyMerges checks the merge loop on a hand-built vocabulary whose
// expected ids follow from the merge list (ranks: "a b" 0, "ab c" 1,
// "Ġ a" 2, "b c" 3), once with merges spelled "a b" and once as pairs.
func TestTinyMerges(t *testing.T) {
	cases := []struct {
		text string
		want []int
	}{
		// a b c → (a,b) rank 0 → ab c → (ab,c) rank 1 → abc
		{"abc", []int{8, 5}},
		// b c → rank 3 → bc
		{"bc", []int{8, 7}},
		// a b c b c: (a,b) 0, then (ab,c) 1, then the remaining (b,c) 3
		{"abcbc", []int{8, 5, 7}},
		// " a" is one piece; Ġ a → rank 2 → Ġa
		{" a", []int{8, 6}},
		// " ab": Ġ a b; (a,b) rank 0 beats (Ġ,a) rank 2 → Ġ ab; no merge left
		{" ab", []int{8, 3, 4}},
		// "aa": no merge applies
		{"aa", []int{8, 0, 0}},
		// added tokens: <sep> is matched in the text, <s> is the template's BOS
		{"ab<sep>c", []int{8, 4, 9, 2}},
		{"<s>", []int{8, 8}},
		// a character outside the vocabulary is dropped when there is no
		// unk token, so its neighbours become adjacent and merge
		{"axb", []int{8, 4}},
	}
	for _, dir := range []string{"testdata/tiny-merge-strings", "testdata/tiny-merge-pairs"} {
		tk, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if diff := cmp.Diff(c.want, tk.Encode(c.text, true)); diff != "" {
				t.Errorf("%s: Encode(%q) (-want +got):\n%s", dir, c.text, diff)
			}
		}
		if got := tk.VocabSize(); got != 10 {
			t.Errorf("%s: VocabSize() = %d, want 10", dir, got)
		}
		if got, want := tk.Decode([]int{8, 5, 9, 6, 100, -1}, false), "<s>abc<sep> a"; got != want {
			t.Errorf("%s: Decode = %q, want %q", dir, got, want)
		}
		if got, want := tk.Decode([]int{8, 5, 9, 6}, true), "abc<sep> a"; got != want {
			t.Errorf("%s: Decode skipping special = %q, want %q", dir, got, want)
		}
	}
}

func TestSpecialTokenAccessors(t *testing.T) {
	tk := defaultForTest(t)
	cases := []struct {
		token   string
		id      int
		special bool
	}{
		{"<｜begin▁of▁sentence｜>", 0, true},
		{"<｜end▁of▁sentence｜>", 1, true},
		{"<｜User｜>", 128803, false},
		{"<｜Assistant｜>", 128804, false},
		{"<|EOT|>", 128805, true},
		{"Hello", 19923, false},
	}
	for _, c := range cases {
		id, ok := tk.TokenID(c.token)
		if !ok || id != c.id {
			t.Errorf("TokenID(%q) = %d, %v; want %d", c.token, id, ok, c.id)
		}
		if got := tk.IsSpecial(c.id); got != c.special {
			t.Errorf("IsSpecial(%d) = %v, want %v", c.id, got, c.special)
		}
	}
	if tk.BOS() != 0 || tk.EOS() != 1 {
		t.Errorf("BOS, EOS = %d, %d; want 0, 1 (tokenizer_config.json)", tk.BOS(), tk.EOS())
	}
	// 128000 vocabulary entries and added tokens up to id 128814.
	if got := tk.VocabSize(); got != 128815 {
		t.Errorf("VocabSize() = %d, want 128815", got)
	}
	if _, ok := tk.TokenID("no such token"); ok {
		t.Error("TokenID found a token that does not exist")
	}
}

// TestPlainTextNeverYieldsAddedTokens: without ParseSpecial, control-token
// strings in text are spelled with ordinary pieces.
func TestPlainTextNeverYieldsAddedTokens(t *testing.T) {
	tk := defaultForTest(t)
	for _, s := range corpusForTest(t) {
		for _, id := range tk.Encode(s, false) {
			if _, added := tk.addedByID[id]; added {
				t.Errorf("Encode(%q, false) produced added token %d", s, id)
			}
		}
	}
}

func TestRoundTripCorpus(t *testing.T) {
	tk := defaultForTest(t)
	for _, s := range corpusForTest(t) {
		if got := tk.Decode(tk.Encode(s, false), false); got != s {
			t.Errorf("round trip of %q gave %q", s, got)
		}
		// With special tokens parsed and BOS added, skipping specials on
		// decode drops BOS (and only special tokens).
		if got := tk.Decode(tk.Encode(s, true), false); got != "<｜begin▁of▁sentence｜>"+s {
			t.Errorf("round trip with BOS of %q gave %q", s, got)
		}
	}
}

func FuzzRoundTrip(f *testing.F) {
	tk := defaultForTest(f)
	for _, s := range corpusForTest(f) {
		f.Add(s)
	}
	f.Add("\xff\xfe invalid \xc3")
	f.Fuzz(func(t *testing.T, s string) {
		if got := tk.Decode(tk.Encode(s, false), false); got != s {
			t.Errorf("round trip of %q gave %q", s, got)
		}
		if got := tk.Decode(tk.Encode(s, true), false); got != "<｜begin▁of▁sentence｜>"+s {
			t.Errorf("round trip with special tokens of %q gave %q", s, got)
		}
	})
}

// streamAll feeds ids through a StreamDecoder and returns the pieces.
func streamAll(tk *Tokenizer, ids []int) []string {
	d := tk.NewStreamDecoder()
	var pieces []string
	for _, id := range ids {
		pieces = append(pieces, d.Add(id))
	}
	return append(pieces, d.Flush())
}

// TestStreamDecoder compares the streaming decoder with Decode on id
// sequences that cut characters across tokens: every text is encoded as a
// random mix of its normal tokens and single-byte tokens, so multi-byte
// characters are split at random points.
func TestStreamDecoder(t *testing.T) {
	tk := defaultForTest(t)
	rng := rand.New(rand.NewPCG(1, 2))
	corpus := corpusForTest(t)
	corpus = append(corpus, "<｜end▁of▁sentence｜>tail", "中<|EOT|>文")
	for _, s := range corpus {
		for trial := 0; trial < 4; trial++ {
			ids := mixedIDs(tk, s, rng)
			pieces := streamAll(tk, ids)
			if got, want := strings.Join(pieces, ""), tk.Decode(ids, true); got != want {
				t.Fatalf("stream of %q: joined %q, Decode %q", s, got, want)
			}
			// AppendAdd appends exactly Add's pieces.
			d, buf := tk.NewStreamDecoder(), []byte("prefix")
			for i, id := range ids {
				n := len(buf)
				if buf = d.AppendAdd(buf, id); string(buf[n:]) != pieces[i] {
					t.Fatalf("stream of %q: AppendAdd of token %d appended %q, Add returned %q", s, i, buf[n:], pieces[i])
				}
			}
			if !utf8.ValidString(s) {
				continue
			}
			for i, p := range pieces {
				if !utf8.ValidString(p) {
					t.Errorf("stream of %q: piece %d %q is not valid UTF-8", s, i, p)
				}
			}
		}
	}
}

// mixedIDs encodes s with added tokens parsed, then replaces a random
// subset of the resulting tokens by one single-byte token per byte.
func mixedIDs(tk *Tokenizer, s string, rng *rand.Rand) []int {
	var ids []int
	for _, id := range tk.Encode(s, true) {
		if tk.IsSpecial(id) || rng.IntN(2) == 0 {
			ids = append(ids, id)
			continue
		}
		if _, added := tk.addedByID[id]; added {
			ids = append(ids, id)
			continue
		}
		for _, b := range []byte(tk.Decode([]int{id}, false)) {
			ids = append(ids, int(tk.model.byteSymbols[b]))
		}
	}
	return ids
}

func TestStreamDecoderHoldsIncompleteCharacter(t *testing.T) {
	tk := defaultForTest(t)
	sym := func(b byte) int { return int(tk.model.byteSymbols[b]) }
	// "中" is E4 B8 AD; "😀" is F0 9F 98 80.
	cases := []struct {
		name string
		ids  []int
		want []string
	}{
		{"three-byte character in three tokens", []int{sym(0xE4), sym(0xB8), sym(0xAD)}, []string{"", "", "中", ""}},
		{"four-byte character after ASCII", []int{sym('a'), sym(0xF0), sym(0x9F), sym(0x98), sym(0x80)}, []string{"a", "", "", "", "😀", ""}},
		{"incomplete at the end is flushed", []int{sym('x'), sym(0xE4), sym(0xB8)}, []string{"x", "", "", "\xE4\xB8"}},
		{"broken sequence passes through", []int{sym(0xE4), sym('z')}, []string{"", "\xE4z", ""}},
		{"stray continuation byte passes through", []int{sym(0x80)}, []string{"\x80", ""}},
		{"special token skipped", []int{1, sym('k')}, []string{"", "k", ""}},
	}
	for _, c := range cases {
		if diff := cmp.Diff(c.want, streamAll(tk, c.ids)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestSplitBehaviors checks each Split behavior on the example the
// tokenizers documentation uses for them: "the-final--countdown" split on
// "-".
func TestSplitBehaviors(t *testing.T) {
	cases := []struct {
		behavior splitBehavior
		invert   bool
		want     []string
	}{
		{splitRemoved, false, []string{"the", "final", "countdown"}},
		{splitIsolated, false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{splitMergedWithPrevious, false, []string{"the-", "final-", "-", "countdown"}},
		{splitMergedWithNext, false, []string{"the", "-final", "-", "-countdown"}},
		{splitContiguous, false, []string{"the", "-", "final", "--", "countdown"}},
		// Inverted: the words are the matches and the dashes the gaps.
		{splitRemoved, true, []string{"-", "-", "-"}},
	}
	for _, c := range cases {
		st := splitStage{m: literalMatcher("-"), behavior: c.behavior, invert: c.invert}
		if diff := cmp.Diff(c.want, st.appendPieces(nil, "the-final--countdown")); diff != "" {
			t.Errorf("behavior %d invert %v (-want +got):\n%s", c.behavior, c.invert, diff)
		}
	}
}

// TestSplitMatchersAgainstRegex compares each hand-written matcher with the
// general engine on its own pattern, over the corpus and crafted edge cases.
func TestSplitMatchersAgainstRegex(t *testing.T) {
	inputs := append(corpusForTest(t),
		"  \n  x", " \n\n y", "a \r\n", "x  ", "x \u3000 y", "\u0085 nel", "\ufeff bom", "'s 'S 're 'll 'd 'x",
		" !!\n\n", " ?", "\u0301\u0301a", "1\u0301", "\xff\xfe", " \xff", "a\xe4\xb8", "12\u0663\u0664", "　全角スペース",
		// Case boundaries for the o200k split: upper runs, title case,
		// modifier letters, marks, contractions after either.
		"HTTPServer", "getHTTPResponse's", "ǅemal ǈ", "ʰaʰb", "Aʰ", "ABC'S", "a\u0301B\u0301c", "\u0301ABC", " XMLHttp'LL",
		"iPhone 15 Pro/Max\n/path", "ÉCOLE école", "日本Go語", "x//\n/y")
	for pattern, hand := range handMatchers {
		general, err := compileSplitPattern(pattern, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range inputs {
			if diff := cmp.Diff(general.appendMatches(nil, s), handMatcher(hand).appendMatches(nil, s), cmp.AllowUnexported(span{})); diff != "" {
				t.Errorf("pattern %q on %q (-regexp2 +hand):\n%s", pattern, s, diff)
			}
		}
	}
}

func FuzzSplitMatchers(f *testing.F) {
	for _, s := range corpusForTest(f) {
		f.Add(s)
	}
	for _, s := range []string{"HTTPServer's", "ǅemal ǈ ʰaʰb Aʰ", "a\u0301B\u0301c \u0301ABC", " XMLHttp'LL iPhone/\n/x"} {
		f.Add(s)
	}
	type pair struct{ hand, general matcher }
	var pairs []pair
	for pattern, hand := range handMatchers {
		general, err := compileSplitPattern(pattern, true)
		if err != nil {
			f.Fatal(err)
		}
		pairs = append(pairs, pair{handMatcher(hand), general})
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range pairs {
			if diff := cmp.Diff(p.general.appendMatches(nil, s), p.hand.appendMatches(nil, s), cmp.AllowUnexported(span{})); diff != "" {
				t.Errorf("on %q (-regexp2 +hand):\n%s", s, diff)
			}
		}
	})
}

// TestLoadRefusals checks that malformed or unsupported tokenizer.json
// files are refused with an error naming the problem.
func TestLoadRefusals(t *testing.T) {
	base, err := os.ReadFile("testdata/tiny-merge-strings/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	cases := []struct {
		name, wantErr string
		json          []byte
	}{
		{"not JSON", "parse tokenizer.json", []byte("{")},
		{"no model", `missing "model"`, edit(func(m map[string]any) { delete(m, "model") })},
		{"unigram", `model type "Unigram" is not supported`, edit(func(m map[string]any) { model(m)["type"] = "Unigram" })},
		{"merge of unknown token", `"x" is not in the vocabulary`, edit(func(m map[string]any) { model(m)["merges"] = []any{"x b"} })},
		{"merged token missing", `merged token "ca" is not in the vocabulary`, edit(func(m map[string]any) { model(m)["merges"] = []any{"c a"} })},
		{"merge with three parts", "need two tokens separated by one space", edit(func(m map[string]any) { model(m)["merges"] = []any{"a b c"} })},
		{"merge pair of one", "need a pair of tokens", edit(func(m map[string]any) { model(m)["merges"] = []any{[]any{"a"}} })},
		{"merges not a list", "merges must be a list", edit(func(m map[string]any) { model(m)["merges"] = "a b" })},
		{"duplicate id", "is used by both", edit(func(m map[string]any) { model(m)["vocab"].(map[string]any)["z"] = 0 })},
		{"negative id", "negative id", edit(func(m map[string]any) { model(m)["vocab"].(map[string]any)["z"] = -3 })},
		{"dropout", "dropout 0.1 is not supported", edit(func(m map[string]any) { model(m)["dropout"] = 0.1 })},
		{"byte fallback", "byte_fallback=true is not supported", edit(func(m map[string]any) { model(m)["byte_fallback"] = true })},
		{"unknown unk", `unk_token "<unk>" is not in the vocabulary`, edit(func(m map[string]any) { model(m)["unk_token"] = "<unk>" })},
		{"added token id clash", "already belongs to", edit(func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": 0, "content": "<x>", "special": true}}
		})},
		{"normalizer", `normalizer "Lowercase" is not supported`, edit(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} })},
		{"pre-tokenizer", `pre-tokenizer "Whitespace" is not supported`, edit(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Whitespace"} })},
		{"split behavior", `pre-tokenizer Split: behavior "Sideways" is not supported`, edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"String": "-"}, "behavior": "Sideways"}
		})},
		{"bad regex", "compile split pattern", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(unclosed"}, "behavior": "Isolated"}
		})},
		{"decoder", `decoder "WordPiece" is not supported`, edit(func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} })},
		{"post-processor", `post_processor "BertProcessing" is not supported`, edit(func(m map[string]any) { m["post_processor"] = map[string]any{"type": "BertProcessing"} })},
		{"template token missing", `special token "<bos>" is not in the vocabulary`, edit(func(m map[string]any) {
			m["post_processor"] = map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<bos>"}}}}
		})},
	}
	for _, c := range cases {
		_, err := Parse(c.json, nil)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.wantErr)
		}
	}
	configCases := []struct{ name, config, wantErr string }{
		{"bos not a token", `{"bos_token": "<nope>"}`, `bos_token "<nope>" is not a token`},
		{"add_bos without bos", `{"add_bos_token": true}`, "add_bos_token is true but bos_token is not set"},
		{"bad chat template", `{"chat_template": "{% for x in y %}"}`, "chat_template"},
		{"unsupported statement", `{"chat_template": "{% call m() %}{% endcall %}"}`, "unsupported statement"},
		{"token object without content", `{"bos_token": {"lstrip": false}}`, `no "content"`},
	}
	for _, c := range configCases {
		_, err := Parse(base, []byte(c.config))
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.wantErr)
		}
	}
}

func FuzzLoad(f *testing.F) {
	base, err := os.ReadFile("testdata/tiny-merge-strings/tokenizer.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(base, []byte(`{"add_bos_token": true, "bos_token": "<s>", "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {}, "merges": []}}`), []byte(nil))
	f.Add([]byte(`{"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]}, "added_tokens": [{"id": 3, "content": "<x>", "special": true, "normalized": true}],`+
		`"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\s+|\\w+"}, "behavior": "MergedWithNext", "invert": true}, {"type": "ByteLevel", "use_regex": false}]},`+
		`"post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>"}}, {"Sequence": {"id": "A"}}]}]},`+
		`"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]], "ignore_merges": true}}`),
		[]byte(`{"chat_template": "{% macro m(x) %}{{ x | tojson }}{% endmacro %}{% for m2 in messages %}{{ m(m2) }}{% endfor %}"}`))
	f.Fuzz(func(t *testing.T, tokJSON, cfgJSON []byte) {
		if len(tokJSON) > 1<<14 {
			return
		}
		tk, err := Parse(tokJSON, cfgJSON)
		if err != nil {
			return
		}
		// A tokenizer that loads must encode and decode without panicking,
		// and every id it produces must be a token.
		for _, s := range []string{"abc", " a<sep>b", "\xff", ""} {
			for _, id := range tk.Encode(s, true) {
				if _, ok := tk.Token(id); !ok {
					t.Fatalf("Encode(%q) produced id %d that is not a token", s, id)
				}
			}
			_ = tk.Decode(tk.Encode(s, false), true)
		}
		_, _ = tk.ApplyChatTemplate([]Message{{Role: "user", Content: "x"}}, true)
		_, _ = tk.RenderChat(ChatInput{Messages: []Message{{Role: "user", Content: "x"}, {Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: `{"a": 1}`}}}},
			Limits: jinja.Limits{MaxOutputBytes: 1 << 16, MaxIterations: 1 << 12, MaxDepth: 16}})
		if _, err := tk.EncodeLimited(" a<sep>b a<sep>b", EncodeOptions{AddSpecial: true, ParseSpecial: true}, 3); err != nil && !errors.Is(err, ErrTooManyTokens) {
			t.Fatalf("EncodeLimited: %v", err)
		}
	})
}

func TestForCheckpoint(t *testing.T) {
	own, err := ForCheckpoint("testdata/tiny-merge-pairs")
	if err != nil {
		t.Fatal(err)
	}
	if own.VocabSize() != 10 {
		t.Errorf("a checkpoint directory with tokenizer.json should use it; VocabSize = %d", own.VocabSize())
	}
	fallback, err := ForCheckpoint(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if fallback != defaultForTest(t) {
		t.Error("a directory without tokenizer.json should give the embedded tokenizer")
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("Load of an empty directory succeeded")
	}
}

func BenchmarkEncode(b *testing.B) {
	tk := defaultForTest(b)
	text := strings.Join(corpusForTest(b), "\n")
	for _, mode := range []struct {
		name string
		tk   func() *Tokenizer
	}{
		{"hand", func() *Tokenizer { return tk }},
		{"regexp2", func() *Tokenizer {
			r, err := regexTokenizer()
			if err != nil {
				b.Fatal(err)
			}
			return r
		}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			tk := mode.tk()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tk.Encode(text, true)
			}
			b.ReportMetric(float64(len(text))*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
		})
	}
	b.Run("uncached", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tk.model.cacheMu.Lock()
			clear(tk.model.cache)
			tk.model.cacheMu.Unlock()
			tk.Encode(text, true)
		}
		b.ReportMetric(float64(len(text))*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
	})
}
