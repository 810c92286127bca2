package plan

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSelectBackendTruthTable walks the capability table (docs/planner.md)
// through the combinations that matter: auto never picks a backend that
// cannot serve the exact combination, an explicit one that cannot is refused
// with the reason and a working alternative.
func TestSelectBackendTruthTable(t *testing.T) {
	type row struct {
		target       Target
		req          string
		tp, pcp, dcp int
		kv           string
		heads        int
		want         string   // selected backend; "" if refused
		errContains  []string // reason and alternative
	}
	rows := []row{
		// CPU engine: both backends serve every layout.
		{TargetCPU, "auto", 1, 1, 1, "bf16", 8, "sparse-gather", nil},
		{TargetCPU, "auto", 2, 2, 4, "f32", 4, "sparse-gather", nil},
		{TargetCPU, "sparse-sharded", 4, 1, 4, "bf16", 2, "sparse-sharded", nil},
		{TargetCPU, "FLASHINFER_MLA_SPARSE", 1, 4, 1, "fp8_ds_mla", 8, "sparse-sharded", nil},
		{TargetCPU, "sparse-sharded", 1, 4, 4, "bf16", 8, "sparse-sharded", nil},
		// B200: FlashInfer sparse first at ≤ 16 heads per rank or quantized KV.
		{TargetSM100, "auto", 8, 1, 8, "bf16", 8, "sparse-sharded", nil},
		{TargetSM100, "auto", 1, 1, 1, "bf16", 64, "sparse-gather", nil},
		{TargetSM100, "auto", 1, 1, 4, "bf16", 64, "sparse-sharded", nil}, // FlashMLA sparse has no bf16 decode LSE
		{TargetSM100, "auto", 8, 1, 8, "fp8_ds_mla", 8, "sparse-gather", nil},
		// The GLM TP1/PCP4/DCP4 lane: auto falls back to FLASHMLA_SPARSE.
		{TargetSM100, "auto", 1, 4, 4, "fp8_ds_mla", 64, "sparse-gather", nil},
		{TargetSM100, "auto", 1, 4, 4, "bf16", 64, "", []string{"no attention backend serves", "--kv-cache-dtype fp8_ds_mla"}},
		{TargetSM100, "FLASHINFER_MLA_SPARSE", 1, 4, 4, "bf16", 64, "", []string{"does not serve PCP and DCP together", "--kv-cache-dtype fp8_ds_mla", "FLASHMLA_SPARSE"}},
		{TargetSM100, "flashinfer_mla_sparse", 1, 4, 4, "fp8_ds_mla", 64, "", []string{"does not read fp8_ds_mla", "--attention-backend sparse-gather (FLASHMLA_SPARSE)"}},
		{TargetSM100, "FLASHINFER_MLA_SPARSE", 2, 2, 1, "bf16", 32, "sparse-sharded", nil}, // PCP only
		{TargetSM100, "FLASHINFER_MLA_SPARSE", 4, 1, 4, "bf16", 16, "sparse-sharded", nil}, // DCP only
		{TargetSM100, "FLASHMLA_SPARSE", 8, 1, 8, "bf16", 8, "", []string{"only with fp8_ds_mla", "--attention-backend sparse-sharded"}},
		// H100/H200: only FlashMLA sparse.
		{TargetSM90, "auto", 8, 1, 8, "fp8_ds_mla", 8, "sparse-gather", nil},
		{TargetSM90, "auto", 8, 1, 1, "bf16", 8, "sparse-gather", nil},
		{TargetSM90, "auto", 8, 1, 8, "bf16", 8, "", []string{"cannot use DCP with bf16", "--kv-cache-dtype fp8_ds_mla"}},
		{TargetSM90, "sparse-sharded", 8, 1, 1, "bf16", 8, "", []string{"not available on sm90", "sparse-gather (FLASHMLA_SPARSE)"}},
		{TargetSM90, "TRITON_MLA", 8, 1, 1, "bf16", 8, "", []string{"unknown attention backend"}},
	}
	for _, r := range rows {
		c := Combination{Target: r.target, TP: r.tp, PCP: r.pcp, DCP: r.dcp, KVDtype: r.kv, HeadsPerRank: r.heads, QKNopeHeadDim: 192, Sparse: true}
		got, err := SelectBackend(r.req, c)
		name := r.req + " " + c.String()
		if r.want != "" {
			if err != nil || got != r.want {
				t.Errorf("%s: got %q, %v; want %q", name, got, err, r.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: selected %q, want a refusal", name, got)
			continue
		}
		for _, s := range r.errContains {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: refusal %q does not contain %q", name, err, s)
			}
		}
		// Whatever auto picks must serve the combination.
		if auto, err := SelectBackend("auto", c); err == nil {
			b, _ := LookupBackend(c.Target, auto)
			if e := b.Serves(c); e != nil {
				t.Errorf("%s: auto picked %s which cannot serve it: %v", name, auto, e)
			}
		}
	}
}

func TestBackendRefusesDenseModelsAndOddHeadDims(t *testing.T) {
	dense := Combination{Target: TargetCPU, TP: 1, PCP: 1, DCP: 1, KVDtype: "bf16", HeadsPerRank: 8, QKNopeHeadDim: 128}
	if _, err := SelectBackend("auto", dense); err == nil || !strings.Contains(err.Error(), "index_topk") {
		t.Errorf("dense model: %v", err)
	}
	odd := Combination{Target: TargetSM100, TP: 8, PCP: 1, DCP: 1, KVDtype: "bf16", HeadsPerRank: 8, QKNopeHeadDim: 96, Sparse: true}
	if _, err := SelectBackend("FLASHINFER_MLA_SPARSE", odd); err == nil || !strings.Contains(err.Error(), "qk_nope_head_dim in [128 192]") {
		t.Errorf("nope dim 96: %v", err)
	}
}

func TestBackendTableDeclaresCapabilities(t *testing.T) {
	type caps struct {
		Name, Alias                        string
		DCP, PCP, PCPWithDCP, LSE, Compact bool
		LSEBase                            string
	}
	var got []caps
	for _, tg := range []Target{TargetCPU, TargetSM90, TargetSM100} {
		for _, b := range BackendTable(tg) {
			got = append(got, caps{b.Name, b.Alias, b.DCP, b.PCP, b.PCPWithDCP, b.ReturnsLSE, b.CompactIndices, b.LSEBase})
		}
	}
	want := []caps{
		{"sparse-gather", "FLASHMLA_SPARSE", true, true, true, true, false, "e"},
		{"sparse-sharded", "FLASHINFER_MLA_SPARSE", true, true, true, true, true, "e"},
		{"sparse-gather", "FLASHMLA_SPARSE", true, true, true, true, false, "e"},
		{"sparse-sharded", "FLASHINFER_MLA_SPARSE", true, true, false, true, true, "2"},
		{"sparse-gather", "FLASHMLA_SPARSE", true, true, true, true, false, "e"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capability table (-want +got):\n%s", diff)
	}
}
