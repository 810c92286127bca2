package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cpmla/cpmla/internal/boundedread"
)

// SpecCounters are vLLM's speculative-decoding counters
// (vllm:spec_decode_*) of a server, or their growth over a run.
type SpecCounters struct {
	Drafts, DraftTokens, AcceptedTokens float64
	// AcceptedPerPos[i] is vllm:spec_decode_num_accepted_tokens_per_pos
	// at position i.
	AcceptedPerPos []float64
}

// maxMetricsBytes bounds the /metrics page read.
const maxMetricsBytes = 8 << 20

// ScrapeSpec reads the spec-decode counters from base's /metrics: nil when
// the server exports none (it does not speculate, or serves no metrics).
func ScrapeSpec(ctx context.Context, client *http.Client, base string) (*SpecCounters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil
	}
	// A page cut at the limit could parse as smaller counts: refused whole.
	page, err := boundedread.All(resp.Body, "the page", maxMetricsBytes)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", base, err)
	}
	return parseSpec(bytes.NewReader(page))
}

// parseSpec reads the spec-decode counters of a Prometheus text page.
func parseSpec(r io.Reader) (*SpecCounters, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	sum := func(name string) (float64, bool) {
		f, ok := fams[name]
		if !ok {
			return 0, false
		}
		v := 0.0
		for _, m := range f.GetMetric() {
			v += value(m)
		}
		return v, true
	}
	drafts, ok := sum("vllm:spec_decode_num_drafts_total")
	if !ok {
		return nil, nil
	}
	c := &SpecCounters{Drafts: drafts}
	c.DraftTokens, _ = sum("vllm:spec_decode_num_draft_tokens_total")
	c.AcceptedTokens, _ = sum("vllm:spec_decode_num_accepted_tokens_total")
	for _, m := range fams["vllm:spec_decode_num_accepted_tokens_per_pos_total"].GetMetric() {
		pos, ok := position(m)
		if !ok || pos >= 64 {
			continue // a position beyond any speculation length is not ours to report
		}
		for len(c.AcceptedPerPos) <= pos {
			c.AcceptedPerPos = append(c.AcceptedPerPos, 0)
		}
		c.AcceptedPerPos[pos] += value(m)
	}
	return c, nil
}

// value is a counter's value, or an untyped sample's (a page without
// TYPE lines).
func value(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetUntyped().GetValue()
}

// position is m's position label.
func position(m *dto.Metric) (int, bool) {
	for _, l := range m.GetLabel() {
		if l.GetName() == "position" {
			p, err := strconv.Atoi(l.GetValue())
			return p, err == nil && p >= 0
		}
	}
	return 0, false
}

// Since is c's growth after an earlier reading (nil: the server started
// exporting during the run, and all of c is growth).
func (c *SpecCounters) Since(before *SpecCounters) *SpecCounters {
	if before == nil {
		return c
	}
	d := &SpecCounters{Drafts: c.Drafts - before.Drafts, DraftTokens: c.DraftTokens - before.DraftTokens,
		AcceptedTokens: c.AcceptedTokens - before.AcceptedTokens, AcceptedPerPos: make([]float64, len(c.AcceptedPerPos))}
	for i, v := range c.AcceptedPerPos {
		d.AcceptedPerPos[i] = v
		if i < len(before.AcceptedPerPos) {
			d.AcceptedPerPos[i] -= before.AcceptedPerPos[i]
		}
	}
	return d
}

// AcceptanceRate is the accepted share of the draft tokens.
func (c *SpecCounters) AcceptanceRate() float64 {
	if c.DraftTokens == 0 {
		return 0
	}
	return c.AcceptedTokens / c.DraftTokens
}

// AcceptanceLength is the tokens one verification yields on average: the
// accepted drafts plus the target's own token.
func (c *SpecCounters) AcceptanceLength() float64 {
	if c.Drafts == 0 {
		return 0
	}
	return 1 + c.AcceptedTokens/c.Drafts
}

// PerPosRates is the acceptance rate of every draft position.
func (c *SpecCounters) PerPosRates() []float64 {
	out := make([]float64, len(c.AcceptedPerPos))
	for i, v := range c.AcceptedPerPos {
		if c.Drafts > 0 {
			out[i] = v / c.Drafts
		}
	}
	return out
}
