package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/eval"
)

func TestParseEvalConfig(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want evalConfig
		bad  bool
	}{
		{in: "tp2-pcp2", want: evalConfig{name: "tp2-pcp2", tp: 2, pcp: 2, dcp: 1, interleave: 1, comm: "ag_rs"}},
		{in: "tp1-pcp4-dcp4-i4-a2a", want: evalConfig{name: "tp1-pcp4-dcp4-i4-a2a", tp: 1, pcp: 4, dcp: 4, interleave: 4, comm: "a2a"}},
		{in: "tp0", bad: true},
		{in: "ep2", bad: true},
	} {
		got, err := parseEvalConfig(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%q accepted", tc.in)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(evalConfig{})); d != "" {
			t.Errorf("%q: %s", tc.in, d)
		}
	}
}

// The eval lanes through the real server: every configuration completes every
// prompt and agrees with one rank.
func TestEvalLanesAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("serves glm5-mini three times")
	}
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"eval", "--configs", "tp2-dcp2,tp1-pcp2-dcp2-a2a", "--num-prompts", "4", "--max-tokens", "4", "--max-prompt-len", "24", "--json"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var got []eval.Outcome
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(got) != 3 {
		t.Fatalf("%d outcomes, want 3 (tp1 and two lanes)", len(got))
	}
	for _, o := range got {
		if o.Completed != 4 || o.Total != 4 || o.InvalidRate != 0 || o.Agreement != 1 {
			t.Errorf("%+v", o)
		}
	}
}
