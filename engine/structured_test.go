package engine

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/grammar"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/tokenizer"
)

// matchers makes one grammar matcher per sequence.
type matchers struct{ g *grammar.Grammar }

func (m matchers) NewConstraint(end []int, maxTokens int) (sampler.Constraint, error) {
	return m.g.NewMatcher(grammar.MatcherOptions{EndTokens: end, MaxTokens: maxTokens})
}

// refusing allows every token and then refuses the one drawn.
type refusing struct{ words int }

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
		f, weights := SingleRank(m), WeightBytes(m)
		if dcp > 1 {
			l := comm.Layout{TP: dcp, PCP: 1, DCP: dcp}
			bp, err := cp.NewBackendPlan(cp.BackendConfig{Layout: l, Interleave: 1, BlockSize: 8 / dcp, KVDtype: "f32",
				Backend: "auto", Comm: "ag_rs", HeadsPerRank: cfg.NumHeads / dcp, QKNopeHeadDim: cfg.QKNopeHeadDim, Sparse: true})
			if err != nil {
				t.Fatal(err)
			}
			if f, weights, err = InProcess(cfg, model.RandomTensors(cfg, model.DefaultWeightSeed), Parallel{Layout: l, Interleave: 1, Backend: bp}); err != nil {
				t.Fatal(err)
			}
		}
		o := forkOptions(cfg, dcp)
		o.DisablePrefixCaching = true
		e, err := New(cfg, weights, f, o)
		if err != nil {
			t.Fatal(err)
		}
		run := func(req Request) [][]int32 {
			finished := e.Stats().Finished + int64(max(req.N, 1))
			warmSleep()
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
		fewest := uint64(1 << 62)
		for range 3 {
			st0 := e.Stats()
			run(Request{ID: "json", PromptIDs: prompt, MaxTokens: 24, N: 2, StopTokenIDs: cfg.EOSTokenIDs,
				Sampling: sampler.Params{Temperature: 1, TopP: 1, Seed: 5}, Constraint: matchers{g}})
			st := e.Stats()
			fewest = min(fewest, st.DecodeStepAllocs-st0.DecodeStepAllocs)
		}
		if dcp == 1 && fewest != 0 {
			t.Errorf("constrained decode steps made %d heap allocations", fewest)
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
