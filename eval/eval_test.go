package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPromptsDeterministicAndBounded(t *testing.T) {
	o := PromptOptions{NumPrompts: 20, Seed: 3, MinLen: 4, MaxLen: 9, VocabSize: 100, FirstTokenID: 10}
	a, err := Prompts(o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Prompts(o)
	if d := cmp.Diff(a, b); d != "" {
		t.Fatal(d)
	}
	for _, p := range a {
		if len(p) < 4 || len(p) > 9 {
			t.Errorf("length %d outside [4, 9]", len(p))
		}
		for _, id := range p {
			if id < 10 || id >= 100 {
				t.Errorf("id %d outside [10, 100)", id)
			}
		}
	}
	if _, err := Prompts(PromptOptions{NumPrompts: 1, MinLen: 5, MaxLen: 4, VocabSize: 10}); err == nil {
		t.Error("min len above max len accepted")
	}
}

func TestScore(t *testing.T) {
	ref := []Completion{{OK: true, Text: "a"}, {OK: true, Text: "b"}, {OK: true, Text: "c"}, {Reason: "down"}}
	got := []Completion{{OK: true, Text: "a"}, {OK: true, Text: "x"}, {Reason: "HTTP 500"}, {OK: true, Text: "d"}}
	o := Score("tp2", got, ref)
	want := Outcome{Config: "tp2", Completed: 3, Total: 4, InvalidRate: 0.25, Agreement: 0.25, Agreed: 1}
	o.Problems = nil
	if d := cmp.Diff(want, o); d != "" {
		t.Error(d)
	}
}

// A fake OpenAI server: well-formed answers, one malformed body, one error.
func TestCollectClassifiesResponses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req completionRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Temperature != 0 || !req.IgnoreEOS {
			http.Error(w, "bad request", 400)
			return
		}
		switch req.Prompt[0] {
		case 1:
			w.Write([]byte(`{"choices":[{"text":"x"}]`))
		case 2:
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusTooManyRequests)
		case 3:
			fmt.Fprintf(w, `{"choices":[{"text":"short","finish_reason":"stop"}],"usage":{"completion_tokens":%d}}`, req.MaxTokens-1)
		default:
			fmt.Fprintf(w, `{"choices":[{"text":"t%d","finish_reason":"length"}],"usage":{"completion_tokens":%d}}`, req.Prompt[0], req.MaxTokens)
		}
	}))
	defer srv.Close()
	got := Collect(context.Background(), srv.Client(), srv.URL, "m", [][]int{{0}, {1}, {2}, {3}, {4}}, 5, 2)
	ok := []bool{true, false, false, false, true}
	for i, c := range got {
		if c.OK != ok[i] {
			t.Errorf("prompt %d: OK %v (%s), want %v", i, c.OK, c.Reason, ok[i])
		}
	}
	if got[4].Text != "t4" {
		t.Errorf("text %q", got[4].Text)
	}
}
