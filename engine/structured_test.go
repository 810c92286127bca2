package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/grammar"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/spec"
	"github.com/cpmla/cpmla/tokenizer"
)

// matchers makes one grammar matcher per sequence.
type matchers struct{ g *grammar.Grammar }

func (m matchers) NewConstraint(end []int, maxTokens int) (sampler.Constraint, error) {
	return m.g.NewMatcher(grammar.MatcherOptions{EndTokens: end, MaxTokens: maxTokens})
}

// refusing allows every token and then refuses the one drawn.
type refusing struct{}

func (r refusing) NewConstraint([]int, int) (sampler.Constraint, error) { return r, nil }
func (r refusing) FillMask(mask []uint64) {
	for i := range mask {
		mask[i] = ^uint64(0)
	}
}
func (refusing) Accept(int) error { return errors.New("refused") }

// TestStructuredOutput: constrained sequences of glm5-mini (random
// weights, the DeepSeek-V3 vocabulary) produce JSON objects of the schema,
// n = 2 sequences each follow their own matcher, greedy outputs are the
// same on one rank and on TP 2 × DCP 2, constrained decode steps allocate
// nothing, and a refusing constraint ends its request with the error.
func TestStructuredOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-mini")
	}
	cfg, m := glm5Mini(t)
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	v, err := grammar.VocabFromTokenizer(tok, cfg.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	g, err := grammar.Compile(grammar.Spec{Kind: grammar.KindJSONSchema, NoWhitespace: true,
		Text: `{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":0,"maximum":99}},"required":["ok","n"],"additionalProperties":false}`}, v, grammar.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{11, 200, 3000, 45, 7}
	var oneRank [][]int32
	for _, dcp := range []int{1, 2} {
		f, weights := forkExecutors(t, cfg, m, dcp)
		o := forkOptions(cfg, dcp)
		o.DisablePrefixCaching = true
		e, err := New(cfg, weights, f, o)
		if err != nil {
			t.Fatal(err)
		}
		run := func(req Request) [][]int32 {
			finished := e.Stats().Finished + int64(max(req.N, 1))
			ch, err := e.Submit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			waitFinished(t, e, finished)
			toks, _, last, _, _ := choices(t, ch, max(req.N, 1))
			for k, ev := range last {
				if ev.Finish != FinishStop {
					t.Fatalf("sequence %d ended %q after %v; the grammar ends it well within the limit", k, ev.Finish, toks[k])
				}
				ids := make([]int, 0, len(toks[k]))
				for _, t := range toks[k][:len(toks[k])-1] { // the last is EOS
					ids = append(ids, int(t))
				}
				var out struct {
					OK *bool `json:"ok"`
					N  *int  `json:"n"`
				}
				text := tok.Decode(ids, true)
				if err := json.Unmarshal([]byte(text), &out); err != nil || out.OK == nil || out.N == nil || *out.N > 99 || *out.N < 0 {
					t.Fatalf("sequence %d: %q is not an object of the schema (%v)", k, text, err)
				}
			}
			return toks
		}
		var allocs [3]int64
		decodeSteps := int64(0)
		for r := range allocs {
			var steps int64
			allocs[r], steps = countAllocs(e, func() {
				run(Request{ID: "json", PromptIDs: prompt, MaxTokens: 24, N: 2, StopTokenIDs: cfg.EOSTokenIDs,
					Sampling: sampler.Params{Temperature: 1, TopP: 1, Seed: 5}, Constraint: matchers{g}})
			})
			decodeSteps += steps
		}
		if allocs != [3]int64{} || decodeSteps == 0 {
			t.Errorf("the engine's heap allocations in three runs' constrained decode-only steps: %v over %d steps, want none", allocs, decodeSteps)
		}
		greedy := run(Request{ID: "greedy", PromptIDs: prompt, MaxTokens: 24, StopTokenIDs: cfg.EOSTokenIDs,
			Sampling: sampler.Params{Temperature: 0, TopP: 1}, Constraint: matchers{g}})
		if dcp == 1 {
			oneRank = greedy
		} else if len(greedy[0]) != len(oneRank[0]) || string(int32Bytes(greedy[0])) != string(int32Bytes(oneRank[0])) {
			t.Errorf("greedy constrained output on TP 2 × DCP 2 %v differs from one rank's %v", greedy[0], oneRank[0])
		}
		ch, err := e.Submit(context.Background(), Request{ID: "refused", PromptIDs: prompt, MaxTokens: 4, N: 2,
			Sampling: sampler.Params{Temperature: 1, TopP: 1}, Constraint: refusing{}})
		if err != nil {
			t.Fatal(err)
		}
		var failed int
		for ev := range ch {
			if ev.Err != nil {
				failed++
				if ev.Finish != FinishAbort {
					t.Errorf("a failed sequence finished %q", ev.Finish)
				}
			}
		}
		if failed != 2 {
			t.Errorf("%d sequences ended with the constraint's error, want 2", failed)
		}
		e.Close()
	}
}

func int32Bytes(x []int32) []byte {
	out := make([]byte, 0, 4*len(x))
	for _, v := range x {
		out = append(out, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	return out
}

// TestStructuredOutputSpeculative: constrained speculative decoding emits
// exactly what constrained plain decoding emits — greedy, seeded sampling
// and n = 2, token for token with the same logprobs — on glm5-moe-mini with
// K = 3 drafts, from its MTP layer (random weights, so only the drafts the
// grammar forces are right: the drafter proposes under the constraint,
// whose matcher takes the drafts back before verification) and scripted from plain decoding's outputs (right but for every third
// round's second draft, and ending in the end token, so verification meets
// accepted drafts, a rejected one, and an accepted stop token with drafts
// after it), on one rank and on TP 2 × DCP 2. Verification masks position
// i with the matcher's state after the tokens accepted before it and
// advances it only over the tokens emitted; a draw after an accepted stop
// token, which the matcher refuses, would fail the request. Both layouts
// emit the same tokens (logprobs within 1e-5: the layouts sum in different
// orders), and on one rank constrained speculative decode steps allocate
// nothing.
func TestStructuredOutputSpeculative(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-moe-mini with its MTP layer on two layouts")
	}
	cfg, err := config.Load("glm5-moe-mini")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	v, err := grammar.VocabFromTokenizer(tok, cfg.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	const schema = `{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":0,"maximum":99},"tag":{"enum":["x","yy"]}},"required":["ok","n","tag"],"additionalProperties":false}`
	g, err := grammar.Compile(grammar.Spec{Kind: grammar.KindJSONSchema, NoWhitespace: true, Text: schema}, v, grammar.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	src := model.RandomTensors(cfg, model.DefaultWeightSeed)
	one, err := model.Build(cfg, src, model.Shard{})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []specRequest{
		{prompt: []int{11, 200, 3000, 45, 7}, maxOut: 30},
		{prompt: []int{11, 200, 3000, 45, 7, 8191, 12}, maxOut: 30, params: sampler.Params{Temperature: 1, TopP: 1, Seed: 9}},
		{prompt: []int{5, 6}, maxOut: 30, n: 2, params: sampler.Params{Temperature: 0.8, TopP: 0.95, Seed: 4}},
	}
	for i := range reqs {
		reqs[i].stop = cfg.EOSTokenIDs
	}
	serve := func(t *testing.T, e *Engine) []specOutput {
		t.Helper()
		finished := e.Stats().Finished
		chans := make([]<-chan Event, len(reqs))
		for i, r := range reqs {
			finished += int64(max(r.n, 1))
			ch, err := e.Submit(context.Background(), Request{ID: strconv.Itoa(i), PromptIDs: r.prompt, MaxTokens: r.maxOut, N: r.n,
				Sampling: r.params, StopTokenIDs: r.stop, Constraint: matchers{g}})
			if err != nil {
				t.Fatal(err)
			}
			chans[i] = ch
		}
		waitFinished(t, e, finished)
		out := make([]specOutput, len(reqs))
		for i, ch := range chans {
			n := max(reqs[i].n, 1)
			toks, lps, last, _, _ := choices(t, ch, n)
			o := specOutput{Toks: toks, LPs: lps, Finish: make([]string, n)}
			for k, ev := range last {
				if ev.Err != nil || ev.Finish != FinishStop {
					t.Fatalf("request %d sequence %d ended %q (%v) after %v", i, k, ev.Finish, ev.Err, toks[k])
				}
				o.Finish[k] = ev.Finish
				ids := make([]int, 0, len(toks[k]))
				for _, t := range toks[k][:len(toks[k])-1] { // the last is the end token
					ids = append(ids, int(t))
				}
				var obj struct {
					OK  *bool   `json:"ok"`
					N   *int    `json:"n"`
					Tag *string `json:"tag"`
				}
				text := tok.Decode(ids, true)
				if err := json.Unmarshal([]byte(text), &obj); err != nil || obj.OK == nil || obj.N == nil || obj.Tag == nil || *obj.N < 0 || *obj.N > 99 {
					t.Fatalf("request %d sequence %d: %q is not an object of the schema (%v)", i, k, text, err)
				}
			}
			out[i] = o
		}
		return out
	}
	const B = 8
	var oneRank []specOutput
	for _, l := range []comm.Layout{{TP: 1, PCP: 1, DCP: 1}, {TP: 2, PCP: 1, DCP: 2}} {
		t.Run(fmt.Sprintf("TP%d-DCP%d", l.TP, l.DCP), func(t *testing.T) {
			factory, weights := SingleRank(one), WeightBytes(one)
			if l.World() > 1 {
				bp, err := cp.NewBackendPlan(cp.BackendConfig{Layout: l, Interleave: 1, BlockSize: B / l.DCP, KVDtype: "f32",
					Backend: "auto", HeadsPerRank: cfg.NumHeads / l.TP, QKNopeHeadDim: cfg.QKNopeHeadDim, Sparse: true})
				if err != nil {
					t.Fatal(err)
				}
				if factory, weights, err = InProcess(cfg, src, Parallel{Layout: l, Interleave: 1, Backend: bp}); err != nil {
					t.Fatal(err)
				}
			}
			o := Options{MaxNumBatchedTokens: 24, MaxNumSeqs: 4, MaxModelLen: 48, BlockSize: B, KVDType: kvcache.KVF32,
				Layout: kvcache.Layout{N: l.DCP, I: 1}, MemoryLimit: 1 << 30, MeasureAllocs: true}
			run := func(sp *spec.Config, script func(toks, drafts []int32)) ([]specOutput, Stats) {
				o := o
				o.Speculative = sp
				e, err := New(cfg, weights, factory, o)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				if script != nil {
					e.spec.script = script
				}
				var out []specOutput
				var allocs [3]int64
				decodeSteps := int64(0)
				for r := range allocs {
					var steps int64
					allocs[r], steps = countAllocs(e, func() { out = serve(t, e) })
					decodeSteps += steps
				}
				e.Close()
				if allocs != [3]int64{} || decodeSteps == 0 {
					t.Errorf("the engine's heap allocations in three runs' decode-only steps: %v over %d steps, want none", allocs, decodeSteps)
				}
				return out, e.Stats()
			}
			plain, _ := run(nil, nil)
			if oneRank == nil {
				oneRank = plain
			} else if d := cmp.Diff(oneRank, plain, cmpopts.EquateApprox(0, 1e-5)); d != "" {
				t.Errorf("constrained plain decoding differs from one rank's (-one rank +this layout):\n%s", d)
			}
			for _, tc := range []struct {
				name   string
				script func(toks, drafts []int32)
			}{{"mtp drafts", nil}, {"scripted drafts", scriptFrom(reqs, plain, cfg.VocabSize)}} {
				got, st := run(mtpConfig(3), tc.script)
				if d := cmp.Diff(plain, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
					t.Errorf("%s: constrained speculative decoding differs from constrained plain decoding (-plain +spec):\n%s", tc.name, d)
				}
				s := st.Spec
				if s.DraftTokens == 0 || s.AcceptedTokens == s.DraftTokens || s.AcceptedPerPos[2] == 0 {
					t.Errorf("%s: %d of %d drafts accepted (per position %v): want drafts kept at every position and some rejected",
						tc.name, s.AcceptedTokens, s.DraftTokens, s.PerPos())
				}
				t.Logf("%s: %d rounds, %d drafts, %d accepted (per position %v)", tc.name, s.Drafts, s.DraftTokens, s.AcceptedTokens, s.PerPos())
			}
		})
	}
}

// BenchmarkStructuredDecode: the cost of structured output in decoding.
// One greedy request per iteration on glm5-mini and glm5-shape (random
// weights, one rank), constrained by a small and by the large benchmark
// schema (grammar/testdata), against the same request unconstrained with
// as many tokens (ignore EOS, max tokens = the constrained output's
// length): both take the same steps, so the difference is what masking
// costs (the matcher's FillMask and Accept and the sampler's mask). The
// grammar is compiled before the loop (as the server's Compiler keeps it);
// every iteration starts a fresh matcher, as a request does.
func BenchmarkStructuredDecode(b *testing.B) {
	large, err := os.ReadFile("../grammar/testdata/large-schema.json")
	if err != nil {
		b.Fatal(err)
	}
	schemas := []struct{ name, text string }{
		{"small", `{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":0,"maximum":99},"tag":{"enum":["x","yy"]}},"required":["ok","n","tag"],"additionalProperties":false}`},
		{"large", string(large)},
	}
	tok, err := tokenizer.Default()
	if err != nil {
		b.Fatal(err)
	}
	for _, preset := range []string{"glm5-mini", "glm5-shape"} {
		cfg, src, err := model.Source(preset, model.DefaultWeightSeed)
		if err != nil {
			b.Fatal(err)
		}
		m, err := model.Build(cfg, src, model.Shard{TPSize: 1})
		if err != nil {
			b.Fatal(err)
		}
		v, err := grammar.VocabFromTokenizer(tok, cfg.VocabSize)
		if err != nil {
			b.Fatal(err)
		}
		o := Options{MaxNumBatchedTokens: 32, MaxNumSeqs: 2, MaxModelLen: 96, BlockSize: 16, KVDType: kvcache.KVF32,
			Layout: kvcache.Layout{N: 1, I: 1}, MemoryLimit: 8 << 30, DisablePrefixCaching: true}
		e, err := New(cfg, WeightBytes(m), SingleRank(m), o)
		if err != nil {
			b.Fatal(err)
		}
		gen := func(b *testing.B, req Request) int {
			ch, err := e.Submit(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for ev := range ch {
				if ev.Err != nil {
					b.Fatal(ev.Err)
				}
				if ev.Finish != FinishAbort {
					n++
				}
			}
			return n
		}
		prompt := []int{11, 200, 3000, 45, 7}
		for _, s := range schemas {
			lim := grammar.DefaultLimits()
			lim.MaxCompileTime = time.Minute // measured, not served: the machine may be loaded
			g, err := grammar.Compile(grammar.Spec{Kind: grammar.KindJSONSchema, NoWhitespace: true, Text: s.text}, v, lim)
			if err != nil {
				b.Fatal(err)
			}
			constrained := Request{ID: "c", PromptIDs: prompt, MaxTokens: 64, StopTokenIDs: cfg.EOSTokenIDs, Constraint: matchers{g}}
			n := gen(b, constrained) // warm-up, and the output's length
			plain := Request{ID: "p", PromptIDs: prompt, MaxTokens: n, IgnoreEOS: true}
			b.Run(fmt.Sprintf("%s/%s", preset, s.name), func(b *testing.B) {
				// Interleaved, so that both see the same load.
				var tPlain, tCons time.Duration
				for b.Loop() {
					for _, tc := range []struct {
						req Request
						t   *time.Duration
					}{{plain, &tPlain}, {constrained, &tCons}} {
						start := time.Now()
						if got := gen(b, tc.req); got != n {
							b.Fatalf("%d tokens, want %d", got, n)
						}
						*tc.t += time.Since(start)
					}
				}
				per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*n) / 1e6 }
				b.ReportMetric(per(tPlain), "plain-ms/token")
				b.ReportMetric(per(tCons), "constrained-ms/token")
				b.ReportMetric(100*(per(tCons)-per(tPlain))/per(tPlain), "overhead-%")
				b.ReportMetric(float64(n), "tokens")
			})
		}
		e.Close()
	}
}
