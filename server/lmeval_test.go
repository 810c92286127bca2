package server

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/tokenizer"
)

// postJSON posts body to path and decodes the 200 answer into out.
func (r *realEnv) postJSON(t *testing.T, path string, body any, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.hc.Post(r.url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d: %s", path, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %v in %s", path, err, raw)
	}
}

// lmevalChoice is a completion choice as lm-eval reads it (untyped JSON, so
// that nulls stay nulls).
type lmevalChoice struct {
	Index    int    `json:"index"`
	Text     string `json:"text"`
	Logprobs struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []*float64           `json:"token_logprobs"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	} `json:"logprobs"`
	PromptLogprobs []map[string]PromptLogprob `json:"prompt_logprobs"`
}

type lmevalResponse struct {
	Choices []lmevalChoice `json:"choices"`
}

// parseLogprobs is lm-eval's local-completions parse_logprobs: the sum of
// token_logprobs[ctxlen:-1] and whether each of them is the maximum of its
// top_logprobs.
func parseLogprobs(t *testing.T, out lmevalResponse, ctxlens []int) (sums []float64, greedy []bool) {
	t.Helper()
	choices := slices.Clone(out.Choices)
	slices.SortFunc(choices, func(a, b lmevalChoice) int { return a.Index - b.Index })
	for i, c := range choices {
		ctx := ctxlens[i]
		lps, tops := c.Logprobs.TokenLogprobs[ctx:len(c.Logprobs.TokenLogprobs)-1], c.Logprobs.TopLogprobs[ctx:len(c.Logprobs.TopLogprobs)-1]
		sum, isGreedy := 0.0, true
		for k, lp := range lps {
			if lp == nil {
				t.Fatalf("choice %d: token_logprobs[%d] is null", i, ctx+k)
			}
			sum += *lp
			best := math.Inf(-1)
			for _, v := range tops[k] {
				best = max(best, v)
			}
			if *lp != best {
				isGreedy = false
			}
		}
		sums, greedy = append(sums, sum), append(greedy, isGreedy)
	}
	return sums, greedy
}

// TestLMEvalPayloads replays lm-eval's local-completions requests (the
// loglikelihood payload with token-id prompts, one and batched, the
// generation payload, the remote tokenizer's endpoints) and reads the
// answers the way lm-eval does; the scores must be the engine's own.
func TestLMEvalPayloads(t *testing.T) {
	r := newRealEnv(t)
	tk := testTokenizer(t)
	// Contexts and continuations as lm-eval builds them: the request's
	// prompt is context + continuation, ctxlen the context's length.
	type pair struct{ ctx, cont []int }
	pairs := []pair{
		{tk.Encode("Question: what is two plus two?\nAnswer:", true), tk.Encode(" four", false)},
		{tk.Encode("The capital of France is", true), tk.Encode(" Paris, of course", false)},
	}
	reference := func(ids []int) []engine.PromptLogprob {
		return r.run(t, engine.Request{PromptIDs: ids, MaxTokens: 0, ScorePrompt: true}).prompt
	}
	check := func(t *testing.T, out lmevalResponse, ps []pair) {
		t.Helper()
		ctxlens := make([]int, len(ps))
		for i, p := range ps {
			ctxlens[i] = len(p.ctx)
		}
		sums, greedy := parseLogprobs(t, out, ctxlens)
		for i, p := range ps {
			ids := append(slices.Clone(p.ctx), p.cont...)
			c := out.Choices[i]
			if len(c.Logprobs.Tokens) != len(ids)+1 || c.Logprobs.TokenLogprobs[0] != nil || c.Logprobs.TopLogprobs[0] != nil {
				t.Fatalf("prompt %d: %d tokens (want %d prompt + 1 generated), first logprob %v", i, len(c.Logprobs.Tokens), len(ids), c.Logprobs.TokenLogprobs[0])
			}
			ref := reference(ids)
			want, wantGreedy := 0.0, true
			for pos := len(p.ctx); pos < len(ids); pos++ {
				want += ref[pos].Logprob
				wantGreedy = wantGreedy && ref[pos].Rank == 1
			}
			if d := cmp.Diff(want, sums[i], cmpopts.EquateApprox(0, 1e-9)); d != "" {
				t.Errorf("prompt %d: continuation logprob (-engine +lm-eval's reading): %s", i, d)
			}
			if greedy[i] != wantGreedy {
				t.Errorf("prompt %d: is_greedy %v, the engine's ranks say %v", i, greedy[i], wantGreedy)
			}
			if want := tk.Decode(ids, false); len(c.Text) < len(want) || c.Text[:len(want)] != want {
				t.Errorf("prompt %d: text %q does not start with the echoed prompt %q", i, c.Text, want)
			}
		}
	}
	payload := func(prompt any) map[string]any {
		return map[string]any{"model": config.DefaultPreset, "prompt": prompt, "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": true}
	}
	t.Run("loglikelihood, one prompt", func(t *testing.T) {
		var out lmevalResponse
		r.postJSON(t, "/v1/completions", payload([][]int{append(slices.Clone(pairs[0].ctx), pairs[0].cont...)}), &out)
		check(t, out, pairs[:1])
	})
	t.Run("loglikelihood, batched", func(t *testing.T) {
		var batch [][]int
		for _, p := range pairs {
			batch = append(batch, append(slices.Clone(p.ctx), p.cont...))
		}
		var out lmevalResponse
		r.postJSON(t, "/v1/completions", payload(batch), &out)
		check(t, out, pairs)
	})
	t.Run("loglikelihood, text prompt", func(t *testing.T) {
		text := "The capital of France is Paris, of course"
		ids := tk.Encode(text, true)
		var out lmevalResponse
		r.postJSON(t, "/v1/completions", payload(text), &out)
		if got := len(out.Choices[0].Logprobs.Tokens); got != len(ids)+1 {
			t.Fatalf("%d tokens, want %d + 1", got, len(ids))
		}
		if want := text; out.Choices[0].Text[:len(want)] != want {
			t.Errorf("echoed text %q does not start with the prompt", out.Choices[0].Text)
		}
	})
	t.Run("echo with max_tokens 0 and prompt_logprobs", func(t *testing.T) {
		ids := append(slices.Clone(pairs[1].ctx), pairs[1].cont...)
		var out lmevalResponse
		r.postJSON(t, "/v1/completions", map[string]any{"prompt": ids, "max_tokens": 0, "echo": true, "logprobs": 2, "prompt_logprobs": 2}, &out)
		c := out.Choices[0]
		ref := reference(ids)
		if len(c.Logprobs.Tokens) != len(ids) || c.Text != tk.Decode(ids, false) {
			t.Fatalf("%d tokens for a %d-token prompt, text %q", len(c.Logprobs.Tokens), len(ids), c.Text)
		}
		if c.PromptLogprobs[0] != nil || len(c.PromptLogprobs) != len(ids) {
			t.Fatalf("prompt_logprobs %v", c.PromptLogprobs)
		}
		for pos := 1; pos < len(ids); pos++ {
			if d := cmp.Diff(ref[pos].Logprob, *c.Logprobs.TokenLogprobs[pos], cmpopts.EquateApprox(0, 1e-12)); d != "" {
				t.Errorf("position %d token_logprobs: %s", pos, d)
			}
			got := c.PromptLogprobs[pos][strconv.Itoa(ids[pos])]
			if got.Rank != ref[pos].Rank || math.Abs(got.Logprob-ref[pos].Logprob) > 1e-12 || got.DecodedToken != tk.Decode(ids[pos:pos+1], false) {
				t.Errorf("position %d prompt_logprobs entry %+v, engine %+v", pos, got, ref[pos])
			}
			for k, a := range ref[pos].Top {
				e, ok := c.PromptLogprobs[pos][strconv.Itoa(int(a.Token))]
				if !ok || (e.Rank != k+1 && int(a.Token) != ids[pos]) {
					t.Errorf("position %d: alternative %d (%d) missing or ranked %d", pos, k, a.Token, e.Rank)
				}
			}
			if n := len(c.Logprobs.TopLogprobs[pos]); n < 2 || n > 3 {
				t.Errorf("position %d: %d top_logprobs entries for logprobs 2", pos, n)
			}
		}
	})
	t.Run("generation", func(t *testing.T) {
		ids := tk.Encode("Question: name a colour.\nAnswer:", true)
		greedy := r.run(t, engine.Request{PromptIDs: ids, MaxTokens: 12, Sampling: greedyParams, StopTokenIDs: r.cfg.EOSTokenIDs}).toks[0]
		var out lmevalResponse
		r.postJSON(t, "/v1/completions", map[string]any{"prompt": [][]int{ids}, "model": config.DefaultPreset, "max_tokens": 12,
			"temperature": 0, "stop": []string{"\n\n", "Question:"}, "seed": 1234}, &out)
		want, _ := truncateAtStop(tk.Decode(greedy, true), []string{"\n\n", "Question:"})
		if out.Choices[0].Text != want {
			t.Errorf("generated %q, want the greedy text cut at the stops %q", out.Choices[0].Text, want)
		}
	})
	t.Run("remote tokenizer", func(t *testing.T) {
		resp, err := r.hc.Get(r.url + "/tokenizer_info")
		if err != nil {
			t.Fatal(err)
		}
		var info map[string]any
		json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if info["eos_token"] != tk.Decode([]int{tk.EOS()}, false) || info["bos_token"] != tk.Decode([]int{tk.BOS()}, false) {
			t.Errorf("tokenizer_info %v", info)
		}
		text := "Hello <｜end▁of▁sentence｜> world"
		var tok struct {
			Tokens []int `json:"tokens"`
			Count  int   `json:"count"`
		}
		r.postJSON(t, "/tokenize", map[string]any{"prompt": text, "add_special_tokens": false}, &tok)
		want := tk.EncodeWith(text, tokenizerOpts(false))
		if !slices.Equal(tok.Tokens, want) || tok.Count != len(want) || !slices.Contains(want, tk.EOS()) {
			t.Errorf("tokenize %v, want %v (special tokens parsed, none added)", tok.Tokens, want)
		}
		var detok struct {
			Prompt string `json:"prompt"`
		}
		r.postJSON(t, "/detokenize", map[string]any{"tokens": tk.Encode("round trip", false)}, &detok)
		if detok.Prompt != "round trip" {
			t.Errorf("detokenize %q", detok.Prompt)
		}
		var ver map[string]string
		resp, err = r.hc.Get(r.url + "/version")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&ver)
		resp.Body.Close()
		if ver["version"] == "" {
			t.Errorf("version %v", ver)
		}
	})
}

func tokenizerOpts(addSpecial bool) tokenizer.EncodeOptions {
	return tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: true}
}
