package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// gsm8k's filters and exact_match as lm-eval applies them (task version 3).
func TestGSM8KFilters(t *testing.T) {
	for _, tc := range []struct {
		response, ref        string
		strict, flexible     string
		strictOK, flexibleOK bool
	}{
		{" 47 + 25 = 72.\n#### 72", "72", "72", "72", true, true},
		{" 47 + 25 = 71.\n#### 71", "72", "71", "71", false, false},          // a wrong answer is scored wrong
		{" 47 + 25 = 72.", "72", invalidAnswer, "72.", false, true},          // no "####": only the flexible filter finds it; "\.$" is ignored
		{"#### 1,234", "1234", "1,234", "1,234", true, true},                 // "," is ignored
		{"It costs $18.\n", "18", invalidAnswer, "$18.", false, true},        // "$" ignored, and "." before a final newline (Python's $)
		{"#### -3 apples, 4 left", "-3", "-3", "4", true, false},             // strict takes the first ####, flexible the last number
		{"#### 5\n#### 6", "5", "5", "6", true, false},                       // take_first after the regex: the first match
		{"nothing here", "1", invalidAnswer, invalidAnswer, false, false},    // no number at all
		{"9", "9", invalidAnswer, "9", false, true},                          // a lone digit is the second alternative
		{"#### 72.5", "72", "72.5", "72.5", false, false},                    // not an integer match
		{" 10 - 10 = 0.\n#### 0", "0", "0", "0", true, true},                 // zero
		{"#### 12<|endoftext|>", "12", "12", "12", true, true},               // a special token's text after the answer
		{" 3 + 4 = 7.\n#### 7\n\nQuestion: next", "7", "7", "7", true, true}, // text after a blank line (no "\n\n" stop in version 3)
	} {
		r := ScoreArithmetic(Problem{Question: "q", Answer: mustAtoi(t, tc.ref)}, Reply{OK: true, Text: tc.response})
		got := []any{r.Strict, r.Flexible, r.StrictOK, r.FlexibleOK}
		want := []any{tc.strict, tc.flexible, tc.strictOK, tc.flexibleOK}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%q against %s (-want +got):\n%s", tc.response, tc.ref, d)
		}
	}
	if r := ScoreArithmetic(Problem{Answer: 1}, Reply{Problem: "HTTP 500", Text: "#### 1"}); r.StrictOK || r.FlexibleOK {
		t.Errorf("a failed request scored correct: %+v", r)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestHeldoutProblems(t *testing.T) {
	ps, err := HeldoutProblems()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 500 {
		t.Fatalf("%d held-out problems, want 500", len(ps))
	}
	seen := map[string]bool{}
	for i, p := range ps {
		if seen[p.Question] {
			t.Errorf("problem %d repeats %q", i, p.Question)
		}
		seen[p.Question] = true
		if got, err := solve(p.Question); err != nil || got != p.Answer {
			t.Errorf("problem %d %q: solved %d (%v), file says %d", i, p.Question, got, err, p.Answer)
		}
	}
}

var numberRE = regexp.MustCompile(`\d+`)

// solve computes a held-out question's answer from its numbers: the first
// sentence says how many there are, each later one adds ("more") or takes
// away.
func solve(q string) (int, error) {
	sentences := strings.Split(q, ". ")
	if len(sentences) < 3 {
		return 0, fmt.Errorf("%d sentences", len(sentences))
	}
	v := 0
	for i, s := range sentences[:len(sentences)-1] {
		n, err := strconv.Atoi(numberRE.FindString(s))
		if err != nil {
			return 0, err
		}
		switch {
		case i == 0:
			v = n
		case strings.Contains(s, " more "):
			v += n
		default:
			v -= n
		}
	}
	return v, nil
}

func TestParseProblemsRefusals(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"question":"q","answer":1,"extra":2}`, `unknown field "extra"`},
		{`{"question":"q"}`, `an integer "answer"`},
		{`{"question":"","answer":1}`, `non-empty "question"`},
		{`{"question":"q","answer":1.5}`, "line 1"},
		{`{"question":"q","answer":1}` + "\n" + `[]`, "line 2"},
		{`{"question":"` + strings.Repeat("x", MaxProblemBytes) + `","answer":1}`, "at most 4096 bytes"},
		{"\n\n", "no problem"},
	} {
		if _, err := ParseProblems([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60q: %v, want %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParseProblems(f *testing.F) {
	f.Add([]byte(`{"question":"q","answer":1}` + "\n"))
	f.Add([]byte(`{"question":"q","answer":-1}{"x":1}`))
	f.Add([]byte("\n\n{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := ParseProblems(data)
		if err != nil {
			return
		}
		if len(ps) == 0 || len(ps) > MaxProblems {
			t.Errorf("%d problems", len(ps))
		}
		for _, p := range ps {
			if p.Question == "" || len(p.Question) > MaxProblemBytes {
				t.Errorf("question of %d bytes", len(p.Question))
			}
		}
	})
}

func FuzzGSM8KFilters(f *testing.F) {
	for _, s := range []string{" 1 + 2 = 3.\n#### 3", "#### ,,,", "$$$", "-", "#### -.", "1,2.3,4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, v := range []string{StrictMatch(s), FlexibleExtract(s)} {
			if v != invalidAnswer && !strings.Contains(s, v) {
				t.Errorf("%q: filtered %q is not part of the response", s, v)
			}
		}
		if ExactMatch(s, s) != true {
			t.Errorf("%q does not match itself", s)
		}
	})
}

// RunArithmetic sends what lm-eval's gsm8k task sends through
// local-completions, and scores what comes back: a fake server answers
// each question right or wrong (from its own numbers) and the score counts
// exactly the right ones.
func TestRunArithmeticRequests(t *testing.T) {
	ps, err := HeldoutProblems()
	if err != nil {
		t.Fatal(err)
	}
	ps = ps[:12]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/completions" {
			http.Error(w, "bad request", 400)
			return
		}
		want := map[string]any{"model": "m", "max_tokens": 256.0, "temperature": 0.0, "seed": 1234.0,
			"stop": []any{"Question:", "</s>", "<|im_end|>", "<|endoftext|>"}}
		prompt, _ := req["prompt"].(string)
		delete(req, "prompt")
		if d := cmp.Diff(want, req); d != "" {
			http.Error(w, d, 400)
			return
		}
		q, ok := strings.CutPrefix(prompt, "Question: ")
		q, ok2 := strings.CutSuffix(q, "\nAnswer:")
		v, err := solve(q)
		if !ok || !ok2 || err != nil {
			http.Error(w, "not a gsm8k prompt: "+prompt, 400)
			return
		}
		if len(q)%3 == 0 { // wrong for some
			v++
		}
		fmt.Fprintf(w, `{"choices":[{"text":" working.\n#### %d","finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":9}}`, v)
	}))
	defer srv.Close()
	got, err := RunArithmetic(context.Background(), srv.Client(), srv.URL, ps, ArithmeticOptions{Model: "m", MaxGenToks: GSM8KMaxGenToks, EOS: "<|endoftext|>", Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if !r.OK {
			t.Fatalf("problem %d: %s", i, r.Problem)
		}
		if want := len(ps[i].Question)%3 != 0; r.StrictOK != want || r.FlexibleOK != want {
			t.Errorf("problem %d %q: scored %v/%v for %q, want %v", i, ps[i].Question, r.StrictOK, r.FlexibleOK, r.Text, want)
		}
	}
	if _, err := RunArithmetic(context.Background(), srv.Client(), srv.URL, ps, ArithmeticOptions{Model: "m"}); err == nil {
		t.Error("max_gen_toks 0 accepted")
	}
}
