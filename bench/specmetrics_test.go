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
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// specPage is a /metrics page with the spec-decode counters of a server
// that has verified drafts rounds of 3 drafts.
func specPage(drafts int) string {
	return fmt.Sprintf(`# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} %d
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} %d
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} %d
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} %d
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} %d
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} %d
`, drafts, 3*drafts, drafts*6/4, drafts/4, drafts*3/4, drafts*2/4)
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		page string
		want *SpecCounters
	}{
		{"counters", specPage(8), &SpecCounters{Drafts: 8, DraftTokens: 24, AcceptedTokens: 12, AcceptedPerPos: []float64{6, 4, 2}}},
		{"no speculation", "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n", nil},
		{"empty page", "", nil},
		{"position beyond any K ignored", "vllm:spec_decode_num_drafts_total 1\nvllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"100000\"} 1\n",
			&SpecCounters{Drafts: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSpec(strings.NewReader(tc.page))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	if _, err := parseSpec(strings.NewReader("vllm:spec_decode_num_drafts_total{ 1\n")); err == nil {
		t.Error("a malformed page parsed")
	}
}

// TestRunReportsSpecDecode: bench serve reads the server's spec-decode
// counters before and after the run and reports their growth, in the
// summary and in the result file.
func TestRunReportsSpecDecode(t *testing.T) {
	ss := &scriptedServer{}
	var scrapes atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			drafts := 4 // before the run: counters of earlier traffic
			if scrapes.Add(1) > 1 {
				drafts = 12
			}
			fmt.Fprint(w, specPage(drafts))
			return
		}
		ss.ServeHTTP(w, r)
	}))
	defer hs.Close()
	res, err := Run(context.Background(), Options{BaseURL: hs.URL, Endpoint: EndpointCompletions,
		Prompts: []Prompt{{IDs: []int{1, 2}, OutputLen: 3}}, RequestRate: math.Inf(1)})
	if err != nil {
		t.Fatal(err)
	}
	want := &SpecCounters{Drafts: 8, DraftTokens: 24, AcceptedTokens: 12, AcceptedPerPos: []float64{6, 4, 2}} // 12 − 4 rounds
	if d := cmp.Diff(want, res.Spec); d != "" {
		t.Fatalf("spec-decode growth (-want +got):\n%s", d)
	}
	var report bytes.Buffer
	if err := res.WriteReport(&report); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(report.String()), " ")
	for _, line := range []string{"Acceptance rate (%): 50.00", "Acceptance length: 2.50", "Per-position acceptance (%): 75.00, 50.00, 25.00"} {
		if !strings.Contains(text, line) {
			t.Errorf("report lacks %q:\n%s", line, report.String())
		}
	}
	var file bytes.Buffer
	if err := res.WriteJSON(&file); err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(file.Bytes(), &keys); err != nil {
		t.Fatal(err)
	}
	if keys["spec_decode_acceptance_length"] != 2.5 || keys["spec_decode_num_drafts"] != 8.0 {
		t.Errorf("result file spec keys: length %v, drafts %v", keys["spec_decode_acceptance_length"], keys["spec_decode_num_drafts"])
	}
}

// A page longer than the bound is refused, not read as the counters of
// its first 8 MiB.
func TestScrapeSpecRefusesAnOverlongPage(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, specPage(8))
		w.Write(bytes.Repeat([]byte("# padding\n"), maxMetricsBytes/10+1))
	}))
	defer hs.Close()
	if c, err := ScrapeSpec(context.Background(), hs.Client(), hs.URL); err == nil || !strings.Contains(err.Error(), "longer than the 8388608 bytes read") {
		t.Errorf("got %+v, %v; want a refusal naming the bound", c, err)
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add(specPage(8))
	f.Add("vllm:spec_decode_num_drafts_total 1\nvllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"3\"} 2\n")
	f.Add("vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"-1\"} 2\nvllm:spec_decode_num_drafts_total NaN\n")
	f.Fuzz(func(t *testing.T, page string) {
		c, err := parseSpec(strings.NewReader(page))
		if err != nil || c == nil {
			return
		}
		if len(c.AcceptedPerPos) > 64 {
			t.Fatalf("%d positions from a page", len(c.AcceptedPerPos))
		}
		_ = c.Since(c).PerPosRates()
	})
}
