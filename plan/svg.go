package plan

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// maxSVGRanks is the most rank bars the chart draws; larger deployments
// show the first ranks and say how many more share the same breakdown.
const maxSVGRanks = 16

// segment is one stacked part of a rank's memory bar.
type segment struct {
	class, label, color string
	bytes               int64
}

// segments splits a rank's device memory bottom-up: non-KV other than
// workspaces, workspaces, CUDA graphs, KV cache, then the share outside the
// utilization budget: unaccounted memory and free headroom.
func (p *Plan) segments() []segment {
	other := max(p.NonKVBytes-p.WorkspaceBytes, 0)
	ws := p.NonKVBytes - other
	inside := p.NonKVBytes + p.CUDAGraphBytes + max(p.KVBudgetBytes, 0)
	top := max(inside, p.RequestedBytes)
	free := max(p.DeviceMemoryBytes-top-p.UnaccountedBytes, 0)
	return []segment{
		{"seg-nonkv", "weights + activations", "#5b8def", other},
		{"seg-workspace", "workspaces", "#f2a33a", ws},
		{"seg-graphs", "CUDA graphs", "#9b6bd6", p.CUDAGraphBytes},
		{"seg-kv", "KV cache", "#3fae6a", max(p.KVBudgetBytes, 0)},
		{"seg-unaccounted", "unaccounted (outside budget)", "#9aa3ad", p.UnaccountedBytes},
		{"seg-free", "free headroom", "#e4e8ec", free},
	}
}

// niceStep picks a grid step of 1, 2 or 5 × 10^k GiB giving about 8 lines.
func niceStep(maxGiB float64) float64 {
	raw := maxGiB / 8
	if raw <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, f := range []float64{1, 2, 5, 10} {
		if f*mag >= raw {
			return f * mag
		}
	}
	return 10 * mag
}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s)) // writes to a bytes.Buffer cannot fail
	return b.String()
}

// wrap breaks text into lines of at most width characters at spaces.
func wrap(s string, width int) []string {
	var lines []string
	var cur strings.Builder
	for _, w := range strings.Fields(s) {
		if cur.Len() > 0 && cur.Len()+1+len([]rune(w)) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(w)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

// WriteSVG draws the per-rank memory breakdown as a stacked bar chart with
// the utilization line, the autotuner's request, a legend with the sizes
// in GiB, and the warnings with their fixes.
func (p *Plan) WriteSVG(w io.Writer) error {
	n := min(len(p.Ranks), maxSVGRanks)
	const (
		left, top, chartH = 80.0, 110.0, 440.0
		legendW           = 330.0
		gutter            = 130.0 // between the bars and the legend: line labels
		barGap            = 18.0
	)
	barW := math.Min(90, math.Max(28, 640/float64(n)-barGap))
	chartW := float64(n)*(barW+barGap) + barGap
	width := left + chartW + gutter + legendW
	segs := p.segments()
	var stack int64
	for _, s := range segs {
		stack += s.bytes
	}
	scaleTop := max(p.DeviceMemoryBytes, stack)
	autotuneTop := int64(0)
	if p.AutotuneRequestBytes > 0 {
		autotuneTop = max(p.RequestedBytes, p.NonKVBytes+p.CUDAGraphBytes+max(p.KVBudgetBytes, 0)) + p.UnaccountedBytes + p.AutotuneRequestBytes
		scaleTop = max(scaleTop, autotuneTop)
	}
	maxGiB := GiBOf(scaleTop) * 1.04
	y := func(b int64) float64 { return top + chartH - GiBOf(b)/maxGiB*chartH }

	var warnLines []string
	for _, wn := range p.Warnings {
		warnLines = append(warnLines, wrap("["+wn.Code+"] "+wn.Message, int((width-40)/6.3))...)
	}
	height := top + chartH + 78 + float64(len(warnLines))*16 + 20

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">`+"\n", width, height, width, height)
	b.WriteString(`<defs><pattern id="over" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="8" height="8" fill="#f8d7d7"/><line x1="0" y1="0" x2="0" y2="8" stroke="#d0342c" stroke-width="3"/></pattern></defs>` + "\n")
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="20" y="30" font-size="17" font-weight="bold">%s</text>`+"\n", esc("Per-rank memory: "+p.Model+" on "+strings.ToUpper(p.Device)))
	fmt.Fprintf(&b, `<text x="20" y="52" font-size="13">%s</text>`+"\n", esc(fmt.Sprintf("TP %d · PCP %d · DCP %d · gpu-memory-utilization %.4g · max-model-len %d · max-num-batched-tokens %d",
		p.TP, p.PCP, p.DCP, p.GPUMemoryUtilization, p.MaxModelLen, p.MaxNumBatchedTokens)))
	fmt.Fprintf(&b, `<text x="20" y="70" font-size="13">%s</text>`+"\n", esc(fmt.Sprintf("attention backend %s · KV %s + %s indexer key · DCP combine %s",
		orNone(p.AttentionBackend, p.AttentionBackendAlias, p.AttentionBackendOK), p.KVCacheDtype, p.IndexerCacheDtype, p.DCPCommBackend)))
	status := "fits: no warnings"
	statusColor := "#1d7a3e"
	if len(p.Warnings) > 0 {
		status, statusColor = fmt.Sprintf("does not fit as configured: %d warning(s), fixes below", len(p.Warnings)), "#c0281f"
	}
	fmt.Fprintf(&b, `<text x="20" y="92" font-size="13" font-weight="bold" fill="%s">%s</text>`+"\n", statusColor, esc(status))

	// Grid and axis.
	step := niceStep(maxGiB)
	for g := 0.0; g <= maxGiB; g += step {
		yy := top + chartH - g/maxGiB*chartH
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e6e6e6"/>`+"\n", left, yy, left+chartW, yy)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end" fill="#555">%g GiB</text>`+"\n", left-6, yy+4, g)
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top+chartH, left+chartW, top+chartH)

	// Bars.
	for i := 0; i < n; i++ {
		r := p.Ranks[i]
		x := left + barGap + float64(i)*(barW+barGap)
		fmt.Fprintf(&b, `<g class="rank-bar" data-rank="%d">`+"\n", r.Rank)
		var base int64
		for _, s := range segs {
			if s.bytes <= 0 {
				continue
			}
			y0, y1 := y(base+s.bytes), y(base)
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="white" stroke-width="0.5"><title>%s</title></rect>`+"\n",
				s.class, x, y0, barW, y1-y0, s.color, esc(fmt.Sprintf("rank %d %s: %s", r.Rank, s.label, FormatGiB(s.bytes))))
			if y1-y0 >= 15 && barW >= 50 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle" fill="%s">%.2f</text>`+"\n",
					x+barW/2, (y0+y1)/2+4, labelColor(s.class), GiBOf(s.bytes))
			}
			base += s.bytes
			if s.class == "seg-kv" {
				base = max(base, p.RequestedBytes) // the outside share starts at the budget line
			}
		}
		if over := p.NonKVBytes + p.CUDAGraphBytes - p.RequestedBytes; over > 0 {
			fmt.Fprintf(&b, `<rect class="seg-over" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="url(#over)" stroke="#d0342c"><title>%s</title></rect>`+"\n",
				x, y(p.RequestedBytes+over), barW, math.Max(y(p.RequestedBytes)-y(p.RequestedBytes+over), 2), esc(fmt.Sprintf("rank %d over budget by %s: KV budget %s", r.Rank, FormatGiB(over), FormatGiB(p.KVBudgetBytes))))
		}
		if autotuneTop > 0 {
			y0, y1 := y(autotuneTop), y(autotuneTop-p.AutotuneRequestBytes)
			color := "#1d7a3e"
			if p.AutotuneFreeBytes < p.AutotuneRequestBytes {
				color = "#d0342c"
			}
			fmt.Fprintf(&b, `<rect class="autotune" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="%s" stroke-width="2" stroke-dasharray="5,3"><title>%s</title></rect>`+"\n",
				x+3, y0, barW-6, y1-y0, color, esc(fmt.Sprintf("autotuner request %s", FormatGiB(p.AutotuneRequestBytes))))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">rank %d</text>`+"\n", x+barW/2, top+chartH+16, r.Rank)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle" fill="#555">TP%d PCP%d</text>`+"\n", x+barW/2, top+chartH+29, r.TPRank, r.PCPRank)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle" fill="#555">DCP%d</text>`+"\n", x+barW/2, top+chartH+41, r.DCPRank)
		b.WriteString("</g>\n")
	}
	if len(p.Ranks) > n {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#555">%s</text>`+"\n", left, top+chartH+46,
			esc(fmt.Sprintf("ranks %d–%d have the same breakdown", n, len(p.Ranks)-1)))
	}
	// Utilization line and device top.
	yu := y(p.RequestedBytes)
	fmt.Fprintf(&b, `<line class="utilization" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c0281f" stroke-width="1.5" stroke-dasharray="6,4"/>`+"\n", left, yu, left+chartW+8, yu)
	yd := y(p.DeviceMemoryBytes)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-width="1"/>`+"\n", left, yd, left+chartW+8, yd)
	// Line labels sit in the gutter; the utilization label goes below its
	// line when the two lines are close.
	du, dd := yu+14, yd-4
	if yu-yd >= 28 {
		du = yu - 4
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#333">%s</text>`+"\n", left+chartW+12, dd, esc("device "+FormatGiB(p.DeviceMemoryBytes)))
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#c0281f">%s</text>`+"\n", left+chartW+12, du,
		esc(fmt.Sprintf("utilization %.4g", p.GPUMemoryUtilization)))
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#c0281f">%s</text>`+"\n", left+chartW+12, du+13, esc("= "+FormatGiB(p.RequestedBytes)))

	// Legend with the sizes.
	lx, ly := left+chartW+gutter, top+4
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="13" font-weight="bold">Each rank (GiB)</text>`+"\n", lx, ly)
	ly += 12
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="14" fill="%s" stroke="#999"/>`+"\n", lx, ly, s.color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12">%s</text>`+"\n", lx+20, ly+11, esc(fmt.Sprintf("%s: %.2f", s.label, GiBOf(s.bytes))))
		ly += 22
	}
	if p.KVBudgetBytes < 0 {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="14" fill="url(#over)" stroke="#d0342c"/>`+"\n", lx, ly)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" fill="#c0281f">%s</text>`+"\n", lx+20, ly+11, esc(fmt.Sprintf("over budget: KV budget %.2f", GiBOf(p.KVBudgetBytes))))
		ly += 22
	}
	if p.AutotuneRequestBytes > 0 {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="14" fill="none" stroke="#d0342c" stroke-width="2" stroke-dasharray="4,2"/>`+"\n", lx, ly)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12">%s</text>`+"\n", lx+20, ly+11, esc(fmt.Sprintf("autotuner request: %.2f (free %.2f)", GiBOf(p.AutotuneRequestBytes), GiBOf(p.AutotuneFreeBytes))))
		ly += 22
	}
	ly += 8
	facts := []string{
		fmt.Sprintf("KV tokens per rank: %s", groupDigits(p.KVTokensPerRank)),
		fmt.Sprintf("context tokens per DCP group: %s", groupDigits(p.ContextTokens)),
		fmt.Sprintf("max concurrency at %d tokens: %.2fx", p.MaxModelLen, p.MaxConcurrency),
		fmt.Sprintf("recommended utilization: %.4f", p.RecommendedUtilization),
	}
	if p.Target != TargetCPU && p.AttentionBackend == BackendSparseSharded {
		facts = append(facts, fmt.Sprintf("FlashInfer workspace: %.2f needed / %.2f set", GiBOf(p.FlashInferNeedBytes), GiBOf(p.FlashInferConfigured)))
	}
	if p.Target != TargetCPU && p.DCP > 1 {
		facts = append(facts, fmt.Sprintf("DCP a2a buffer (%s): %s tokens, %.2f", p.DCPCommBackend, groupDigits(p.A2ATokens), GiBOf(p.A2ABytes)))
	}
	for _, line := range facts {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" fill="#333">%s</text>`+"\n", lx, ly, esc(line))
		ly += 18
	}

	// Warnings with their fixes.
	wy := top + chartH + 72
	if len(warnLines) > 0 {
		fmt.Fprintf(&b, `<text class="warnings" x="20" y="%.1f" font-size="12" fill="#c0281f">`+"\n", wy)
		for i, line := range warnLines {
			fmt.Fprintf(&b, `<tspan x="20" dy="%d">%s</tspan>`+"\n", map[bool]int{true: 0, false: 16}[i == 0], esc(line))
		}
		b.WriteString("</text>\n")
	}
	b.WriteString("</svg>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write plan svg: %w", err)
	}
	return nil
}

func labelColor(class string) string {
	switch class {
	case "seg-free", "seg-unaccounted", "seg-workspace":
		return "#222"
	}
	return "white"
}

func orNone(name, alias string, ok bool) string {
	if name == "" {
		return "none serves it"
	}
	s := name
	if alias != "" {
		s += " (" + alias + ")"
	}
	if !ok {
		s += ", unsupported"
	}
	return s
}
