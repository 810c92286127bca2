package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/tokenizer"
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
			ts := newTextStream(tk, tc.stops, false)
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
		pieces, _, stopped := streamAll(newTextStream(tk, stops, false), ids)
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
		ts := newTextStream(tk, []string{"ab"}, false)
		ts.minTokens, ts.includeStop = tc.minTokens, tc.includeStop
		pieces, _, _ := streamAll(ts, ids)
		if got := strings.Join(pieces, ""); got != tc.want {
			t.Errorf("min_tokens %d include %v: %q, want %q", tc.minTokens, tc.includeStop, got, tc.want)
		}
	}
}

// firstStops returns the index of the token at which a textStream stops
// (during add, not at finish) and the one at which a stopMatcher with the
// same settings ends the sequence; -1 when none does.
func firstStops(tk *tokenizer.Tokenizer, ids []int, stops []string, keepSpecial bool, minTokens int) (stream, matcher int) {
	ts := newTextStream(tk, stops, keepSpecial)
	ts.minTokens = minTokens
	m := newStopMatchers(tk, stops, keepSpecial, minTokens).NewStopMatcher()
	stream, matcher = -1, -1
	for i, id := range ids {
		if _, _, stopped := ts.add(id, 0); stopped && stream < 0 {
			stream = i
		}
		if m.Ends(id) && matcher < 0 {
			matcher = i
		}
		if stream >= 0 && matcher >= 0 {
			break
		}
		if stream >= 0 { // the stream must not be fed past its stop
			ts = newTextStream(tk, nil, false)
		}
	}
	return stream, matcher
}

// TestStopMatcherEndsWhereTheTextStreamStops pins the engine-side stop
// matcher to the response's text stream on stops inside and across tokens,
// across split characters and under min_tokens.
func TestStopMatcherEndsWhereTheTextStreamStops(t *testing.T) {
	tk := testTokenizer(t)
	ids := tk.Encode("ab abc 🙂🙂 x ab", false)
	a, b := tk.Encode("a", false)[0], tk.Encode("b", false)[0]
	tests := []struct {
		name      string
		ids       []int
		stops     []string
		minTokens int
		want      int // token index, -1: none
	}{
		{"none", ids, []string{"zz"}, 0, -1},
		{"inside a word", ids, []string{"bc"}, 0, -2},
		{"across characters", ids, []string{"🙂 x"}, 0, -2},
		{"earliest of two", ids, []string{" x", "🙂"}, 0, -2},
		{"min_tokens skips the first", []int{a, b, a, b, a}, []string{"ab"}, 3, 3},
		{"min_tokens at the match", []int{a, b, a, b, a}, []string{"ab"}, 2, 1},
		{"min_tokens past every match", []int{a, b, a, b, a}, []string{"ab"}, 5, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stream, matcher := firstStops(tk, tc.ids, tc.stops, false, tc.minTokens)
			if stream != matcher {
				t.Errorf("the text stream stops at token %d, the matcher at %d", stream, matcher)
			}
			if tc.want != -2 && matcher != tc.want {
				t.Errorf("the matcher stops at token %d, want %d", matcher, tc.want)
			}
			if tc.want == -2 && matcher < 0 {
				t.Errorf("no stop found")
			}
		})
	}
}

// FuzzStopMatcher holds the stop matcher to the text stream for any ids,
// stop strings, decoder and min_tokens.
func FuzzStopMatcher(f *testing.F) {
	tk := testTokenizer(f)
	f.Add([]byte("🙂 hello world"), "lo w", "", false, uint8(0))
	f.Add([]byte{0x12, 0x34, 0x56, 0x78}, "a", "\xf0", true, uint8(2))
	f.Add([]byte("abababab"), "ab", "ba", false, uint8(3))
	f.Fuzz(func(t *testing.T, raw []byte, stop1, stop2 string, keepSpecial bool, minTokens uint8) {
		var ids []int
		for i := 0; i+1 < len(raw) && len(ids) < 64; i += 2 {
			ids = append(ids, (int(raw[i])<<8|int(raw[i+1]))%tk.VocabSize())
		}
		var stops []string
		for _, s := range []string{stop1, stop2} {
			if s != "" {
				stops = append(stops, s)
			}
		}
		if stream, matcher := firstStops(tk, ids, stops, keepSpecial, int(minTokens%8)); stream != matcher {
			t.Fatalf("ids %v stops %q keepSpecial %v min_tokens %d: the text stream stops at token %d, the matcher at %d",
				ids, stops, keepSpecial, minTokens%8, stream, matcher)
		}
	})
}

// TestStopMatcherAllocatesNothing: once its buffer holds the longest token,
// the matcher runs on the engine's decode path without allocating.
func TestStopMatcherAllocatesNothing(t *testing.T) {
	tk := testTokenizer(t)
	ids := tk.Encode("the quick brown fox jumps over the lazy dog 🙂 again and again", false)
	m := newStopMatchers(tk, []string{"Question:", "never"}, false, 0).NewStopMatcher()
	for _, id := range ids {
		m.Ends(id)
	}
	i := 0
	if n := testing.AllocsPerRun(200, func() {
		m.Ends(ids[i%len(ids)])
		i++
	}); n != 0 {
		t.Errorf("Ends allocates %.1f times per token", n)
	}
}
