package server

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// TestDashboardMatchesMetrics: every series docs/grafana-dashboard.json
// queries is one /metrics exports, of the right type, carrying the
// model_name label the dashboard selects on.
func TestDashboardMatchesMetrics(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, nil)
	e.post(t, "/v1/completions", `{"prompt":"hi","max_tokens":3}`)
	fams := e.scrape(t)
	name := regexp.MustCompile(`vllm:[a-z0-9_]+`)
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	seen := 0
	for _, expr := range exprs {
		for _, series := range name.FindAllString(expr, -1) {
			seen++
			base, kind := series, dto.MetricType_GAUGE
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(series, suf); ok {
					base, kind = b, dto.MetricType_HISTOGRAM
				}
			}
			f, ok := fams[base]
			if !ok {
				t.Errorf("the dashboard queries %s; /metrics has no %s", series, base)
				continue
			}
			if kind == dto.MetricType_HISTOGRAM && f.GetType() != kind {
				t.Errorf("%s is a %v, the dashboard reads it as a histogram", base, f.GetType())
			}
			for _, m := range f.GetMetric() {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == "model_name" && l.GetValue() == testModel)
				}
				if !found {
					t.Errorf("%s has a series without model_name=%q", base, testModel)
				}
			}
		}
	}
	if seen < 20 {
		t.Errorf("only %d series references found in the dashboard", seen)
	}
}
