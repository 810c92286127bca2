package eval

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/bench"
)

// lane builds a lane whose answers are texts (problem i answered "#### texts[i]"
// for a problem whose answer is i) and passkey replies (correct when true).
func lane(name string, k int, texts []string, keys []bool, sd *bench.SpecCounters) LaneResult {
	r := LaneResult{Lane: name, K: k, SpecDecode: sd, Agreement: []Completion{{OK: true, Text: "a"}, {OK: true, Text: "b"}}}
	for i, t := range texts {
		r.Arithmetic = append(r.Arithmetic, ScoreArithmetic(Problem{Answer: i}, Reply{OK: true, Text: "#### " + t}))
	}
	for i, ok := range keys {
		c := PasskeyCase{Length: 512 << (i % 2), Depth: 0.5, Key: 10000 + i}
		text := "The pass key is 99999."
		if ok {
			text = fmt.Sprintf("The pass key is %d.", c.Key)
		}
		r.Passkey = append(r.Passkey, ScorePasskey(c, Reply{OK: true, Text: text}))
	}
	return r
}

func TestCompare(t *testing.T) {
	texts := []string{"0", "1", "7", "3"} // problem 2 wrong
	keys := []bool{true, false, true, true}
	sd := func(acc ...float64) *bench.SpecCounters {
		return &bench.SpecCounters{Drafts: 40, DraftTokens: 80, AcceptedTokens: acc[0] + acc[1], AcceptedPerPos: acc}
	}
	t.Run("identical lanes pass", func(t *testing.T) {
		results := []LaneResult{lane("tp1", 0, texts, keys, nil), lane("tp1+mtp2", 2, texts, keys, sd(30, 20)), lane("tp2-pcp2+mtp2", 2, texts, keys, sd(30, 20))}
		rep := Compare("m", results, 1)
		if len(rep.Failures) != 0 || !rep.IdenticalAccuracy || !rep.IdenticalAcceptance {
			t.Fatalf("%+v", rep)
		}
		l := rep.Lanes[2]
		want := ArithmeticScore{N: 4, Formatted: 4, StrictCorrect: 3, FlexibleCorrect: 3, StrictMatch: 0.75, FlexibleExtract: 0.75}
		if d := cmp.Diff(want, *l.Arithmetic); d != "" {
			t.Error(d)
		}
		wantPK := PasskeyScore{Correct: 3, Total: 4, ByLength: []LengthScore{{512, 2, 2}, {1024, 1, 2}}}
		if d := cmp.Diff(wantPK, *l.Passkey); d != "" {
			t.Error(d)
		}
		if d := cmp.Diff([]float64{0.75, 0.5}, l.MTP.AcceptanceRatePerPos); d != "" || l.MTP.MeanAcceptanceLength != 2.25 {
			t.Errorf("%s, mean acceptance length %v", d, l.MTP.MeanAcceptanceLength)
		}
		if l.AgreesWithReference != 1 || rep.Lanes[0].MTP != nil || l.ArithmeticSamples != nil {
			t.Errorf("%+v", rep.Lanes)
		}
		if s := rep.WithSamples(results).Lanes[2]; len(s.ArithmeticSamples) != 4 || s.ArithmeticSamples[2].Text != "#### 7" || len(s.PasskeySamples) != 4 {
			t.Errorf("samples %+v", s)
		}
		var b bytes.Buffer
		if err := rep.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"AGREES WITH TP1", "0.750 / 0.750 (4; 4 in format)", "3/4 (512: 2/2, 1024: 1/2)", "75.0% 50.0% (40 drafts)", "tp2-pcp2+mtp2"} {
			if !strings.Contains(b.String(), s) {
				t.Errorf("table lacks %q:\n%s", s, b.String())
			}
		}
	})
	t.Run("a lane scoring otherwise fails", func(t *testing.T) {
		bad := append([]string(nil), texts...)
		bad[1] = "9"
		rep := Compare("m", []LaneResult{lane("tp1", 0, texts, keys, nil), lane("tp1-pcp4", 0, bad, keys, nil)}, 0)
		if rep.IdenticalAccuracy || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "tp1-pcp4 scores problem 1 otherwise than tp1") {
			t.Errorf("%+v", rep.Failures)
		}
	})
	t.Run("a passkey lane scoring otherwise fails", func(t *testing.T) {
		bad := append([]bool(nil), keys...)
		bad[1] = true
		rep := Compare("m", []LaneResult{lane("tp1", 0, texts, keys, nil), lane("tp1-pcp4", 0, texts, bad, nil)}, 0)
		if rep.IdenticalAccuracy || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "passkey case 1 (length 1024") {
			t.Errorf("%+v", rep.Failures)
		}
	})
	t.Run("another text with the same score fails the agreement only", func(t *testing.T) {
		other := lane("tp1-pcp4-dcp4", 0, texts, keys, nil)
		other.Arithmetic[2].Text = "#### 8" // wrong either way
		rep := Compare("m", []LaneResult{lane("tp1", 0, texts, keys, nil), other}, 1)
		if !rep.IdenticalAccuracy || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "agrees with tp1 on 0.900 of its requests") {
			t.Errorf("%+v", rep.Failures)
		}
		if !strings.Contains(strings.Join(rep.Lanes[1].Problems, "\n"), `problem 2: "#### 8" differs from tp1's "#### 7"`) {
			t.Errorf("problems %q", rep.Lanes[1].Problems)
		}
	})
	t.Run("acceptance differing across lanes fails", func(t *testing.T) {
		rep := Compare("m", []LaneResult{lane("tp1", 0, texts, keys, nil), lane("tp1+mtp2", 2, texts, keys, sd(30, 20)), lane("tp1-pcp4+mtp2", 2, texts, keys, sd(30, 19))}, 1)
		if rep.IdenticalAcceptance || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "tp1-pcp4+mtp2 accepts otherwise than tp1+mtp2: accepted per position [30 19] against [30 20]") {
			t.Errorf("%+v", rep.Failures)
		}
	})
	t.Run("a speculative lane without counters fails", func(t *testing.T) {
		rep := Compare("m", []LaneResult{lane("tp1", 0, texts, keys, nil), lane("tp1+mtp1", 1, texts, keys, nil)}, 1)
		if rep.IdenticalAcceptance || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "no spec-decode counters") {
			t.Errorf("%+v", rep.Failures)
		}
	})
	t.Run("failed requests never agree", func(t *testing.T) {
		down := lane("tp2-pcp2", 0, texts, keys, nil)
		down.Passkey[0].OK, down.Passkey[0].Problem, down.Passkey[0].Correct = false, "HTTP 503", false
		rep := Compare("m", []LaneResult{lane("tp1", 0, texts, keys, nil), down}, 1)
		if rep.IdenticalAccuracy || rep.Lanes[1].Passkey.Invalid != 1 || rep.Lanes[1].AgreesWithReference != 0.9 {
			t.Errorf("%+v %+v", rep.Failures, rep.Lanes[1])
		}
	})
}
