package spec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want *Config
		err  []string
	}{
		{``, nil, nil},
		{`{"method":"mtp","num_speculative_tokens":3}`, &Config{Method: "mtp", NumSpeculativeTokens: 3}, nil},
		{`{"method":"mtp","num_speculative_tokens":1,"parallel_drafting":false,"model":null}`, &Config{Method: "mtp", NumSpeculativeTokens: 1}, nil},
		{`{"method":"eagle","num_speculative_tokens":3}`, nil, []string{"method", "eagle", "mtp"}},
		{`{"method":"mtp","num_speculative_tokens":0}`, nil, []string{"num_speculative_tokens", "0", "1…16"}},
		{`{"method":"mtp","num_speculative_tokens":17}`, nil, []string{"17"}},
		{`{"method":"mtp","num_speculative_tokens":5,"parallel_drafting":true}`, nil, []string{"parallel_drafting", "chain"}},
		{`{"method":"mtp","num_speculative_tokens":2,"model":"other/drafter"}`, nil, []string{"model", "own MTP layer"}},
		{`{"method":"mtp","num_speculative_tokens":2,"draft_tensor_parallel_size":1}`, nil, []string{"draft_tensor_parallel_size", "target's own layout"}},
		{`{"method":"mtp","num_speculative_tokens":2,"prompt_lookup_max":4}`, nil, []string{"prompt_lookup_max", "not implemented"}},
		{`[1]`, nil, []string{"not a JSON object"}},
		{`{"method":"mtp","num_speculative_tokens":"two"}`, nil, []string{"speculative-config"}},
	} {
		got, err := ParseConfig(tc.in)
		if len(tc.err) > 0 {
			if err == nil {
				t.Errorf("%s: accepted as %+v", tc.in, got)
				continue
			}
			for _, w := range tc.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not name %q", tc.in, err, w)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.in, d)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(`{"method":"mtp","num_speculative_tokens":3}`)
	f.Add(`{"parallel_drafting":true}`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig(s)
		if err == nil && c != nil && (c.Method != "mtp" || c.K() < 1 || c.K() > MaxTokens) {
			t.Fatalf("accepted %+v", c)
		}
	})
}

func TestAcceptGreedy(t *testing.T) {
	for _, tc := range []struct {
		drafts, target []int32 // target has len(drafts)+1 entries
		accepted       int
		next           int32
		calls          int
	}{
		{[]int32{5, 6, 7}, []int32{5, 6, 7, 8}, 3, 8, 4},
		{[]int32{5, 6, 7}, []int32{5, 9, 7, 8}, 1, 9, 2},
		{[]int32{5, 6, 7}, []int32{4, 6, 7, 8}, 0, 4, 1},
		{nil, []int32{3}, 0, 3, 1},
	} {
		calls := 0
		a, next := AcceptGreedy(tc.drafts, func(i int) int32 {
			if i != calls {
				t.Fatalf("target called for row %d out of order (expected %d)", i, calls)
			}
			calls++
			return tc.target[i]
		})
		if a != tc.accepted || next != tc.next || calls != tc.calls {
			t.Errorf("drafts %v target %v: accepted %d next %d after %d calls; want %d, %d, %d", tc.drafts, tc.target, a, next, calls, tc.accepted, tc.next, tc.calls)
		}
	}
}

func TestStats(t *testing.T) {
	s := NewStats(3)
	s.Add(3, 3)
	s.Add(3, 1)
	s.Add(3, 0)
	o := NewStats(3)
	o.Add(3, 2)
	s.Merge(o)
	if d := cmp.Diff(Stats{K: 3, Drafts: 4, DraftTokens: 12, AcceptedTokens: 6, AcceptedPerPos: [MaxTokens]int64{3, 2, 1}}, s); d != "" {
		t.Error(d)
	}
	if got := s.MeanAcceptanceLength(); got != 2.5 {
		t.Errorf("mean acceptance length %v, want 2.5", got)
	}
	if d := cmp.Diff([]float64{0.75, 0.5, 0.25}, s.AcceptanceRatePerPos()); d != "" {
		t.Error(d)
	}
}
