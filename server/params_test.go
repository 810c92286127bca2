package server

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/common/expfmt"
	promModel "github.com/prometheus/common/model"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/sampler"
)

// engineRun is what the engine itself produces for a request.
type engineRun struct {
	toks   [][]int
	lps    [][]float64
	tops   [][][]sampler.TokenLogprob
	prompt []engine.PromptLogprob
	finish []string
}

// run submits req to the engine directly (the server's reference).
func (r *realEnv) run(t *testing.T, req engine.Request) engineRun {
	t.Helper()
	n := max(req.N, 1)
	if req.ID == "" {
		req.ID = "direct"
	}
	ch, err := r.eng.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	out := engineRun{toks: make([][]int, n), lps: make([][]float64, n), tops: make([][][]sampler.TokenLogprob, n), finish: make([]string, n)}
	for ev := range ch {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if ev.Prompt != nil {
			out.prompt = ev.Prompt
		}
		if ev.Finish != "" {
			out.finish[ev.Index] = ev.Finish
			if ev.OutputTokens == len(out.toks[ev.Index]) {
				continue
			}
		}
		out.toks[ev.Index] = append(out.toks[ev.Index], ev.Token)
		out.lps[ev.Index] = append(out.lps[ev.Index], ev.Logprob)
		out.tops[ev.Index] = append(out.tops[ev.Index], slices.Clone(ev.Top))
	}
	return out
}

// greedyParams are the sampler settings of temperature 0.
var greedyParams = sampler.Params{Temperature: 0, TopP: 1}

func ids64(ids []int) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// tokensOf re-tokenizes nothing: it maps the logprobs' "token_id:N" strings
// back to ids.
func tokensOf(t *testing.T, c openai.CompletionChoice) []int {
	t.Helper()
	var out []int
	for _, s := range c.Logprobs.Tokens {
		id, err := strconv.Atoi(strings.TrimPrefix(s, "token_id:"))
		if err != nil {
			t.Fatalf("token %q is not token_id:N", s)
		}
		out = append(out, id)
	}
	return out
}

// TestSamplingParametersTakeEffect drives glm5-mini through the official
// client with every sampling parameter and checks each one's effect
// against greedy decoding or the engine's own output for the same
// settings.
func TestSamplingParametersTakeEffect(t *testing.T) {
	r := newRealEnv(t)
	ctx := context.Background()
	prompt := []int{0, 19923, 14, 2058, 3, 223}
	const maxTokens = 8
	eos := r.cfg.EOSTokenIDs[0]
	// complete sends the prompt with the extra fields and returns the
	// choices; tokens come back as ids (return_tokens_as_token_ids).
	complete := func(t *testing.T, p openai.CompletionNewParams, extra map[string]any) *openai.Completion {
		t.Helper()
		p.Model = config.DefaultPreset
		if p.Prompt.OfArrayOfTokens == nil && p.Prompt.OfString.Value == "" && p.Prompt.OfArrayOfStrings == nil && p.Prompt.OfArrayOfTokenArrays == nil {
			p.Prompt = openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids64(prompt)}
		}
		if !p.MaxTokens.Valid() {
			p.MaxTokens = openai.Int(maxTokens)
		}
		if !p.Logprobs.Valid() {
			p.Logprobs = openai.Int(0)
		}
		opts := []option.RequestOption{option.WithJSONSet("return_tokens_as_token_ids", true)}
		for k, v := range extra {
			opts = append(opts, option.WithJSONSet(k, v))
		}
		resp, err := r.client.Completions.New(ctx, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	greedy := r.run(t, engine.Request{PromptIDs: prompt, MaxTokens: maxTokens, Sampling: greedyParams, StopTokenIDs: r.cfg.EOSTokenIDs}).toks[0]
	if len(greedy) < 4 {
		t.Fatalf("greedy output %v is too short for the checks", greedy)
	}
	sameAsGreedy := func(name string, extra map[string]any, p openai.CompletionNewParams) {
		t.Run(name, func(t *testing.T) {
			got := tokensOf(t, complete(t, p, extra).Choices[0])
			if d := cmp.Diff(greedy, got); d != "" {
				t.Errorf("%s: tokens differ from greedy (-greedy +got):\n%s", name, d)
			}
		})
	}
	hot := openai.CompletionNewParams{Temperature: openai.Float(1.5), Seed: openai.Int(3)}
	sameAsGreedy("top_k 1 is greedy", map[string]any{"top_k": 1}, hot)
	sameAsGreedy("min_p 1 is greedy", map[string]any{"min_p": 1.0}, hot)
	sameAsGreedy("top_p 1e-9 is greedy", nil, openai.CompletionNewParams{Temperature: openai.Float(1.5), Seed: openai.Int(3), TopP: openai.Float(1e-9)})
	sameAsGreedy("user and length_penalty change nothing", map[string]any{"length_penalty": 0.5},
		openai.CompletionNewParams{Temperature: openai.Float(0), User: openai.String("someone")})

	t.Run("temperature sampling differs from greedy, seeds reproduce", func(t *testing.T) {
		a := tokensOf(t, complete(t, openai.CompletionNewParams{Temperature: openai.Float(2), Seed: openai.Int(7)}, nil).Choices[0])
		b := tokensOf(t, complete(t, openai.CompletionNewParams{Temperature: openai.Float(2), Seed: openai.Int(7)}, nil).Choices[0])
		c := tokensOf(t, complete(t, openai.CompletionNewParams{Temperature: openai.Float(2), Seed: openai.Int(8)}, nil).Choices[0])
		if !slices.Equal(a, b) {
			t.Errorf("seed 7 twice: %v and %v", a, b)
		}
		if slices.Equal(a, c) || slices.Equal(a, greedy) {
			t.Errorf("seed 7 %v, seed 8 %v, greedy %v: temperature 2 should differ", a, c, greedy)
		}
		want := r.run(t, engine.Request{PromptIDs: prompt, MaxTokens: maxTokens, StopTokenIDs: r.cfg.EOSTokenIDs,
			Sampling: sampler.Params{Temperature: 2, TopP: 1, Seed: 7}}).toks[0]
		if d := cmp.Diff(want, a); d != "" {
			t.Errorf("seed 7 through the server vs the engine (-engine +server):\n%s", d)
		}
	})

	t.Run("logit_bias forces and bans tokens", func(t *testing.T) {
		const forced = 4242
		got := tokensOf(t, complete(t, openai.CompletionNewParams{Temperature: openai.Float(0), LogitBias: map[string]int64{"4242": 100}}, nil).Choices[0])
		if want := slices.Repeat([]int{forced}, maxTokens); !slices.Equal(got, want) {
			t.Errorf("logit_bias +100 on %d: %v", forced, got)
		}
		got = tokensOf(t, complete(t, openai.CompletionNewParams{Temperature: openai.Float(0), LogitBias: map[string]int64{strconv.Itoa(greedy[0]): -100}}, nil).Choices[0])
		if got[0] == greedy[0] {
			t.Errorf("logit_bias -100 on greedy's first token %d: still drawn", greedy[0])
		}
	})

	t.Run("penalties change the output as the engine computes them", func(t *testing.T) {
		// Between the two most likely first tokens, with the smallest bias
		// that makes greedy decoding repeat the first one; each penalty
		// makes the other appear.
		first := r.run(t, engine.Request{PromptIDs: prompt, MaxTokens: 1, Sampling: greedyParams, TopLogprobs: 2}).tops[0][0]
		pair := []int{int(first[0].Token), int(first[1].Token)}
		var base []int
		var bias map[int]float64
		for _, b := range []float64{0.25, 0.5, 1, 2, 4, 8} {
			bias = map[int]float64{pair[0]: b}
			base = r.run(t, engine.Request{PromptIDs: prompt, MaxTokens: maxTokens, Sampling: sampler.Params{TopP: 1, AllowedTokenIDs: pair, LogitBias: bias}}).toks[0]
			if slices.Equal(base, slices.Repeat(pair[:1], maxTokens)) {
				break
			}
		}
		if !slices.Equal(base, slices.Repeat(pair[:1], maxTokens)) {
			t.Fatalf("no bias up to 8 makes %v repeat %d", base, pair[0])
		}
		// Both logits shifted below zero, where the repetition penalty
		// multiplies; greedy choices between the two do not move.
		bias = map[int]float64{pair[0]: bias[pair[0]] - 50, pair[1]: -50}
		for _, tc := range []struct {
			extra map[string]any
			p     sampler.Params
		}{
			{map[string]any{"repetition_penalty": 2.0}, sampler.Params{RepetitionPenalty: 2}},
			{map[string]any{"frequency_penalty": 2.0}, sampler.Params{FrequencyPenalty: 2}},
			{map[string]any{"presence_penalty": 2.0}, sampler.Params{PresencePenalty: 2}},
		} {
			tc.extra["allowed_token_ids"] = pair
			tc.extra["logit_bias"] = map[string]float64{strconv.Itoa(pair[0]): bias[pair[0]], strconv.Itoa(pair[1]): bias[pair[1]]}
			got := tokensOf(t, complete(t, openai.CompletionNewParams{Temperature: openai.Float(0)}, tc.extra).Choices[0])
			tc.p.TopP, tc.p.AllowedTokenIDs, tc.p.LogitBias = 1, pair, bias
			want := r.run(t, engine.Request{PromptIDs: prompt, MaxTokens: maxTokens, Sampling: tc.p, StopTokenIDs: r.cfg.EOSTokenIDs}).toks[0]
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%v: server vs engine (-engine +server):\n%s", tc.extra, d)
			}
			if slices.Equal(got, base) {
				t.Errorf("%v: output %v equals the unpenalized %v", tc.extra, got, base)
			}
		}
	})

	t.Run("allowed_token_ids", func(t *testing.T) {
		allowed := []int{100, 200, 300}
		for _, id := range tokensOf(t, complete(t, openai.CompletionNewParams{Temperature: openai.Float(1), Seed: openai.Int(1)},
			map[string]any{"allowed_token_ids": allowed}).Choices[0]) {
			if !slices.Contains(allowed, id) {
				t.Fatalf("drew %d outside allowed_token_ids %v", id, allowed)
			}
		}
	})

	t.Run("stop_token_ids stop, with stop_reason", func(t *testing.T) {
		stopAt := greedy[2]
		resp := complete(t, openai.CompletionNewParams{Temperature: openai.Float(0)}, map[string]any{"stop_token_ids": []int{stopAt}})
		c := resp.Choices[0]
		got := tokensOf(t, c)
		if i := slices.Index(greedy, stopAt); !slices.Equal(got, greedy[:i+1]) || c.FinishReason != "stop" {
			t.Errorf("stop at %d: tokens %v finish %q, want %v and stop", stopAt, got, c.FinishReason, greedy[:i+1])
		}
		if raw := c.JSON.ExtraFields["stop_reason"].Raw(); raw != strconv.Itoa(stopAt) {
			t.Errorf("stop_reason %s, want %d", raw, stopAt)
		}
		if want := testTokenizer(t).Decode(greedy[:slices.Index(greedy, stopAt)], true); c.Text != want {
			t.Errorf("text %q, want %q (the stop token's text left out)", c.Text, want)
		}
	})

	t.Run("min_tokens delays EOS, ignore_eos ignores it", func(t *testing.T) {
		bias := map[string]int64{strconv.Itoa(eos): 100}
		c := complete(t, openai.CompletionNewParams{Temperature: openai.Float(0), LogitBias: bias}, nil).Choices[0]
		if got := tokensOf(t, c); !slices.Equal(got, []int{eos}) || c.FinishReason != "stop" {
			t.Fatalf("EOS +100: tokens %v finish %q, want just EOS", got, c.FinishReason)
		}
		c = complete(t, openai.CompletionNewParams{Temperature: openai.Float(0), LogitBias: bias}, map[string]any{"min_tokens": 3}).Choices[0]
		got := tokensOf(t, c)
		if len(got) != 4 || got[3] != eos || slices.Contains(got[:3], eos) || c.FinishReason != "stop" {
			t.Errorf("min_tokens 3: tokens %v finish %q, want three others then EOS", got, c.FinishReason)
		}
		c = complete(t, openai.CompletionNewParams{Temperature: openai.Float(0), LogitBias: bias, MaxTokens: openai.Int(5)}, map[string]any{"ignore_eos": true}).Choices[0]
		if got := tokensOf(t, c); !slices.Equal(got, slices.Repeat([]int{eos}, 5)) || c.FinishReason != "length" {
			t.Errorf("ignore_eos: tokens %v finish %q, want five EOS and length", got, c.FinishReason)
		}
	})

	t.Run("n 2 gives two choices from one prefill", func(t *testing.T) {
		before := r.eng.Stats().PrefillTokens
		resp := complete(t, openai.CompletionNewParams{Temperature: openai.Float(1.5), Seed: openai.Int(11), N: openai.Int(2)}, nil)
		waitFor(t, "the engine to go idle", func() bool { st := r.eng.Stats(); return st.Running == 0 && st.Waiting == 0 })
		if got := r.eng.Stats().PrefillTokens - before; got != int64(len(prompt)) {
			t.Errorf("n 2 scheduled %d prefill tokens for a %d-token prompt", got, len(prompt))
		}
		if len(resp.Choices) != 2 || resp.Choices[0].Index != 0 || resp.Choices[1].Index != 1 {
			t.Fatalf("choices %+v", resp.Choices)
		}
		for k, c := range resp.Choices {
			want := r.run(t, engine.Request{PromptIDs: prompt, MaxTokens: maxTokens, StopTokenIDs: r.cfg.EOSTokenIDs,
				Sampling: sampler.Params{Temperature: 1.5, TopP: 1, Seed: 11 + uint64(k)}}).toks[0]
			if d := cmp.Diff(want, tokensOf(t, c)); d != "" {
				t.Errorf("choice %d vs n 1 with seed %d (-engine +server):\n%s", k, 11+k, d)
			}
		}
		if resp.Usage.PromptTokens != int64(len(prompt)) || resp.Usage.CompletionTokens != int64(len(resp.Choices[0].Logprobs.Tokens)+len(resp.Choices[1].Logprobs.Tokens)) {
			t.Errorf("usage %+v", resp.Usage)
		}
		// Streamed: chunks of both indexes that add up to the whole texts.
		s := r.client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: config.DefaultPreset,
			Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids64(prompt)}, MaxTokens: openai.Int(maxTokens),
			Temperature: openai.Float(1.5), Seed: openai.Int(11), N: openai.Int(2)})
		texts := make([]string, 2)
		for s.Next() {
			for _, c := range s.Current().Choices {
				texts[c.Index] += c.Text
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		for k := range 2 {
			if texts[k] != resp.Choices[k].Text {
				t.Errorf("streamed choice %d %q, whole %q", k, texts[k], resp.Choices[k].Text)
			}
		}
	})

	t.Run("logprobs are the engine's with their top alternatives", func(t *testing.T) {
		const n = 3
		c := complete(t, openai.CompletionNewParams{Temperature: openai.Float(0), Logprobs: openai.Int(n)}, nil).Choices[0]
		want := r.run(t, engine.Request{PromptIDs: prompt, MaxTokens: maxTokens, Sampling: greedyParams, StopTokenIDs: r.cfg.EOSTokenIDs, TopLogprobs: n})
		if d := cmp.Diff(want.lps[0], c.Logprobs.TokenLogprobs, cmpopts.EquateApprox(0, 1e-12)); d != "" {
			t.Errorf("token_logprobs (-engine +server):\n%s", d)
		}
		for i, top := range c.Logprobs.TopLogprobs {
			wantTop := map[string]float64{}
			for _, a := range want.tops[0][i] {
				wantTop["token_id:"+strconv.Itoa(int(a.Token))] = a.Logprob
			}
			if d := cmp.Diff(wantTop, top, cmpopts.EquateApprox(0, 1e-12)); d != "" {
				t.Errorf("step %d top_logprobs (-engine +server):\n%s", i, d)
			}
		}
		// Chat: OpenAI's list shape, the n most likely, most likely first.
		resp, err := r.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: config.DefaultPreset, Temperature: openai.Float(0),
			MaxTokens: openai.Int(4), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(n),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}})
		if err != nil {
			t.Fatal(err)
		}
		for i, tok := range resp.Choices[0].Logprobs.Content {
			if len(tok.TopLogprobs) != n || tok.TopLogprobs[0].Logprob != tok.Logprob || tok.TopLogprobs[0].Logprob < tok.TopLogprobs[n-1].Logprob {
				t.Errorf("chat token %d: logprob %v, top %+v", i, tok.Logprob, tok.TopLogprobs)
			}
		}
	})

	t.Run("chat prompt_logprobs", func(t *testing.T) {
		resp, err := r.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: config.DefaultPreset, Temperature: openai.Float(0),
			MaxTokens: openai.Int(2), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}},
			option.WithJSONSet("prompt_logprobs", 1))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
			PromptLogprobs []map[string]PromptLogprob `json:"prompt_logprobs"`
		}
		if err := json.Unmarshal([]byte(resp.RawJSON()), &body); err != nil {
			t.Fatal(err)
		}
		if len(body.PromptLogprobs) != body.Usage.PromptTokens || body.PromptLogprobs[0] != nil || len(body.PromptLogprobs[1]) == 0 {
			t.Errorf("prompt_logprobs of %d entries for %d prompt tokens: %v", len(body.PromptLogprobs), body.Usage.PromptTokens, body.PromptLogprobs)
		}
	})

	t.Run("truncate_prompt_tokens keeps the last tokens", func(t *testing.T) {
		resp := complete(t, openai.CompletionNewParams{Temperature: openai.Float(0)}, map[string]any{"truncate_prompt_tokens": 3})
		want := r.run(t, engine.Request{PromptIDs: prompt[3:], MaxTokens: maxTokens, Sampling: greedyParams, StopTokenIDs: r.cfg.EOSTokenIDs}).toks[0]
		if d := cmp.Diff(want, tokensOf(t, resp.Choices[0])); d != "" || resp.Usage.PromptTokens != 3 {
			t.Errorf("usage %+v; tokens (-last three alone +server):\n%s", resp.Usage, d)
		}
	})

	t.Run("batched prompts and request_id", func(t *testing.T) {
		second := []int{0, 5000, 6000}
		resp := complete(t, openai.CompletionNewParams{Temperature: openai.Float(0),
			Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokenArrays: [][]int64{ids64(prompt), ids64(second)}}},
			map[string]any{"request_id": "batch-1"})
		if resp.ID != "cmpl-batch-1" || len(resp.Choices) != 2 {
			t.Fatalf("id %q, %d choices", resp.ID, len(resp.Choices))
		}
		for i, p := range [][]int{prompt, second} {
			want := r.run(t, engine.Request{PromptIDs: p, MaxTokens: maxTokens, Sampling: greedyParams, StopTokenIDs: r.cfg.EOSTokenIDs}).toks[0]
			if d := cmp.Diff(want, tokensOf(t, resp.Choices[i])); d != "" || resp.Choices[i].Index != int64(i) {
				t.Errorf("prompt %d (index %d) (-alone +batched):\n%s", i, resp.Choices[i].Index, d)
			}
		}
		if resp.Usage.PromptTokens != int64(len(prompt)+len(second)) {
			t.Errorf("usage %+v", resp.Usage)
		}
	})

	t.Run("stop string with include_stop_str_in_output, continuous usage", func(t *testing.T) {
		tk := testTokenizer(t)
		text := tk.Decode(greedy, true)
		stop := tk.Decode(greedy[2:3], true)
		if stop == "" || !strings.Contains(text, stop) {
			t.Skipf("greedy token %d has no text to stop on", greedy[2])
		}
		c := complete(t, openai.CompletionNewParams{Temperature: openai.Float(0), Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String(stop)}},
			map[string]any{"include_stop_str_in_output": true}).Choices[0]
		if want := text[:strings.Index(text, stop)+len(stop)]; c.Text != want || c.FinishReason != "stop" {
			t.Errorf("text %q finish %q, want %q with the stop string", c.Text, c.FinishReason, want)
		}
		var reason string
		if err := json.Unmarshal([]byte(c.JSON.ExtraFields["stop_reason"].Raw()), &reason); err != nil || reason != stop {
			t.Errorf("stop_reason %s, want %q", c.JSON.ExtraFields["stop_reason"].Raw(), stop)
		}
		s := r.client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: config.DefaultPreset,
			Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids64(prompt)}, MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0)},
			option.WithJSONSet("stream_options", map[string]any{"continuous_usage_stats": true}))
		chunks := 0
		for s.Next() {
			if cur := s.Current(); len(cur.Choices) > 0 {
				chunks++
				if cur.Usage.PromptTokens != int64(len(prompt)) || cur.Usage.CompletionTokens == 0 {
					t.Errorf("chunk %d usage %+v", chunks, cur.Usage)
				}
			}
		}
		s.Close()
		if chunks == 0 {
			t.Error("no chunk")
		}
	})
}

// TestRealEnginePhaseMetrics: against the real engine every phase
// histogram is observed once per finished request and the scheduler's
// counters are exported.
func TestRealEnginePhaseMetrics(t *testing.T) {
	r := newRealEnv(t)
	const requests = 3
	for i := range requests {
		if _, err := r.client.Completions.New(context.Background(), openai.CompletionNewParams{Model: config.DefaultPreset,
			Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{0, 19923, 14, int64(i)}}, MaxTokens: openai.Int(3), Temperature: openai.Float(0)}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := r.hc.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(promModel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
		"vllm:request_inference_time_seconds", "vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
		"vllm:request_prompt_tokens", "vllm:request_generation_tokens"} {
		if got := fams[name].GetMetric()[0].GetHistogram().GetSampleCount(); got != requests {
			t.Errorf("%s observed %d times, want %d", name, got, requests)
		}
	}
	if q := fams["vllm:prefix_cache_queries_total"].GetMetric()[0].GetCounter().GetValue(); q < 4*requests {
		t.Errorf("prefix cache queries %v, want at least the %d prompt tokens", q, 4*requests)
	}
	if _, ok := fams["vllm:num_preemptions_total"]; !ok {
		t.Error("vllm:num_preemptions_total missing")
	}
}
