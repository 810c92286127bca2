package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/server"
	"github.com/cpmla/cpmla/tokenizer"
)

// scriptedServer streams, for a completion request asking for n tokens,
// n chunks "t0", "t1", … with gap between them (first after first), then
// a usage chunk and [DONE]. A prompt starting with token id 666 gets 500.
type scriptedServer struct {
	first, gap time.Duration
	mu         sync.Mutex
	inFlight   int
	maxSeen    int
	bodies     []map[string]any
}

func (s *scriptedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"scripted","object":"model"}]}`)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.inFlight++
	s.maxSeen = max(s.maxSeen, s.inFlight)
	s.mu.Unlock()
	// A request leaves the count before its last bytes are written: the
	// client may start its next request as soon as it has read them, before
	// this handler returns.
	done := func() { s.mu.Lock(); s.inFlight--; s.mu.Unlock() }
	if p, ok := body["prompt"].([]any); ok && len(p) > 0 && p[0].(float64) == 666 {
		done()
		http.Error(w, `{"error":{"message":"scripted failure"}}`, http.StatusInternalServerError)
		return
	}
	n := int(body["max_tokens"].(float64))
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	time.Sleep(s.first)
	for i := range n {
		if i > 0 {
			time.Sleep(s.gap)
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", i)
		rc.Flush()
	}
	done()
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", n)
	rc.Flush()
}

func TestRunScripted(t *testing.T) {
	ss := &scriptedServer{first: 20 * time.Millisecond, gap: 5 * time.Millisecond}
	hs := httptest.NewServer(ss)
	defer hs.Close()
	prompts := []Prompt{
		{IDs: []int{1, 2, 3}, OutputLen: 4},
		{IDs: []int{666, 2}, OutputLen: 4}, // fails
		{IDs: []int{5, 6, 7, 8}, OutputLen: 1},
		{IDs: []int{9}, OutputLen: 3},
	}
	progress := 0
	res, err := Run(context.Background(), Options{
		BaseURL: hs.URL, Endpoint: EndpointCompletions, Prompts: prompts,
		MaxConcurrency: 2, RequestRate: math.Inf(1), IgnoreEOS: true,
		Progress: func() { progress++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if progress != len(prompts) {
		t.Errorf("progress called %d times, want %d", progress, len(prompts))
	}
	if ss.maxSeen > 2 {
		t.Errorf("%d requests in flight at once, more than --max-concurrency 2", ss.maxSeen)
	}
	// What was sent: the model from /v1/models, token ids, the lengths.
	b := ss.bodies[0]
	if b["model"] != "scripted" || b["stream"] != true || b["ignore_eos"] != true || b["temperature"] != 0.0 {
		t.Errorf("request body %v: want model from /v1/models, stream, ignore_eos, temperature 0", b)
	}
	type per struct {
		Success     bool
		Text        string
		Out, Prompt int
		Gaps        int
	}
	var got []per
	for _, o := range res.Outputs {
		got = append(got, per{o.Success, o.GeneratedText, o.OutputTokens, o.PromptLen, len(o.ITL)})
		if !o.Success {
			continue
		}
		// The server cannot send earlier than its script: chunk i arrives
		// no sooner than first + i·gap after the request. (A single gap may
		// be shorter than the script's when the chunk before it was
		// delivered late, so the bound is on arrival times.)
		if o.TTFT < ss.first.Seconds() {
			t.Errorf("TTFT %v below the scripted %v", o.TTFT, ss.first)
		}
		at := o.TTFT
		for i, g := range o.ITL {
			at += g
			if earliest := (ss.first + time.Duration(i+1)*ss.gap).Seconds(); at < earliest {
				t.Errorf("chunk %d arrived at %v, before the scripted %v", i+1, at, earliest)
			}
		}
		// E2EL is the last chunk's time: TTFT plus every gap.
		sum := o.TTFT
		for _, g := range o.ITL {
			sum += g
		}
		if math.Abs(sum-o.Latency) > 1e-6 {
			t.Errorf("E2EL %v ≠ TTFT + ΣITL = %v", o.Latency, sum)
		}
	}
	want := []per{
		{true, "t0t1t2t3", 4, 3, 3},
		{false, "", 0, 2, 0},
		{true, "t0", 1, 4, 0},
		{true, "t0t1t2", 3, 1, 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("per-request results (-want +got):\n%s", diff)
	}
	m := res.Metrics
	if m.Completed != 3 || m.Failed != 1 || m.TotalOutput != 8 || m.TotalInput != 8 {
		t.Errorf("completed %d failed %d output %d input %d, want 3, 1, 8, 8", m.Completed, m.Failed, m.TotalOutput, m.TotalInput)
	}
	if res.Outputs[1].Error == "" || !bytes.Contains([]byte(res.Outputs[1].Error), []byte("HTTP 500")) {
		t.Errorf("failed request error %q should carry the status", res.Outputs[1].Error)
	}

	// The result file has vLLM's keys.
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := json.Unmarshal(buf.Bytes(), &file); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"date", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
		"request_throughput", "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
		"errors", "generated_texts", "max_concurrency", "request_rate",
		"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
		"mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms"} {
		if _, ok := file[k]; !ok {
			t.Errorf("result file lacks %q", k)
		}
	}
	if file["request_rate"] != "inf" || file["max_concurrency"] != 2.0 || file["completed"] != 3.0 {
		t.Errorf("request_rate %v, max_concurrency %v, completed %v; want \"inf\", 2, 3", file["request_rate"], file["max_concurrency"], file["completed"])
	}
	var report bytes.Buffer
	if err := res.WriteReport(&report); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"Successful requests:                     3", "Failed requests:                         1", "Mean TTFT (ms):", "P99 E2EL (ms):", "HTTP 500"} {
		if !bytes.Contains(report.Bytes(), []byte(line)) {
			t.Errorf("report lacks %q:\n%s", line, report.String())
		}
	}
}

func TestOptionsRefused(t *testing.T) {
	good := Options{BaseURL: "http://x", Endpoint: EndpointChat, Prompts: []Prompt{{IDs: []int{1}, OutputLen: 1}}, RequestRate: 1}
	tests := []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.BaseURL = "" }, "--base-url is empty"},
		{func(o *Options) { o.Endpoint = "/v1/embeddings" }, "use /v1/completions or /v1/chat/completions"},
		{func(o *Options) { o.Prompts = nil }, "--num-prompts 1 or more"},
		{func(o *Options) { o.MaxConcurrency = -1 }, "--max-concurrency is -1"},
		{func(o *Options) { o.RequestRate = 0 }, "--request-rate is 0"},
	}
	for _, tc := range tests {
		o := good
		tc.change(&o)
		if err := o.validate(); err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("validate: %v, want an error containing %q", err, tc.want)
		}
	}
	if err := good.validate(); err != nil {
		t.Errorf("good options refused: %v", err)
	}
}

func TestRandomDataset(t *testing.T) {
	tk, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	o := RandomOptions{NumPrompts: 50, InputLen: 20, OutputLen: 10, RangeRatio: 0.5, Seed: 3}
	ps, err := RandomDataset(tk, o)
	if err != nil {
		t.Fatal(err)
	}
	inLo, inHi := lengthRange(20, 0.5)
	outLo, outHi := lengthRange(10, 0.5)
	if inLo != 10 || inHi != 30 || outLo != 5 || outHi != 15 {
		t.Fatalf("ranges [%d,%d] [%d,%d], want [10,30] [5,15]", inLo, inHi, outLo, outHi)
	}
	for i, p := range ps {
		if len(p.IDs) < inLo || len(p.IDs) > inHi || p.OutputLen < outLo || p.OutputLen > outHi {
			t.Errorf("prompt %d: %d ids, output %d: outside the ranges", i, len(p.IDs), p.OutputLen)
		}
		for _, id := range p.IDs {
			if tk.IsSpecial(id) || id == tk.BOS() || id == tk.EOS() {
				t.Errorf("prompt %d holds control token %d", i, id)
			}
		}
		if p.Text != strings.ToValidUTF8(tk.Decode(p.IDs, false), "\uFFFD") {
			t.Errorf("prompt %d text is not its ids decoded", i)
		}
	}
	again, _ := RandomDataset(tk, o)
	if diff := cmp.Diff(ps, again); diff != "" {
		t.Errorf("same seed, other prompts (-first +second):\n%s", diff)
	}
	if _, err := RandomDataset(tk, RandomOptions{NumPrompts: 1, InputLen: 1, OutputLen: 1, RangeRatio: 1}); err == nil {
		t.Error("range ratio 1 accepted; it allows empty prompts")
	}
}

// countingEngine generates MaxTokens copies of one token.
type countingEngine struct{ token int }

func (e countingEngine) Submit(ctx context.Context, req engine.Request) (<-chan engine.Event, error) {
	ch := make(chan engine.Event)
	go func() {
		defer close(ch)
		for i := range req.MaxTokens {
			ev := engine.Event{Token: e.token, Logprob: -1}
			if i == req.MaxTokens-1 {
				ev.Finish, ev.PromptTokens, ev.OutputTokens = engine.FinishLength, len(req.PromptIDs), req.MaxTokens
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// TestRunAgainstServer drives cpmla's own server on both endpoints.
func TestRunAgainstServer(t *testing.T) {
	tk, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Engine: countingEngine{token: 2058}, Tokenizer: tk, ModelName: "glm5-mini",
		MaxModelLen: 512, VocabSize: tk.VocabSize(), StopTokenIDs: []int{tk.EOS()}, MaxInFlight: 8})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	prompts, err := RandomDataset(tk, RandomOptions{NumPrompts: 12, InputLen: 16, OutputLen: 6, RangeRatio: 0.25, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{EndpointCompletions, EndpointChat} {
		t.Run(ep, func(t *testing.T) {
			res, err := Run(context.Background(), Options{BaseURL: hs.URL, Endpoint: ep, Prompts: prompts,
				MaxConcurrency: 4, RequestRate: 200, Seed: 2, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			var wantOut []int
			for _, p := range prompts {
				wantOut = append(wantOut, p.OutputLen)
			}
			if diff := cmp.Diff(wantOut, res.Metrics.OutputLens); diff != "" {
				t.Errorf("output tokens per request (-want +got):\n%s", diff)
			}
			if res.Metrics.Failed != 0 {
				t.Fatalf("%d failed: %v", res.Metrics.Failed, res.Outputs[0].Error)
			}
			for i, o := range res.Outputs {
				// One chunk per token: " world" each.
				if want := bytes.Repeat([]byte(" world"), prompts[i].OutputLen); string(want) != o.GeneratedText {
					t.Errorf("request %d text %q, want %q", i, o.GeneratedText, want)
				}
				if len(o.ITL) != prompts[i].OutputLen-1 {
					t.Errorf("request %d: %d gaps for %d chunks", i, len(o.ITL), prompts[i].OutputLen)
				}
				if ep == EndpointCompletions && o.PromptLen != len(prompts[i].IDs) {
					t.Errorf("request %d prompt len %d, want the %d ids sent", i, o.PromptLen, len(prompts[i].IDs))
				}
				if ep == EndpointChat {
					ids, err := tk.EncodeChat([]tokenizer.Message{{Role: "user", Content: prompts[i].Text}}, true)
					if err != nil {
						t.Fatal(err)
					}
					if o.PromptLen != len(ids) {
						t.Errorf("request %d chat prompt len %d, want the templated length %d", i, o.PromptLen, len(ids))
					}
				}
			}
		})
	}
}
