package eval

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A page as the server writes it (and as vLLM does, with several engines).
const specPage = `# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="cpmla-tiny"} 120
vllm:spec_decode_num_drafts_total{engine="1",model_name="cpmla-tiny"} 30
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="cpmla-tiny"} 300
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="cpmla-tiny"} 200
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="cpmla-tiny",position="0"} 110
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="cpmla-tiny",position="1"} 9e+01
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="a,b=\"}\"",position="1"} 1
vllm:prompt_tokens_total{engine="0",model_name="cpmla-tiny"} 4096
cpmla:spec_decode_num_drafts_total 7
vllm:spec_decode_unknown_total 3
`

func TestParseSpecDecode(t *testing.T) {
	got, found, err := ParseSpecDecode([]byte(specPage), "vllm:")
	if err != nil || !found {
		t.Fatal(found, err)
	}
	want := SpecDecode{Drafts: 150, DraftTokens: 300, AcceptedTokens: 200, AcceptedPerPos: []int64{110, 91}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if d := cmp.Diff([]float64{110.0 / 150, 91.0 / 150}, got.AcceptanceRatePerPos()); d != "" {
		t.Error(d)
	}
	before := SpecDecode{Drafts: 50, DraftTokens: 100, AcceptedTokens: 20, AcceptedPerPos: []int64{10, 10}}
	if d := cmp.Diff(SpecDecode{Drafts: 100, DraftTokens: 200, AcceptedTokens: 180, AcceptedPerPos: []int64{100, 81}}, got.Sub(before)); d != "" {
		t.Errorf("Sub: %s", d)
	}
	if _, found, err := ParseSpecDecode([]byte("vllm:prompt_tokens_total 4\n"), "vllm:"); found || err != nil {
		t.Errorf("a page without spec-decode counters: found %v, %v", found, err)
	}
	other, found, err := ParseSpecDecode([]byte(specPage), "cpmla:")
	if err != nil || !found || other.Drafts != 7 {
		t.Errorf("prefix cpmla: %+v %v %v", other, found, err)
	}
}

func TestParseSpecDecodeRefusals(t *testing.T) {
	const d = "vllm:spec_decode_num_drafts_total"
	const p = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
	for _, tc := range []struct{ page, want string }{
		{d + " -1", "not a count"},
		{d + " NaN", "not a count"},
		{d + " +Inf", "not a count"},
		{d + " 1.5", "not a count"},
		{d + " 9007199254740992", "not a count"},
		{d + " 1 2 3", "wants a value"},
		{d + "{engine=\"0\"", "unterminated labels"},
		{d + "{engine=\"0\"} 1\n" + d + "{engine=\"0\"} 2", "appears twice"},
		{p + `{position="64"} 1`, "not an integer in [0, 64)"},
		{p + `{position="-1"} 1`, "not an integer in [0, 64)"},
		{p + `{position="x"} 1`, "not an integer"},
		{p + `{engine="0"} 1`, "have no position"},
		{p + `{position} 1`, "malformed labels"},
		{p + " 1", "have no position"},
		{d + " " + strings.Repeat("1", MaxMetricsLine), "at most 65536 bytes"},
		{strings.Repeat("#", MaxMetricsBytes+1), "more than 8388608"},
		{d + " 4503599627370496\n" + d + `{engine="1"} 4503599627370496` + "\n" + d + `{engine="2"} 4503599627370496`, "sums past 2^53"},
	} {
		if _, _, err := ParseSpecDecode([]byte(tc.page), "vllm:"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.80q: %v, want %q", tc.page, err, tc.want)
		}
	}
}

func FuzzParseSpecDecode(f *testing.F) {
	f.Add([]byte(specPage))
	f.Add([]byte("vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"3\"} 1\n"))
	f.Add([]byte("vllm:spec_decode_num_drafts_total{a=\"\\\"}\"} 1e3 17\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		s, _, err := ParseSpecDecode(page, "vllm:")
		if err != nil {
			return
		}
		if len(s.AcceptedPerPos) > MaxSpecPositions {
			t.Errorf("%d positions", len(s.AcceptedPerPos))
		}
		for _, v := range append([]int64{s.Drafts, s.DraftTokens, s.AcceptedTokens}, s.AcceptedPerPos...) {
			if v < 0 || v > 1<<53 {
				t.Errorf("count %d", v)
			}
		}
	})
}
