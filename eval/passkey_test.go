package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// wordTokens counts a chat prompt's tokens as its words plus three (the
// role markers): monotone in the haystack, like a real tokenizer.
func wordTokens(content string) (int, error) { return len(strings.Fields(content)) + 3, nil }

func TestPasskeyCases(t *testing.T) {
	o := PasskeyOptions{Lengths: []int{64, 200}, Depths: []float64{0, 0.5, 1}, Seed: 7, MaxReplyTokens: 10}
	cases, err := PasskeyCases(o, wordTokens)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := PasskeyCases(o, wordTokens)
	if d := cmp.Diff(cases, again); d != "" {
		t.Fatalf("not deterministic:\n%s", d)
	}
	if len(cases) != 6 {
		t.Fatalf("%d cases, want 6", len(cases))
	}
	keys := map[int]bool{}
	for _, c := range cases {
		n, _ := wordTokens(c.Content)
		switch {
		case n != c.PromptTokens:
			t.Errorf("%+v: prompt tokens %d, counted %d", c, c.PromptTokens, n)
		case n+o.MaxReplyTokens > c.Length:
			t.Errorf("length %d: prompt %d + reply %d does not fit", c.Length, n, o.MaxReplyTokens)
		case n+o.MaxReplyTokens+6 <= c.Length:
			t.Errorf("length %d: prompt %d + reply %d leaves room for another sentence", c.Length, n, o.MaxReplyTokens)
		case c.Key < 10000 || c.Key > 99999:
			t.Errorf("key %d is not five digits", c.Key)
		case !strings.HasSuffix(c.Content, "\n"+PasskeyQuestion):
			t.Errorf("content does not end with the question: %q", c.Content)
		}
		keys[c.Key] = true
		hay := strings.TrimSuffix(c.Content, "\n"+PasskeyQuestion)
		before, _, ok := strings.Cut(hay, Needle(c.Key))
		if !ok {
			t.Fatalf("no needle in %q", hay)
		}
		if got, want := strings.Count(before, "."), int(math.RoundToEven(c.Depth*float64(c.Sentences))); got != want {
			t.Errorf("depth %v of %d sentences: needle after %d sentences, want %d", c.Depth, c.Sentences, got, want)
		}
	}
	if len(keys) < 5 {
		t.Errorf("only %d distinct keys over 6 cases", len(keys))
	}
	for _, bad := range []PasskeyOptions{
		{Lengths: []int{64}, Depths: []float64{1.5}, MaxReplyTokens: 10},
		{Lengths: []int{64}, Depths: []float64{-0.1}, MaxReplyTokens: 10},
		{Lengths: []int{12}, Depths: []float64{0}, MaxReplyTokens: 10},
		{Lengths: []int{64}, Depths: []float64{0}},
		{Lengths: nil, Depths: []float64{0}, MaxReplyTokens: 10},
	} {
		if _, err := PasskeyCases(bad, wordTokens); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// Python's round (half to even), as the task's generator places the needle.
func TestHaystackRoundsHalfToEven(t *testing.T) {
	s := []string{"A.", "B.", "C.", "D.", "E."}
	for _, tc := range []struct {
		depth float64
		n     int
		want  int
	}{{0.5, 5, 2}, {0.5, 3, 2}, {0.5, 1, 0}, {0.25, 2, 0}, {0.75, 2, 2}, {1, 5, 5}, {0, 5, 0}} {
		hay := Haystack(s[:tc.n], tc.depth, 12345)
		before, _, _ := strings.Cut(hay, "The pass key")
		if got := strings.Count(before, "."); got != tc.want {
			t.Errorf("depth %v of %d: needle after %d sentences, want %d (%q)", tc.depth, tc.n, got, tc.want, hay)
		}
	}
}

// RunPasskey sends one user message per case, and a reply is correct only
// when it holds the case's key; a prompt the server counted otherwise than
// the case is named.
func TestRunPasskey(t *testing.T) {
	cases, err := PasskeyCases(PasskeyOptions{Lengths: []int{80}, Depths: []float64{0, 0.5, 1}, Seed: 1, MaxReplyTokens: 12}, wordTokens)
	if err != nil {
		t.Fatal(err)
	}
	keyRE := regexp.MustCompile(`The pass key is (\d{5})\.`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages    []struct{ Role, Content string }
			MaxTokens   int     `json:"max_tokens"`
			Temperature float64 `json:"temperature"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/chat/completions" || len(req.Messages) != 1 || req.Messages[0].Role != "user" || req.MaxTokens != 12 {
			http.Error(w, "bad request", 400)
			return
		}
		key, _ := strconv.Atoi(keyRE.FindStringSubmatch(req.Messages[0].Content)[1])
		n, _ := wordTokens(req.Messages[0].Content)
		if key%2 == 0 {
			key++ // a wrong key
		}
		if key%3 == 0 {
			n++ // a miscount
		}
		reply, _ := json.Marshal(fmt.Sprintf("The pass key is %d.", key))
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":8}}`, reply, n)
	}))
	defer srv.Close()
	got := RunPasskey(context.Background(), srv.Client(), srv.URL, "m", cases, 12, 2)
	for i, r := range got {
		k := cases[i].Key
		if want := k%2 != 0; r.Correct != want {
			t.Errorf("case %d key %d reply %q: correct %v, want %v", i, k, r.Text, r.Correct, want)
		}
		wrongKey := k
		if k%2 == 0 {
			wrongKey++
		}
		if miscounted := wrongKey%3 == 0; miscounted != (r.Problem != "") {
			t.Errorf("case %d: problem %q, miscounted %v", i, r.Problem, miscounted)
		}
	}
}
