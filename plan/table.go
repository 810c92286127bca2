package plan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Title is a one-line description of the planned configuration.
func (p *Plan) Title() string {
	backend := "no backend"
	if p.AttentionBackend != "" {
		backend = p.AttentionBackend
		if p.AttentionBackendAlias != "" {
			backend += " (" + p.AttentionBackendAlias + ")"
		}
		if !p.AttentionBackendOK {
			backend += " unsupported"
		}
	}
	return fmt.Sprintf("%s on %s (%s) · TP%d PCP%d DCP%d · util %.4g · %s · kv %s",
		p.Model, p.Device, FormatGiB(p.DeviceMemoryBytes), p.TP, p.PCP, p.DCP, p.GPUMemoryUtilization, backend, p.KVCacheDtype)
}

// Status is "ok" or the codes of the plan's warnings.
func (p *Plan) Status() string {
	if len(p.Warnings) == 0 {
		return "ok"
	}
	codes := make([]string, len(p.Warnings))
	for i, w := range p.Warnings {
		codes[i] = w.Code
	}
	return strings.Join(codes, ",")
}

// WriteTable prints the plan: one row per rank, then the deployment-wide
// figures, the warnings with their fixes and the notes.
func (p *Plan) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "cpmla plan: %s\n\n", p.Title())
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tTP\tPCP\tDCP (GROUP)\tWEIGHTS\tNON-KV\tCUDA GRAPHS\tKV BUDGET\tKV TOKENS\tWORKSPACES\tFREE OUTSIDE BUDGET\tSTATUS")
	for _, r := range p.Ranks {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d (%d)\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Rank, r.TPRank, r.PCPRank, r.DCPRank, r.DCPGroup,
			FormatGiB(p.WeightsBytes), FormatGiB(p.NonKVBytes), FormatGiB(p.CUDAGraphBytes), FormatGiB(p.KVBudgetBytes),
			groupDigits(p.KVTokensPerRank), FormatGiB(p.WorkspaceBytes), FormatGiB(p.AutotuneFreeBytes), p.Status())
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan table: %w", err)
	}
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	measured := func(ok bool) string {
		if ok {
			return "measured"
		}
		return "estimated"
	}
	rows := [][2]string{
		{"device memory", FormatBytes(p.DeviceMemoryBytes)},
		{"requested (utilization × device)", FormatGiB(p.RequestedBytes)},
		{"weights per rank", fmt.Sprintf("%s (%s, EP %d)", FormatGiB(p.WeightsBytes), p.WeightDtype, p.ExpertParallel)},
		{"non-KV memory", fmt.Sprintf("%s (%s)", FormatGiB(p.NonKVBytes), measured(p.NonKVMeasured))},
		{"CUDA-graph memory", FormatGiB(p.CUDAGraphBytes)},
		{"KV budget", FormatGiB(p.KVBudgetBytes)},
		{"KV bytes per token per rank", fmt.Sprintf("%.1f B (slot %s / DCP %d)", p.KVBytesPerToken, FormatBytes(p.KVSlotBytes), p.DCP)},
		{"KV tokens per rank", groupDigits(p.KVTokensPerRank)},
		{"context tokens per DCP group", groupDigits(p.ContextTokens)},
		{fmt.Sprintf("max concurrency at %d tokens", p.MaxModelLen), fmt.Sprintf("%.2fx", p.MaxConcurrency)},
		{"recommended utilization (graphs counted)", fmt.Sprintf("%.4f", p.RecommendedUtilization)},
		{"least utilization for one request", fmt.Sprintf("%.4f", p.MinUtilization)},
		{"free outside budget (autotuner)", fmt.Sprintf("%s of %s requested; max utilization %.4f", FormatGiB(p.AutotuneFreeBytes), FormatGiB(p.AutotuneRequestBytes), p.MaxUtilForAutotune)},
	}
	if p.Target != TargetCPU {
		rows = append(rows,
			[2]string{"FlashInfer sparse workspace", fmt.Sprintf("%s needed, %s configured%s", FormatBytes(p.FlashInferNeedBytes), FormatBytes(p.FlashInferConfigured), unusedBy(p, p.AttentionBackend == BackendSparseSharded))},
			[2]string{"DCP a2a buffer (" + p.DCPCommBackend + ")", fmt.Sprintf("%s tokens, %s; %s at %d tokens%s", groupDigits(p.A2ATokens), FormatBytes(p.A2ABytes), FormatBytes(p.A2ABytesAtMaxBatched), p.MaxNumBatchedTokens, unusedBy(p, p.DCPCommBackend == CommA2A))},
		)
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan table: %w", err)
	}
	if len(p.Warnings) > 0 {
		b.WriteString("\nwarnings:\n")
		for _, w := range p.Warnings {
			fmt.Fprintf(&b, "  [%s] %s\n", w.Code, w.Message)
		}
	}
	if len(p.Notes) > 0 {
		b.WriteString("\nnotes:\n")
		for _, n := range p.Notes {
			fmt.Fprintf(&b, "  %s\n", n)
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write plan table: %w", err)
	}
	return nil
}

// unusedBy marks a buffer the configuration does not allocate.
func unusedBy(p *Plan, used bool) string {
	if used {
		return ""
	}
	return " (not allocated by this configuration)"
}
