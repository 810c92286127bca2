package eval

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// vLLM's spec-decode counters, as a server exports them on /metrics with the
// "vllm:" prefix.
const (
	metricDrafts         = "spec_decode_num_drafts_total"
	metricDraftTokens    = "spec_decode_num_draft_tokens_total"
	metricAccepted       = "spec_decode_num_accepted_tokens_total"
	metricAcceptedPerPos = "spec_decode_num_accepted_tokens_per_pos_total"
)

// Bounds of a /metrics page eval reads.
const (
	MaxMetricsBytes = 8 << 20
	MaxMetricsLine  = 64 << 10
	// MaxSpecPositions bounds the position label (vLLM speculates at most
	// a few tokens).
	MaxSpecPositions = 64
)

// SpecDecode are the spec-decode counters of a server (summed over its
// engines): rounds, draft tokens proposed, accepted, and accepted at each
// draft position.
type SpecDecode struct {
	Drafts         int64   `json:"num_drafts"`
	DraftTokens    int64   `json:"num_draft_tokens"`
	AcceptedTokens int64   `json:"num_accepted_tokens"`
	AcceptedPerPos []int64 `json:"num_accepted_tokens_per_pos"`
}

// Sub is the counts of s since before.
func (s SpecDecode) Sub(before SpecDecode) SpecDecode {
	d := SpecDecode{Drafts: s.Drafts - before.Drafts, DraftTokens: s.DraftTokens - before.DraftTokens, AcceptedTokens: s.AcceptedTokens - before.AcceptedTokens}
	d.AcceptedPerPos = make([]int64, len(s.AcceptedPerPos))
	for i, v := range s.AcceptedPerPos {
		d.AcceptedPerPos[i] = v
		if i < len(before.AcceptedPerPos) {
			d.AcceptedPerPos[i] -= before.AcceptedPerPos[i]
		}
	}
	return d
}

// AcceptanceRatePerPos is vLLM's acceptance rate at each draft position:
// the tokens accepted there over the drafts.
func (s SpecDecode) AcceptanceRatePerPos() []float64 {
	out := make([]float64, len(s.AcceptedPerPos))
	for i, v := range s.AcceptedPerPos {
		if s.Drafts > 0 {
			out[i] = float64(v) / float64(s.Drafts)
		}
	}
	return out
}

// ParseSpecDecode reads the spec-decode counters named prefix+metric… from
// a Prometheus text exposition (other metrics are skipped). found is false
// when the page has no drafts counter (a server that does not speculate).
// It refuses a page over MaxMetricsBytes, a line over MaxMetricsLine, a
// value that is not a non-negative integer below 2^53, a position label
// outside [0, MaxSpecPositions), a series given twice, and a malformed line
// of one of these metrics, each by name.
func ParseSpecDecode(page []byte, prefix string) (s SpecDecode, found bool, err error) {
	if len(page) > MaxMetricsBytes {
		return s, false, fmt.Errorf("metrics: the page has %d bytes, more than %d", len(page), MaxMetricsBytes)
	}
	seen := map[string]bool{}
	perPos := map[int]int64{}
	maxPos := -1
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 0, 4096), MaxMetricsLine)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.IndexAny(line, "{ \t")
		if i < 0 {
			i = len(line)
		}
		metric, ours := strings.CutPrefix(line[:i], prefix)
		if !ours || !strings.HasPrefix(metric, "spec_decode_") {
			continue
		}
		rest, labels := line[i:], ""
		if strings.HasPrefix(rest, "{") {
			var ok bool
			if labels, rest, ok = cutLabels(rest[1:]); !ok {
				return s, false, fmt.Errorf("metrics line %d: %s%s has unterminated labels", n, prefix, metric)
			}
		}
		var dst *int64
		switch metric {
		case metricDrafts:
			dst, found = &s.Drafts, true
		case metricDraftTokens:
			dst = &s.DraftTokens
		case metricAccepted:
			dst = &s.AcceptedTokens
		case metricAcceptedPerPos:
		default:
			continue
		}
		key := metric + "{" + labels + "}"
		if seen[key] {
			return s, false, fmt.Errorf("metrics line %d: series %s%s appears twice", n, prefix, key)
		}
		seen[key] = true
		fields := strings.Fields(rest)
		if len(fields) < 1 || len(fields) > 2 { // a value and an optional timestamp
			return s, false, fmt.Errorf("metrics line %d: %s%s wants a value (and optionally a timestamp), got %q", n, prefix, metric, rest)
		}
		v, err := counterValue(fields[0])
		if err != nil {
			return s, false, fmt.Errorf("metrics line %d: %s%s: %w", n, prefix, metric, err)
		}
		if metric == metricAcceptedPerPos {
			pos, err := positionLabel(labels)
			if err != nil {
				return s, false, fmt.Errorf("metrics line %d: %s%s: %w", n, prefix, metric, err)
			}
			perPos[pos] += v
			maxPos = max(maxPos, pos)
			continue
		}
		*dst += v
		if *dst > 1<<53 {
			return s, false, fmt.Errorf("metrics line %d: %s%s sums past 2^53", n, prefix, metric)
		}
	}
	if err := sc.Err(); err != nil {
		return s, false, fmt.Errorf("metrics: %w (a line may have at most %d bytes)", err, MaxMetricsLine)
	}
	s.AcceptedPerPos = make([]int64, maxPos+1)
	for p, v := range perPos {
		if v > 1<<53 {
			return s, false, fmt.Errorf("metrics: %s%s position %d sums past 2^53", prefix, metricAcceptedPerPos, p)
		}
		s.AcceptedPerPos[p] = v
	}
	return s, found, nil
}

// cutLabels splits `k="v",...}rest` at the closing brace outside quotes.
func cutLabels(s string) (labels, rest string, ok bool) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// positionLabel is the integer value of the position label of labels.
func positionLabel(labels string) (int, error) {
	for rest := labels; rest != ""; {
		rest = strings.TrimLeft(rest, " ,")
		if rest == "" {
			break
		}
		k, after, ok := strings.Cut(rest, "=")
		if !ok || !strings.HasPrefix(after, `"`) {
			return 0, fmt.Errorf("malformed labels {%s}", labels)
		}
		end := -1
		for i := 1; i < len(after); i++ {
			if after[i] == '\\' {
				i++
				continue
			}
			if after[i] == '"' {
				end = i
				break
			}
		}
		if end < 0 {
			return 0, fmt.Errorf("malformed labels {%s}", labels)
		}
		if strings.TrimSpace(k) == "position" {
			p, err := strconv.Atoi(after[1:end])
			if err != nil || p < 0 || p >= MaxSpecPositions {
				return 0, fmt.Errorf("position %q is not an integer in [0, %d)", after[1:end], MaxSpecPositions)
			}
			return p, nil
		}
		rest = after[end+1:]
	}
	return 0, fmt.Errorf("labels {%s} have no position", labels)
}

// counterValue parses a counter's sample value, which must be a
// non-negative integer below 2^53 (Prometheus writes counts as floats).
func counterValue(s string) (int64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v >= 1<<53 || v != math.Trunc(v) {
		return 0, fmt.Errorf("value %q is not a count (a non-negative integer below 2^53)", s)
	}
	return int64(v), nil
}

// FetchSpecDecode reads baseURL's /metrics and its spec-decode counters.
func FetchSpecDecode(ctx context.Context, client *http.Client, baseURL, prefix string) (SpecDecode, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return SpecDecode{}, false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return SpecDecode{}, false, err
	}
	defer resp.Body.Close()
	page, err := readBounded(resp.Body, MaxMetricsBytes, "the /metrics page")
	if err != nil {
		return SpecDecode{}, false, err
	}
	if resp.StatusCode != http.StatusOK {
		return SpecDecode{}, false, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	return ParseSpecDecode(page, prefix)
}
