package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const gib = float64(1 << 30)

// runPlan runs `cpmla plan --json` with the given flags and decodes the
// flat JSON object.
func runPlan(t *testing.T, args ...string) map[string]any {
	t.Helper()
	cmd := newPlanCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"--json"}, args...))
	if err := cmd.Execute(); err != nil {
		t.Fatalf("cpmla plan %v: %v", args, err)
	}
	var obj map[string]any
	if err := json.Unmarshal(out.Bytes(), &obj); err != nil {
		t.Fatalf("plan JSON: %v\n%s", err, out.String())
	}
	return obj
}

func num(t *testing.T, obj map[string]any, key string) float64 {
	t.Helper()
	v, ok := obj[key].(float64)
	if !ok {
		t.Fatalf("JSON key %q = %v, want a number", key, obj[key])
	}
	return v
}

// warning returns the message of the warning with the code, or "".
func warning(obj map[string]any, code string) string {
	ws, _ := obj["warnings"].([]any)
	for _, w := range ws {
		m, _ := w.(map[string]any)
		if m["code"] == code {
			s, _ := m["message"].(string)
			return s
		}
	}
	return ""
}

// TestPlanReproducesSeedFigures runs the seeds' configurations through the
// command's flags. Exact bytes where the seed gives bytes, 0.01 GiB where it
// gives GiB.
func TestPlanReproducesSeedFigures(t *testing.T) {
	glmPCP4 := []string{"--model", "glm-5", "--device", "b200", "--tp", "1", "--pcp", "4", "--dcp", "4", "--max-model-len", "4096"}
	t.Run("FlashInfer sparse workspace, GLM TP1/PCP4/DCP4", func(t *testing.T) {
		obj := runPlan(t, append(glmPCP4, "--max-num-batched-tokens", "4096", "--attention-backend", "FLASHINFER_MLA_SPARSE")...)
		if got := num(t, obj, "flashinfer_sparse_workspace_bytes"); got != 2561671168 {
			t.Errorf("workspace = %.0f B, want 2,561,671,168", got)
		}
		if got := num(t, obj, "flashinfer_workspace_configured_bytes"); got != 413138944 {
			t.Errorf("configured workspace = %.0f B, want 413,138,944", got)
		}
		if msg := warning(obj, "workspace_overflow"); !strings.Contains(msg, "--flashinfer-workspace-bytes 2561671168") {
			t.Errorf("workspace_overflow fix = %q", msg)
		}
		if msg := warning(obj, "unsupported_backend_combination"); !strings.Contains(msg, "PCP and DCP together") {
			t.Errorf("unsupported_backend_combination = %q", msg)
		}
		obj = runPlan(t, append(glmPCP4, "--max-num-batched-tokens", "32768", "--attention-backend", "FLASHINFER_MLA_SPARSE")...)
		if diff := cmp.Diff(16.39, num(t, obj, "flashinfer_sparse_workspace_bytes")/gib, cmpopts.EquateApprox(0, 0.005)); diff != "" {
			t.Errorf("workspace at 32,768 tokens, GiB (-seed +plan):\n%s", diff)
		}
	})
	t.Run("auto-selection falls back to FLASHMLA_SPARSE for PCP+DCP", func(t *testing.T) {
		obj := runPlan(t, append(glmPCP4, "--kv-cache-dtype", "fp8_ds_mla", "--max-num-batched-tokens", "4096")...)
		if diff := cmp.Diff([]any{"sparse-gather", "FLASHMLA_SPARSE", true}, []any{obj["attention_backend"], obj["attention_backend_alias"], obj["attention_backend_supported"]}); diff != "" {
			t.Errorf("backend (-want +got):\n%s", diff)
		}
		if warning(obj, "workspace_overflow") != "" {
			t.Error("workspace_overflow on a backend without the FlashInfer workspace")
		}
	})
	t.Run("negative KV budget, GLM TP1/PCP4/DCP4 at 0.92", func(t *testing.T) {
		flags := append(glmPCP4, "--kv-cache-dtype", "fp8_ds_mla", "--non-kv-memory", "161.16GiB", "--cudagraph-memory", "6.15GiB")
		obj := runPlan(t, append(flags, "--gpu-memory-utilization", "0.92")...)
		if diff := cmp.Diff(-3.23, num(t, obj, "kv_budget_bytes")/gib, cmpopts.EquateApprox(0, 0.005)); diff != "" {
			t.Errorf("KV budget, GiB (-seed +plan):\n%s", diff)
		}
		if diff := cmp.Diff(0.9545, num(t, obj, "recommended_gpu_memory_utilization")); diff != "" {
			t.Errorf("recommended utilization (-seed +plan):\n%s", diff)
		}
		if msg := warning(obj, "negative_kv_budget"); !strings.Contains(msg, "--gpu-memory-utilization 0.9545") {
			t.Errorf("negative_kv_budget fix = %q", msg)
		}
		// The seed's fix, 0.96, gives a positive budget.
		obj = runPlan(t, append(flags, "--gpu-memory-utilization", "0.96")...)
		if b := num(t, obj, "kv_budget_bytes"); b <= 0 || warning(obj, "negative_kv_budget") != "" {
			t.Errorf("at 0.96 the budget is %.0f B with %v", b, obj["warnings"])
		}
	})
	t.Run("autotuner headroom, GLM TP2/PCP2", func(t *testing.T) {
		// The seed: 12.22 GiB requested with about 7.6 GiB free at 0.92, and a
		// 33.46 GiB KV reservation. Unaccounted memory = 178.35 × 0.08 − 7.6 =
		// 6.668 GiB; non-KV = 0.92 × 178.35 − 33.46 = 130.622 GiB.
		flags := []string{"--model", "glm-5", "--device", "b200", "--tp", "2", "--pcp", "2", "--max-model-len", "4096",
			"--autotune-request", "12.22GiB", "--unaccounted-memory", "6.668GiB", "--non-kv-memory", "130.622GiB"}
		at92 := runPlan(t, append(flags, "--gpu-memory-utilization", "0.92")...)
		if diff := cmp.Diff([]float64{7.6, 33.46}, []float64{num(t, at92, "autotune_free_bytes") / gib, num(t, at92, "kv_budget_bytes") / gib}, cmpopts.EquateApprox(0, 0.005)); diff != "" {
			t.Errorf("free for the autotuner, KV budget at 0.92, GiB (-seed +plan):\n%s", diff)
		}
		if msg := warning(at92, "autotune_headroom"); !strings.Contains(msg, "12.22 GiB") || !strings.Contains(msg, "--gpu-memory-utilization 0.8940 or lower") {
			t.Errorf("autotune_headroom fix = %q", msg)
		}
		if u := num(t, at92, "max_gpu_memory_utilization_for_autotune"); u < 0.85 || u >= 0.92 {
			t.Errorf("max utilization for the autotuner = %g, want in [0.85, 0.92)", u)
		}
		at85 := runPlan(t, append(flags, "--gpu-memory-utilization", "0.85")...)
		more := (num(t, at85, "autotune_free_bytes") - num(t, at92, "autotune_free_bytes")) / gib
		if math.Abs(more-12.5) > 0.05 || warning(at85, "autotune_headroom") != "" {
			t.Errorf("0.85 gives %.2f GiB more headroom (seed: about 12.5) and warnings %v", more, at85["warnings"])
		}
	})
	t.Run("DCP a2a buffer, GLM TP8/DCP4 with MTP 5", func(t *testing.T) {
		obj := runPlan(t, "--model", "glm-5", "--device", "h200", "--tp", "8", "--dcp", "4", "--kv-cache-dtype", "fp8_ds_mla",
			"--max-num-seqs", "128", "--num-speculative-tokens", "5", "--parallel-drafting", "--max-num-batched-tokens", "8192",
			"--dcp-comm-backend", "a2a", "--max-model-len", "131072")
		if got := num(t, obj, "dcp_a2a_buffer_tokens"); got != 1408 {
			t.Errorf("a2a capacity = %.0f tokens, want 1,408", got)
		}
		more := num(t, obj, "dcp_a2a_buffer_bytes_at_max_batched_tokens") - num(t, obj, "dcp_a2a_buffer_bytes")
		if math.Round(more/1e6) != 446 {
			t.Errorf("sizing for 8,192 tokens costs %.1f MB more, seed says about 446 MB", more/1e6)
		}
		if msg := warning(obj, "a2a_buffer_overflow"); !strings.Contains(msg, "8192") || !strings.Contains(msg, "446 MB more") {
			t.Errorf("a2a_buffer_overflow fix = %q", msg)
		}
	})
}

func TestPlanTableAndSVG(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "plan.svg")
	cmd := newPlanCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--model", "glm-5", "--tp", "8", "--dcp", "8", "--weight-dtype", "fp8", "--svg", svg})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "RANK") || strings.Count(out.String(), "workspace_overflow") < 8 {
		t.Errorf("table:\n%s", out.String())
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(data), `class="rank-bar"`); got != 8 {
		t.Errorf("SVG has %d rank bars, want 8", got)
	}
}

func TestPlanFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--non-kv-memory", "12 parsecs"}, "unknown unit"},
		{[]string{"--device", "tpu"}, "unknown device"},
		{[]string{"--model", "no-such-model"}, "neither a preset"},
		{[]string{"--tp", "8", "--dcp", "3"}, "valid DCP sizes"},
		{[]string{"--gpu-memory-utilization", "0"}, "(0, 1]"},
	}
	for _, tt := range tests {
		cmd := newPlanCmd()
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(tt.args)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("cpmla plan %v: %v; want an error containing %q", tt.args, err, tt.want)
		}
	}
}
