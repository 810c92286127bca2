package eval

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
)

// filler are the haystack's sentences, those of cpmla-tiny's passkey task.
var filler = []string{
	"The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
	"There and back again.", "The river runs to the sea.", "Birds sing in the morning.",
	"The road is long and quiet.", "Snow falls on the hills.", "A cat sleeps by the door.",
	"The wind moves the trees.", "Rain comes after the clouds.", "The night is dark and calm.",
	"Boats rest in the harbor.", "The bread is warm.", "Leaves turn red in the fall.",
}

// PasskeyQuestion ends every passkey prompt.
const PasskeyQuestion = "What is the pass key?"

// Needle is the sentence that hides key in the haystack.
func Needle(key int) string {
	return fmt.Sprintf("The pass key is %d. Remember it. %d is the pass key.", key, key)
}

// Haystack joins sentences with single spaces and inserts the needle of key
// after round(depth × len(sentences)) of them (Python's round, half to even,
// as the task's generator rounds).
func Haystack(sentences []string, depth float64, key int) string {
	at := int(math.RoundToEven(depth * float64(len(sentences))))
	parts := make([]string, 0, len(sentences)+1)
	parts = append(parts, sentences[:at]...)
	parts = append(parts, Needle(key))
	parts = append(parts, sentences[at:]...)
	return strings.Join(parts, " ")
}

// PasskeyContent is the user message of a passkey chat: the haystack, a
// newline and the question.
func PasskeyContent(haystack string) string { return haystack + "\n" + PasskeyQuestion }

// PasskeyOptions choose the passkey cases.
type PasskeyOptions struct {
	Lengths        []int     // context lengths in tokens: the prompt plus MaxReplyTokens fit in each
	Depths         []float64 // needle depths in [0, 1]
	Seed           uint64    // draws the keys and the filler
	MaxReplyTokens int       // max_tokens of each request
}

// MaxPasskeyCases bounds the cases of one run (lengths × depths).
const MaxPasskeyCases = 1 << 10

// PasskeyCase is one haystack.
type PasskeyCase struct {
	Length       int     `json:"length"`
	Depth        float64 `json:"depth"`
	Key          int     `json:"key"`
	Sentences    int     `json:"sentences"`
	PromptTokens int     `json:"prompt_tokens"` // of the rendered chat, as measured here
	Content      string  `json:"-"`
}

// PasskeyCases builds one case per length and depth: a five-digit key and
// as many filler sentences as fit, so that the chat prompt (promptTokens
// counts the tokens of the rendered chat whose user message is its
// argument) plus MaxReplyTokens is at most the length. The cases are the
// same for every call with the same options and token counter.
func PasskeyCases(o PasskeyOptions, promptTokens func(content string) (int, error)) ([]PasskeyCase, error) {
	switch {
	case len(o.Lengths) == 0 || len(o.Depths) == 0:
		return nil, fmt.Errorf("passkey: give at least one length and one depth")
	case len(o.Lengths)*len(o.Depths) > MaxPasskeyCases:
		return nil, fmt.Errorf("passkey: %d lengths × %d depths is more than %d cases", len(o.Lengths), len(o.Depths), MaxPasskeyCases)
	case o.MaxReplyTokens < 1:
		return nil, fmt.Errorf("passkey: max reply tokens %d must be at least 1", o.MaxReplyTokens)
	}
	for _, d := range o.Depths {
		if !(d >= 0 && d <= 1) {
			return nil, fmt.Errorf("passkey: depth %v is outside [0, 1]", d)
		}
	}
	var out []PasskeyCase
	for li, length := range o.Lengths {
		budget := length - o.MaxReplyTokens
		if budget < 1 {
			return nil, fmt.Errorf("passkey: length %d leaves no room for a prompt beside %d reply tokens", length, o.MaxReplyTokens)
		}
		for di, depth := range o.Depths {
			rng := rand.New(rand.NewPCG(o.Seed, uint64(li)<<32|uint64(di)))
			key := 10000 + rng.IntN(90000)
			// Every filler sentence is at least one token: budget sentences
			// always overshoot.
			pool := make([]string, budget)
			for i := range pool {
				pool[i] = filler[rng.IntN(len(filler))]
			}
			count := func(n int) (int, error) { return promptTokens(PasskeyContent(Haystack(pool[:n], depth, key))) }
			base, err := count(0)
			if err != nil {
				return nil, err
			}
			if base > budget {
				return nil, fmt.Errorf("passkey: length %d: the needle and question alone take %d prompt tokens, more than the %d left beside %d reply tokens; use a longer length", length, base, budget, o.MaxReplyTokens)
			}
			// The largest n whose prompt fits (token counts grow with n).
			lo, hi := 0, budget // count(lo) fits; count(hi+1) does not
			for lo < hi {
				mid := lo + (hi-lo+1)/2
				n, err := count(mid)
				if err != nil {
					return nil, err
				}
				if n <= budget {
					lo = mid
				} else {
					hi = mid - 1
				}
			}
			content := PasskeyContent(Haystack(pool[:lo], depth, key))
			n, err := promptTokens(content)
			if err != nil {
				return nil, err
			}
			out = append(out, PasskeyCase{Length: length, Depth: depth, Key: key, Sentences: lo, PromptTokens: n, Content: content})
		}
	}
	return out, nil
}

// PasskeyResult is one case's outcome.
type PasskeyResult struct {
	Reply
	Case    PasskeyCase `json:"case"`
	Correct bool        `json:"correct"`
}

// ScorePasskey: a reply is correct when it contains the key.
func ScorePasskey(c PasskeyCase, r Reply) PasskeyResult {
	return PasskeyResult{Reply: r, Case: c, Correct: r.OK && strings.Contains(r.Text, strconv.Itoa(c.Key))}
}

// RunPasskey sends every case to baseURL's /v1/chat/completions as one user
// message (greedy, max_tokens MaxReplyTokens, seed 1234) and scores the
// replies, in case order. A reply whose prompt the server counted otherwise
// than the case is marked in its Problem.
func RunPasskey(ctx context.Context, client *http.Client, baseURL, model string, cases []PasskeyCase, maxReplyTokens, concurrency int) []PasskeyResult {
	out := make([]PasskeyResult, len(cases))
	forEach(len(cases), concurrency, func(i int) {
		c := cases[i]
		r := completeChat(ctx, client, baseURL, chatRequest{Model: model, Messages: []chatMessage{{Role: "user", Content: c.Content}},
			MaxTokens: maxReplyTokens, Temperature: 0, Seed: Seed})
		if r.OK && r.PromptTokens != c.PromptTokens {
			r.Problem = fmt.Sprintf("the server counted %d prompt tokens, the case %d", r.PromptTokens, c.PromptTokens)
		}
		out[i] = ScorePasskey(c, r)
	})
	return out
}
