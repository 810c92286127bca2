package server

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
)

// realEnv is the server in front of the real engine on glm5-mini.
type realEnv struct {
	url    string
	hc     *http.Client
	cfg    *config.Model
	eng    *engine.Engine
	srv    *Server
	client openai.Client
}

func newRealEnv(t *testing.T) *realEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("runs glm5-mini")
	}
	cfg, src, err := model.Source(config.DefaultPreset, model.DefaultWeightSeed)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, src, model.Shard{TPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	const maxModelLen = 96
	eng, err := engine.New(cfg, engine.WeightBytes(m), engine.SingleRank(m), engine.Options{
		MaxNumBatchedTokens: 16, MaxNumSeqs: 4, MaxModelLen: maxModelLen, MemoryLimit: 1 << 30, MaxQueue: 64, MaxPromptLogitRows: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	tk := testTokenizer(t)
	srv, err := New(Config{Engine: eng, Tokenizer: tk, ModelName: config.DefaultPreset, MaxModelLen: maxModelLen,
		VocabSize: cfg.VocabSize, StopTokenIDs: cfg.EOSTokenIDs, MaxInFlight: 4 + 64, Stats: EngineStats(eng, 1),
		MaxN: 4, MaxLogprobs: 20})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		hs.Close()
		eng.Close()
		m.Close()
	})
	return &realEnv{cfg: cfg, eng: eng, srv: srv, url: hs.URL, hc: hc,
		client: openai.NewClient(option.WithBaseURL(hs.URL+"/v1"), option.WithAPIKey("unused"),
			option.WithMaxRetries(0), option.WithHTTPClient(hc))}
}

// direct runs a request on the engine without the server.
func (r *realEnv) direct(t *testing.T, prompt []int, maxTokens int) ([]int, []float64) {
	t.Helper()
	ch, err := r.eng.Submit(context.Background(), engine.Request{ID: "direct", PromptIDs: prompt, MaxTokens: maxTokens,
		Sampling: sampler.Params{Temperature: 0, TopP: 1}, StopTokenIDs: r.cfg.EOSTokenIDs})
	if err != nil {
		t.Fatal(err)
	}
	var toks []int
	var lps []float64
	for ev := range ch {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if ev.Finish == "" || ev.OutputTokens > len(toks) {
			toks, lps = append(toks, ev.Token), append(lps, ev.Logprob)
		}
	}
	return toks, lps
}

// TestRealEngine serves glm5-mini through the official client and checks
// the greedy output against the same request submitted to the engine
// directly; then clients go away mid-stream and the engine must hold no
// KV block afterwards.
func TestRealEngine(t *testing.T) {
	r := newRealEnv(t)
	ctx := context.Background()
	tk := testTokenizer(t)
	prompt := []int{0, 19923, 14, 2058, 3, 223}
	const maxTokens = 12
	wantToks, wantLPs := r.direct(t, prompt, maxTokens)
	wantText := tk.Decode(wantToks, true)

	ids := make([]int64, len(prompt))
	for i, id := range prompt {
		ids[i] = int64(id)
	}
	p := openai.CompletionNewParams{Model: config.DefaultPreset, Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids},
		MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0), Logprobs: openai.Int(0)}
	resp, err := r.client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantText, resp.Choices[0].Text); diff != "" {
		t.Errorf("completion text vs the engine's own tokens decoded (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantLPs, resp.Choices[0].Logprobs.TokenLogprobs, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("logprobs (-engine +server):\n%s", diff)
	}
	if int(resp.Usage.CompletionTokens) != len(wantToks) || int(resp.Usage.PromptTokens) != len(prompt) {
		t.Errorf("usage %+v, want %d prompt and %d completion tokens", resp.Usage, len(prompt), len(wantToks))
	}

	// The same request streamed.
	s := r.client.Completions.NewStreaming(ctx, p)
	var streamed string
	for s.Next() {
		if c := s.Current(); len(c.Choices) > 0 {
			streamed += c.Choices[0].Text
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if streamed != wantText {
		t.Errorf("streamed %q, want %q", streamed, wantText)
	}

	// Chat, whole and streamed, greedy: the same text both ways.
	cp := openai.ChatCompletionNewParams{Model: config.DefaultPreset, Temperature: openai.Float(0), MaxTokens: openai.Int(10),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there")}}
	whole, err := r.client.Chat.Completions.New(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	cs := r.client.Chat.Completions.NewStreaming(ctx, cp)
	var acc openai.ChatCompletionAccumulator
	for cs.Next() {
		acc.AddChunk(cs.Current())
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	cs.Close()
	if whole.Choices[0].Message.Content != acc.Choices[0].Message.Content {
		t.Errorf("chat whole %q vs streamed %q", whole.Choices[0].Message.Content, acc.Choices[0].Message.Content)
	}

	// Clients that go away mid-stream, concurrently with ones that finish.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			st := r.client.Completions.NewStreaming(cctx, openai.CompletionNewParams{Model: config.DefaultPreset,
				Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids}, MaxTokens: openai.Int(24), Seed: openai.Int(int64(i))})
			drop := -1
			if i%2 == 0 {
				drop = rng.IntN(4)
			}
			for n := 0; st.Next(); n++ {
				if n == drop {
					cancel()
					break
				}
			}
			st.Close()
		})
	}
	wg.Wait()
	waitFor(t, "the engine to release every request", func() bool {
		st := r.eng.Stats()
		return st.Running == 0 && st.Waiting == 0 && st.KVBlocksInUse == 0 && r.srv.InFlight() == 0
	})
	if st := r.eng.Stats(); st.Aborted == 0 {
		t.Errorf("no request was aborted; the disconnects did not reach the engine (stats %+v)", st)
	}
}

// TestStopStringEndsTheEngineSequence: a stop string ends the engine's
// sequence in the step that generated it, not when the response sees it:
// the engine generates exactly the tokens the usage counts and aborts
// nothing.
func TestStopStringEndsTheEngineSequence(t *testing.T) {
	r := newRealEnv(t)
	tk := testTokenizer(t)
	prompt := []int{0, 19923, 14, 2058, 3, 223}
	toks, _ := r.direct(t, prompt, 24)
	// A stop string made of the text of tokens 6 and 7: a stop met mid-output.
	stop := tk.Decode(toks[6:8], true)
	full := tk.Decode(toks, true)
	cut := strings.Index(full, stop)
	if stop == "" || cut < 0 {
		t.Fatalf("no stop string in %q", full)
	}
	ids := make([]int64, len(prompt))
	for i, id := range prompt {
		ids[i] = int64(id)
	}
	before := r.eng.Stats()
	resp, err := r.client.Completions.New(context.Background(), openai.CompletionNewParams{Model: config.DefaultPreset,
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids}, MaxTokens: openai.Int(24), Temperature: openai.Float(0),
		Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String(stop)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Text; got != full[:cut] || resp.Choices[0].FinishReason != "stop" {
		t.Errorf("text %q finish %q, want %q and stop", got, resp.Choices[0].FinishReason, full[:cut])
	}
	waitFor(t, "the engine to finish the request", func() bool { return r.eng.Stats().Running == 0 })
	after := r.eng.Stats()
	if gen := after.OutputTokens - before.OutputTokens; gen != resp.Usage.CompletionTokens || gen > 8 {
		t.Errorf("the engine generated %d tokens, the usage counts %d; the stop string ends in token 8 or before", gen, resp.Usage.CompletionTokens)
	}
	if after.Aborted != before.Aborted {
		t.Errorf("the engine aborted %d requests; a stop string should end the sequence, not abort it", after.Aborted-before.Aborted)
	}
}
