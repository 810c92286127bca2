package plan

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func i64(v int64) *int64 { return &v }

// base is a GLM-5 deployment on B200 that fits: TP8, FP8 weights, defaults.
func base(t testing.TB) Config {
	b200, err := LookupDevice("b200")
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Model: mustModel(t, "glm-5"), Device: b200, TP: 8, PCP: 1, DCP: 1, Utilization: 0.9,
		MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, MaxModelLen: 131072, WeightDtype: "fp8",
	}
}

func mustPlan(t *testing.T, c Config) *Plan {
	t.Helper()
	p, err := Compute(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func codes(p *Plan) []string {
	out := []string{}
	for _, w := range p.Warnings {
		out = append(out, w.Code)
	}
	return out
}

func TestBaseDeploymentFits(t *testing.T) {
	p := mustPlan(t, base(t))
	if len(p.Warnings) != 0 || p.KVTokensPerRank == 0 || !p.AttentionBackendOK {
		t.Fatalf("base deployment does not fit: %v, %d tokens/rank, backend %q", codes(p), p.KVTokensPerRank, p.AttentionBackend)
	}
	// The estimate is the sum of its parts.
	if p.NonKVBytes != p.WeightsBytes+p.ActivationBytes+p.WorkspaceBytes || p.NonKVMeasured {
		t.Errorf("non-KV %d ≠ weights %d + activations %d + workspaces %d", p.NonKVBytes, p.WeightsBytes, p.ActivationBytes, p.WorkspaceBytes)
	}
	// TP8 bf16 KV at 8 heads per rank: auto picks FlashInfer sparse, whose
	// configured workspace is then part of non-KV memory.
	if p.AttentionBackend != BackendSparseSharded || p.WorkspaceBytes != DefaultFlashInferWorkspaceBytes {
		t.Errorf("backend %s, workspaces %d; want sparse-sharded with the 394 MiB buffer", p.AttentionBackend, p.WorkspaceBytes)
	}
}

// TestWarningsSayWhatToSet triggers every warning code and checks that its
// message names the setting that fixes it, and that applying that setting
// clears the warning.
func TestWarningsSayWhatToSet(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		code    string
		fix     []string      // substrings of the message
		applied func(*Config) // the fix the message suggests
	}{
		{
			name: "negative KV budget",
			mutate: func(c *Config) {
				c.TP, c.PCP, c.DCP, c.Utilization, c.KVDtype, c.MaxModelLen = 1, 4, 4, 0.92, "fp8_ds_mla", 4096
				c.Measured.NonKVBytes, c.Measured.CUDAGraphBytes = i64(gibBytes(161.16)), i64(gibBytes(6.15))
			},
			code:    WarnNegativeKVBudget,
			fix:     []string{"-3.23 GiB", "--gpu-memory-utilization 0.9545", "2.92 GiB"},
			applied: func(c *Config) { c.Utilization = 0.9545 },
		},
		{
			name: "KV cache too small for one request",
			mutate: func(c *Config) {
				c.Measured.NonKVBytes = i64(gibBytes(159))
				c.MaxModelLen = 202752
			},
			code:    WarnKVCacheTooSmall,
			fix:     []string{"--gpu-memory-utilization 0.9", "--max-model-len"},
			applied: func(c *Config) { c.MaxModelLen = 8192 },
		},
		{
			name: "autotuner headroom",
			mutate: func(c *Config) {
				c.TP, c.PCP, c.Utilization = 2, 2, 0.92
				c.Measured.NonKVBytes = i64(gibBytes(130.62))
				c.Measured.AutotuneRequestBytes, c.Measured.UnaccountedBytes = gibBytes(12.22), gibBytes(6.668)
			},
			code:    WarnAutotuneHeadroom,
			fix:     []string{"12.22 GiB", "7.60 GiB", "--gpu-memory-utilization 0.8940 or lower"},
			applied: func(c *Config) { c.Utilization = 0.85 },
		},
		{
			name: "FlashInfer workspace overflow",
			mutate: func(c *Config) {
				c.TP, c.DCP = 8, 8
			},
			code: WarnWorkspaceOverflow,
			// 394 MiB + 8 B × 64 gathered heads × 8192 tokens × 256 + 1 MiB.
			fix: []string{fmt.Sprintf("--flashinfer-workspace-bytes %d", 394*MiB+8*64*8192*256+MiB), "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE"},
			applied: func(c *Config) {
				c.Measured.FlashInferWorkspaceBytes = 394*MiB + 8*64*8192*256 + MiB
			},
		},
		{
			name: "a2a buffer overflow",
			mutate: func(c *Config) {
				c.TP, c.DCP, c.KVDtype, c.MaxNumSeqs, c.SpeculativeTokens, c.ParallelDrafting, c.DCPCommBackend = 8, 4, "fp8_ds_mla", 128, 5, true, "a2a"
			},
			code:    WarnA2ABufferOverflow,
			fix:     []string{"holds 1408 tokens", "446 MB more", "--max-num-batched-tokens 1408", "--dcp-comm-backend ag_rs"},
			applied: func(c *Config) { c.DCPCommBackend = "ag_rs" },
		},
		{
			name: "unsupported backend combination",
			mutate: func(c *Config) {
				c.TP, c.PCP, c.DCP, c.KVDtype, c.AttentionBackend = 1, 4, 4, "fp8_ds_mla", "FLASHINFER_MLA_SPARSE"
				c.MaxNumBatchedTokens, c.MaxModelLen = 4096, 4096
				c.Measured.NonKVBytes = i64(100 * GiB)
			},
			code:    WarnUnsupportedBackend,
			fix:     []string{"FLASHINFER_MLA_SPARSE", "--attention-backend sparse-gather (FLASHMLA_SPARSE)"},
			applied: func(c *Config) { c.AttentionBackend = "auto" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base(t)
			tt.mutate(&c)
			p := mustPlan(t, c)
			w, ok := p.Warning(tt.code)
			if !ok {
				t.Fatalf("no %s warning; got %v", tt.code, codes(p))
			}
			for _, s := range tt.fix {
				if !strings.Contains(w.Message, s) {
					t.Errorf("%s message does not contain %q:\n%s", tt.code, s, w.Message)
				}
			}
			tt.applied(&c)
			if q := mustPlan(t, c); q.Status() != "ok" {
				if _, still := q.Warning(tt.code); still {
					t.Errorf("applying the fix leaves %s: %v", tt.code, q.Warnings)
				}
			}
		})
	}
}

func TestValidationRefusesImpossibleFlags(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"tp not dividing heads", func(c *Config) { c.TP = 3 }, "divisible by tensor_parallel_size=3"},
		{"dcp not dividing tp", func(c *Config) { c.TP, c.DCP = 8, 3 }, "valid DCP sizes are [1 2 4 8]"},
		{"dcp under pcp", func(c *Config) { c.TP, c.PCP, c.DCP = 2, 2, 8 }, "valid DCP sizes are [1 2 4]"},
		{"zero sizes", func(c *Config) { c.PCP = 0 }, "must be ≥ 1"},
		{"utilization above 1", func(c *Config) { c.Utilization = 1.2 }, "(0, 1]"},
		{"batched tokens below seqs", func(c *Config) { c.MaxNumBatchedTokens = 128 }, "set it to at least 256"},
		{"model len beyond the model", func(c *Config) { c.MaxModelLen = 1 << 30 }, "max_position_embeddings"},
		{"parallel drafting without spec", func(c *Config) { c.ParallelDrafting = true }, "--num-speculative-tokens ≥ 1"},
		{"a2a without dcp", func(c *Config) { c.DCPCommBackend = "a2a" }, "use ag_rs"},
		{"unknown comm backend", func(c *Config) { c.DCPCommBackend = "ring" }, "ag_rs or a2a"},
		{"unknown kv dtype", func(c *Config) { c.KVDtype = "int4" }, "kv cache dtype"},
		{"unknown backend", func(c *Config) { c.AttentionBackend = "FLASH_ATTN" }, "unknown --attention-backend"},
		{"interleave not dividing block", func(c *Config) { c.Interleave = 48 }, "cp_kv_cache_interleave_size"},
		{"negative measured memory", func(c *Config) { c.Measured.NonKVBytes = i64(-1) }, "--non-kv-memory must be ≥ 0"},
		{"no device memory", func(c *Config) { c.Device = Device{Name: "cpu", Target: TargetCPU} }, "--device-memory"},
		{"no model", func(c *Config) { c.Model = nil }, "--model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base(t)
			tt.mutate(&c)
			_, err := Compute(c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Compute: %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestJSONKeys(t *testing.T) {
	c := base(t)
	c.TP, c.DCP, c.DCPCommBackend = 8, 8, "a2a"
	p := mustPlan(t, c)
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{
		"device_memory_bytes", "gpu_memory_utilization", "non_kv_bytes", "cudagraph_bytes", "kv_budget_bytes",
		"kv_bytes_per_token", "kv_tokens_per_rank", "max_concurrency", "recommended_gpu_memory_utilization",
		"autotune_free_bytes", "max_gpu_memory_utilization_for_autotune", "flashinfer_sparse_workspace_bytes",
		"flashinfer_workspace_configured_bytes", "dcp_a2a_buffer_tokens", "dcp_a2a_buffer_bytes",
		"dcp_a2a_buffer_bytes_at_max_batched_tokens", "attention_backend", "warnings",
	} {
		if _, ok := obj[k]; !ok {
			t.Errorf("JSON has no %q", k)
		}
	}
	for k, v := range obj {
		switch v.(type) {
		case map[string]any:
			t.Errorf("JSON is not flat: %q is an object", k)
		}
	}
	ws, ok := obj["warnings"].([]any)
	if !ok || len(ws) == 0 {
		t.Fatalf("warnings = %v, want a non-empty list", obj["warnings"])
	}
	for _, w := range ws {
		m, _ := w.(map[string]any)
		if diff := cmp.Diff([]bool{true, true}, []bool{m["code"] != nil, m["message"] != nil}); diff != "" {
			t.Errorf("warning %v lacks code or message", w)
		}
	}
	// A fitting plan still has a list, not null.
	raw, _ = json.Marshal(mustPlan(t, base(t)))
	if !bytes.Contains(raw, []byte(`"warnings":[]`)) {
		t.Errorf("fitting plan's warnings are not []: %s", raw)
	}
}

// svgBars parses the SVG as XML and returns, per rank bar, the classes of
// its rectangles.
func svgBars(t *testing.T, doc []byte) (map[string][]string, string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	bars := map[string][]string{}
	var cur, text string
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			depth++
			attr := map[string]string{}
			for _, a := range e.Attr {
				attr[a.Name.Local] = a.Value
			}
			if e.Name.Local == "g" && attr["class"] == "rank-bar" {
				cur = attr["data-rank"]
				bars[cur] = nil
			}
			if e.Name.Local == "rect" && cur != "" {
				bars[cur] = append(bars[cur], attr["class"])
			}
		case xml.EndElement:
			depth--
			if e.Name.Local == "g" {
				cur = ""
			}
		case xml.CharData:
			text += string(e)
		}
	}
	if depth != 0 {
		t.Fatalf("unbalanced SVG elements: depth %d", depth)
	}
	return bars, text
}

func TestSVG(t *testing.T) {
	c := base(t)
	c.TP, c.PCP, c.DCP, c.Utilization, c.KVDtype, c.MaxModelLen = 1, 4, 4, 0.92, "fp8_ds_mla", 4096
	c.Measured.NonKVBytes, c.Measured.CUDAGraphBytes = i64(gibBytes(161.16)), i64(gibBytes(6.15))
	c.Measured.AutotuneRequestBytes = 2 * GiB
	p := mustPlan(t, c)
	var buf bytes.Buffer
	if err := p.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	bars, text := svgBars(t, buf.Bytes())
	if len(bars) != 4 {
		t.Fatalf("%d rank bars, want 4", len(bars))
	}
	for rank, classes := range bars {
		for _, want := range []string{"seg-nonkv", "seg-graphs", "seg-free", "seg-over", "autotune"} {
			if !strings.Contains(strings.Join(classes, " "), want) {
				t.Errorf("rank %s bar has %v, no %s", rank, classes, want)
			}
		}
	}
	for _, want := range []string{"TP 1 · PCP 4 · DCP 4", "utilization 0.92", "CUDA graphs: 6.15", "weights + activations: 161.16", "[negative_kv_budget]", "device 178.35 GiB"} {
		if !strings.Contains(text, want) {
			t.Errorf("SVG text lacks %q", want)
		}
	}

	// A fitting plan draws the KV cache; large deployments draw 16 bars.
	c = base(t)
	c.TP, c.PCP, c.DCP = 8, 4, 32
	c.KVDtype = "fp8_ds_mla"
	p = mustPlan(t, c)
	buf.Reset()
	if err := p.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	bars, text = svgBars(t, buf.Bytes())
	if len(bars) != maxSVGRanks || !strings.Contains(text, "ranks 16–31 have the same breakdown") {
		t.Errorf("%d bars for 32 ranks; text %q", len(bars), text)
	}
	if !strings.Contains(strings.Join(bars["0"], " "), "seg-kv") {
		t.Errorf("fitting plan has no KV segment: %v", bars["0"])
	}
}

func TestRankLayout(t *testing.T) {
	tests := []struct {
		tp, pcp, dcp int
		want         []Rank
	}{
		{4, 1, 2, []Rank{{0, 0, 0, 0, 0}, {1, 1, 0, 1, 0}, {2, 2, 0, 0, 1}, {3, 3, 0, 1, 1}}},
		{2, 2, 2, []Rank{{0, 0, 0, 0, 0}, {1, 1, 0, 0, 1}, {2, 0, 1, 1, 0}, {3, 1, 1, 1, 1}}},
		{2, 2, 4, []Rank{{0, 0, 0, 0, 0}, {1, 1, 0, 1, 0}, {2, 0, 1, 2, 0}, {3, 1, 1, 3, 0}}},
		{2, 2, 1, []Rank{{0, 0, 0, 0, 0}, {1, 1, 0, 0, 1}, {2, 0, 1, 0, 2}, {3, 1, 1, 0, 3}}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, rankLayout(tt.tp, tt.pcp, tt.dcp)); diff != "" {
			t.Errorf("TP%d PCP%d DCP%d (-want +got):\n%s", tt.tp, tt.pcp, tt.dcp, diff)
		}
	}
}

func TestCPUPlanUsesTheSameBudget(t *testing.T) {
	cpu, _ := LookupDevice("cpu")
	c := Config{Model: mustModel(t, "glm5-mini"), Device: cpu, DeviceBytes: 16 * GiB, TP: 2, PCP: 1, DCP: 2, Utilization: 0.5,
		MaxNumBatchedTokens: 2048, MaxNumSeqs: 8, KVDtype: "f32", IndexerDtype: "f32", BlockSize: 16}
	p := mustPlan(t, c)
	slot, _ := KVSlotBytes(c.Model, "f32", "f32", c.Model.NumLayers)
	b := Budget{DeviceBytes: 16 * GiB, Utilization: 0.5, NonKVBytes: p.NonKVBytes, SlotBytes: slot, DCP: 2, BlockSize: 16, MaxModelLen: c.Model.MaxPositionEmbeddings}
	r := b.Compute()
	if p.KVTokensPerRank != r.KVTokensPerRank || p.KVBudgetBytes != r.KVBudgetBytes || p.AttentionBackend != BackendSparseGather {
		t.Errorf("CPU plan %d tokens/rank, budget %d, backend %s; Budget says %d, %d", p.KVTokensPerRank, p.KVBudgetBytes, p.AttentionBackend, r.KVTokensPerRank, r.KVBudgetBytes)
	}
	if p.FlashInferNeedBytes != 0 || p.A2ABytes != 0 || p.CaptureSize != 0 || p.WorkspaceBytes != 0 {
		t.Errorf("CPU plan carries GPU buffers: %+v", p)
	}
}

func TestWriteTable(t *testing.T) {
	c := base(t)
	c.TP, c.DCP = 8, 8
	p := mustPlan(t, c)
	var buf bytes.Buffer
	if err := p.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(out, "\n")
	rankRows := 0
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && len(f[0]) == 1 && f[0] >= "0" && f[0] <= "7" && strings.Contains(l, "workspace_overflow") {
			rankRows++
		}
	}
	if rankRows != 8 {
		t.Errorf("%d rank rows, want 8:\n%s", rankRows, out)
	}
	for _, want := range []string{"RANK", "KV BUDGET", "[workspace_overflow]", "FlashInfer sparse workspace"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

func BenchmarkCompute(b *testing.B) {
	c := base(b)
	c.TP, c.DCP, c.DCPCommBackend = 8, 4, "a2a"
	for b.Loop() {
		if _, err := Compute(c); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "plans/s")
}
