package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// streamAll feeds ids through a textStream and returns the released
// pieces, the released token count and whether a stop string ended it.
func streamAll(ts *textStream, ids []int) (pieces []string, ntoks int, stopped bool) {
	for _, id := range ids {
		p, toks, st := ts.add(id, 0)
		pieces = append(pieces, p)
		ntoks += len(toks)
		if st {
			return pieces, ntoks, true
		}
	}
	p, toks, st := ts.finish()
	return append(pieces, p), ntoks + len(toks), st
}

// truncateAtStop is the definition the stream must meet: the decoded text
// up to the earliest stop string.
func truncateAtStop(text string, stops []string) (string, bool) {
	cut, found := len(text), false
	for _, s := range stops {
		if i := strings.Index(text, s); i >= 0 && i < cut {
			cut, found = i, true
		}
	}
	return text[:cut], found
}

func TestTextStream(t *testing.T) {
	tk := testTokenizer(t)
	ids := tk.Encode("ab abc 🙂🙂 x", false)
	text := tk.Decode(ids, true)
	tests := []struct {
		name  string
		stops []string
	}{
		{"no stops", nil},
		{"stop inside a word", []string{"bc"}},
		{"stop at start", []string{"ab"}},
		{"stop never complete", []string{"abd"}},
		{"stop on an emoji split over tokens", []string{"🙂"}},
		{"stop across characters", []string{"🙂 x"}},
		{"stop at the end", []string{" x"}},
		{"longest hold wins", []string{"c 🙂🙂 y", "bc 🙂"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTextStream(tk, tc.stops)
			pieces, ntoks, stopped := streamAll(ts, ids)
			want, wantStop := truncateAtStop(text, tc.stops)
			got := strings.Join(pieces, "")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("released text (-want +got):\n%s", diff)
			}
			if stopped != wantStop {
				t.Errorf("stopped = %v, want %v", stopped, wantStop)
			}
			if !wantStop && ntoks != len(ids) {
				t.Errorf("released %d tokens, want all %d", ntoks, len(ids))
			}
			if ts.output() != got {
				t.Errorf("output() = %q, want the released text %q", ts.output(), got)
			}
		})
	}
}

// TestHeldBack pins the hold-back rule on plain strings.
func TestHeldBack(t *testing.T) {
	tests := []struct {
		text  string
		stops []string
		want  int
	}{
		{"hello wor", []string{"world"}, 3},
		{"hello", []string{"world"}, 0},
		{"aaa", []string{"aab"}, 2},
		{"xab", []string{"abc", "b"}, 2},
		{"x", []string{"x"}, 0}, // a whole stop string is a match, not a hold
		{"", []string{"ab"}, 0},
	}
	for _, tc := range tests {
		if got := heldBack(tc.text, tc.stops); got != tc.want {
			t.Errorf("heldBack(%q, %q) = %d, want %d", tc.text, tc.stops, got, tc.want)
		}
	}
}

// FuzzTextStream checks the stream against its definition for any ids and
// stop strings: the released text is the whole decoded text cut at the
// earliest stop string.
func FuzzTextStream(f *testing.F) {
	tk := testTokenizer(f)
	f.Add([]byte{0x12, 0x34, 0x56, 0x78}, "a")
	f.Add([]byte("🙂 hello world"), "lo w")
	f.Add([]byte{0x73, 0x3a, 0x03, 0x00}, "\xf0")
	f.Fuzz(func(t *testing.T, raw []byte, stop string) {
		var ids []int
		for i := 0; i+1 < len(raw) && len(ids) < 64; i += 2 {
			ids = append(ids, (int(raw[i])<<8|int(raw[i+1]))%tk.VocabSize())
		}
		var stops []string
		if stop != "" {
			stops = []string{stop}
		}
		pieces, _, stopped := streamAll(newTextStream(tk, stops), ids)
		want, wantStop := truncateAtStop(tk.Decode(ids, true), stops)
		if got := strings.Join(pieces, ""); got != want || stopped != wantStop {
			t.Fatalf("ids %v stop %q: released %q (stopped %v), want %q (stopped %v)", ids, stop, got, stopped, want, wantStop)
		}
	})
}

// FuzzRequestParsing feeds arbitrary bodies to both endpoints' parsers:
// each either refuses with a 4xx error or yields a job within the limits.
func FuzzRequestParsing(f *testing.F) {
	tk := testTokenizer(f)
	s, err := New(Config{Engine: newFakeEngine(nil, 1), Tokenizer: tk, ModelName: testModel,
		MaxModelLen: 64, VocabSize: testVocab, MaxInFlight: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"stop":["a"],"max_tokens":3}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"prompt":[[1,2,3]],"logprobs":0,"n":1}`))
	f.Add([]byte(`{"prompt":"hello","stop":"x","temperature":0.5,"top_p":0.9,"seed":-3}`))
	f.Add([]byte(`{"prompt":[1,2],"echo":true,"max_tokens":0,"logprobs":1,"top_k":3,"min_p":0.1,"logit_bias":{"5":100},"min_tokens":1}`))
	f.Add([]byte(`{"prompt":["a","b"],"n":2,"repetition_penalty":1.1,"frequency_penalty":-1,"stop_token_ids":[3],"prompt_logprobs":2}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(j *job, e *apiError) {
			if e != nil {
				if e.status < 400 || e.status > 499 || e.msg == "" {
					t.Fatalf("refusal %d %q is not a client error with a message", e.status, e.msg)
				}
				return
			}
			for _, pj := range j.prompts {
				n := len(pj.ids)
				if n == 0 || n+pj.maxTokens > 64 || (pj.maxTokens < 1 && !j.echo) || len(j.stops) > maxStops || j.n < 1 || j.n > 1 {
					t.Fatalf("accepted a job outside the limits: %d prompt tokens, %d max tokens, %d stops, n %d", n, pj.maxTokens, len(j.stops), j.n)
				}
			}
			if len(j.prompts) == 0 || len(j.prompts)*j.n > 1 {
				t.Fatalf("accepted %d prompts × n %d with room for 1 request", len(j.prompts), j.n)
			}
			if err := j.params.Validate(testVocab); err != nil {
				t.Fatalf("accepted invalid sampling: %v", err)
			}
		}
		var chat ChatRequest
		if json.Unmarshal(body, &chat) == nil {
			check(s.parseChat(&chat))
		}
		var comp CompletionRequest
		if json.Unmarshal(body, &comp) == nil {
			check(s.parseCompletion(&comp))
		}
	})
}

// TestTextStreamMinTokensAndIncludeStop: as vLLM, a stop string counts
// only if it ends in the text of token min_tokens or later, and
// include_stop_str_in_output releases it.
func TestTextStreamMinTokensAndIncludeStop(t *testing.T) {
	tk := testTokenizer(t)
	a, b := tk.Encode("a", false)[0], tk.Encode("b", false)[0]
	ids := []int{a, b, a, b, a}
	for _, tc := range []struct {
		minTokens   int
		includeStop bool
		want        string
	}{
		{0, false, ""},
		{2, false, ""},      // the first "ab" ends in token 2
		{3, false, "ab"},    // it ends before token 3: the second one counts
		{3, true, "abab"},   // and is released with the text
		{5, false, "ababa"}, // no "ab" ends in token 5 or later
	} {
		ts := newTextStream(tk, []string{"ab"})
		ts.minTokens, ts.includeStop = tc.minTokens, tc.includeStop
		pieces, _, _ := streamAll(ts, ids)
		if got := strings.Join(pieces, ""); got != tc.want {
			t.Errorf("min_tokens %d include %v: %q, want %q", tc.minTokens, tc.includeStop, got, tc.want)
		}
	}
}
