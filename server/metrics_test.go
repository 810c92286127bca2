package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cpmla/cpmla/spec"
)

// scrape reads /metrics and parses the text exposition.
func (e *testEnv) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := e.hc.Get(e.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

func TestMetrics(t *testing.T) {
	stats := fakeStats{kv: []float64{0.125, 0.75, 0}, collective: 2.5, builds: 3}
	e := newTestEnv(t, func(_ *fakeEngine, c *Config) { c.Stats = stats })
	ctx := context.Background()
	// Three requests of known sizes: prompt ids given, max tokens 2, 5 and
	// the whole reply (which ends with EOS).
	sizes := []int64{2, 5, 100}
	var wantPrompt, wantGen float64
	for _, n := range sizes {
		p := completionParams("", n)
		p.Prompt = openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{0, 1, 2}}
		if _, err := e.client.Completions.New(ctx, p); err != nil {
			t.Fatal(err)
		}
		wantPrompt += 3
		wantGen += float64(min(int(n), len(e.fake.script)))
	}
	e.post(t, "/v1/completions", `{"prompt":"x","n":30}`) // refused: counted as rejected

	fams := e.scrape(t)
	value := func(name string) float64 {
		f, ok := fams[name]
		if !ok || len(f.Metric) == 0 {
			t.Errorf("metric %s missing", name)
			return -1
		}
		m := f.Metric[0]
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
		return -1
	}
	got := map[string]float64{}
	for _, name := range []string{
		"vllm:prompt_tokens_total", "vllm:generation_tokens_total",
		"vllm:num_requests_waiting", "vllm:num_requests_running",
		"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
		"vllm:collective_seconds_total", "vllm:kernel_plans_built_after_warmup_total", "vllm:request_rejected_total",
	} {
		got[name] = value(name)
	}
	want := map[string]float64{
		"vllm:prompt_tokens_total":     wantPrompt,
		"vllm:generation_tokens_total": wantGen,
		"vllm:num_requests_waiting":    0,
		"vllm:num_requests_running":    0,
		// One first token per request, every other token one gap.
		"vllm:time_to_first_token_seconds":           float64(len(sizes)),
		"vllm:inter_token_latency_seconds":           wantGen - float64(len(sizes)),
		"vllm:e2e_request_latency_seconds":           float64(len(sizes)),
		"vllm:collective_seconds_total":              stats.collective,
		"vllm:kernel_plans_built_after_warmup_total": float64(stats.builds),
		"vllm:request_rejected_total":                1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	kv := map[string]float64{}
	for _, m := range fams["vllm:kv_cache_usage_perc"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "rank" {
				kv[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if diff := cmp.Diff(map[string]float64{"0": 0.125, "1": 0.75, "2": 0}, kv); diff != "" {
		t.Errorf("KV usage per rank (-want +got):\n%s", diff)
	}
	reasons := map[string]float64{}
	for _, m := range fams["vllm:request_success_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["model_name"] != testModel || labels["engine"] != "0" {
			t.Errorf("request_success_total labels %v, want model_name %q and engine 0", labels, testModel)
		}
		reasons[labels["finished_reason"]] = m.GetCounter().GetValue()
	}
	if diff := cmp.Diff(map[string]float64{"length": 2, "stop": 1}, reasons); diff != "" {
		t.Errorf("finished requests by reason (-want +got):\n%s", diff)
	}
}

// kvOnly is a Stats without collective timing.
type kvOnly struct{}

func (kvOnly) KVUsage() []float64            { return []float64{1} }
func (kvOnly) PlanBuildsAfterWarmup() uint64 { return 0 }

func TestCollectiveMetricIsOptional(t *testing.T) {
	e := newTestEnv(t, func(_ *fakeEngine, c *Config) { c.Stats = kvOnly{} })
	fams := e.scrape(t)
	if _, ok := fams["vllm:collective_seconds_total"]; ok {
		t.Error("collective time exported for a Stats that does not measure it")
	}
	if got := fams["vllm:kv_cache_usage_perc"].GetMetric()[0].GetGauge().GetValue(); got != 1 {
		t.Errorf("KV usage %v, want 1", got)
	}
}

// specOn is a Stats of an engine that speculates.
type specOn struct {
	kvOnly
	st spec.Stats
}

func (s specOn) SpecDecode() (spec.Stats, bool) { return s.st, true }

// specOff implements SpecStats for an engine with speculation off.
type specOff struct{ kvOnly }

func (specOff) SpecDecode() (spec.Stats, bool) { return spec.Stats{}, false }

// TestSpecDecodeMetrics: vLLM's spec-decode counters, with one
// per-position series per draft position, are exported when the engine
// speculates and left out when it does not.
func TestSpecDecodeMetrics(t *testing.T) {
	st := spec.NewStats(3)
	for _, a := range []int{3, 1, 0, 2} {
		st.Add(3, a)
	}
	e := newTestEnv(t, func(_ *fakeEngine, c *Config) { c.Stats = specOn{st: st} })
	fams := e.scrape(t)
	got := map[string]float64{}
	for _, name := range []string{"vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"} {
		got[name] = fams[name].GetMetric()[0].GetCounter().GetValue()
	}
	for _, m := range fams["vllm:spec_decode_num_accepted_tokens_per_pos_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "position" {
				got["position "+l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		"vllm:spec_decode_num_drafts_total": 4, "vllm:spec_decode_num_draft_tokens_total": 12, "vllm:spec_decode_num_accepted_tokens_total": 6,
		"position 0": 3, "position 1": 2, "position 2": 1,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("spec-decode metrics (-want +got):\n%s", d)
	}
	for _, s := range []Stats{kvOnly{}, specOff{}} {
		fams := newTestEnv(t, func(_ *fakeEngine, c *Config) { c.Stats = s }).scrape(t)
		if _, ok := fams["vllm:spec_decode_num_drafts_total"]; ok {
			t.Errorf("%T: spec-decode counters exported without speculation", s)
		}
	}
}
