package cp_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/plan"
)

func baseConfig(l comm.Layout, backend, commBackend string) cp.BackendConfig {
	return cp.BackendConfig{Layout: l, Interleave: 1, BlockSize: 16, KVDtype: plan.DtypeBF16, Backend: backend,
		Comm: commBackend, HeadsPerRank: 8, QKNopeHeadDim: 192, Sparse: true}
}

func TestBackendPlanRoutes(t *testing.T) {
	local := func(combine, gather string, compact bool) cp.Route {
		return cp.Route{Combine: combine, QueryGather: gather, CompactIndices: compact}
	}
	type want struct {
		Backend                string
		CombineHeads, HeadsOut int
		Decode, Prefill        cp.Route
	}
	for _, tc := range []struct {
		name    string
		layout  comm.Layout
		backend string
		comm    string
		want    want
	}{
		{"single rank auto", comm.Layout{TP: 1, PCP: 1, DCP: 1}, plan.BackendAuto, "",
			want{plan.BackendSparseGather, 8, 8, local(cp.CombineNone, cp.GatherNone, false), local(cp.CombineNone, cp.GatherNone, false)}},
		{"DCP in TP ag_rs", comm.Layout{TP: 4, PCP: 1, DCP: 4}, plan.BackendAuto, plan.CommAGRS,
			want{plan.BackendSparseGather, 32, 8, local(cp.CombineAGRS, cp.GatherDCP, false), local(cp.CombineAGRS, cp.GatherDCP, false)}},
		{"DCP in TP sharded a2a", comm.Layout{TP: 4, PCP: 1, DCP: 2}, "FLASHINFER_MLA_SPARSE", plan.CommA2A,
			want{plan.BackendSparseSharded, 16, 8, local(cp.CombineA2A, cp.GatherDCP, true), local(cp.CombineA2A, cp.GatherDCP, true)}},
		{"DCP equals PCP", comm.Layout{TP: 2, PCP: 2, DCP: 2}, plan.BackendAuto, "",
			want{plan.BackendSparseGather, 16, 8, local(cp.CombineAGRS, cp.GatherDCP, false), local(cp.CombineAGRS, cp.GatherDCP, false)}},
		{"DCP spans TP×PCP sharded", comm.Layout{TP: 2, PCP: 2, DCP: 4}, plan.BackendSparseSharded, plan.CommAGRS,
			want{plan.BackendSparseSharded, 32, 8, local(cp.CombineAGRS, cp.GatherDCP, true), local(cp.CombineAGRS, cp.GatherDCP, true)}},
		{"PCP only sharded", comm.Layout{TP: 1, PCP: 2, DCP: 1}, plan.BackendSparseSharded, "",
			want{plan.BackendSparseSharded, 8, 8, local(cp.CombineNone, cp.GatherNone, true), local(cp.CombineNone, cp.GatherNone, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bp, err := cp.NewBackendPlan(baseConfig(tc.layout, tc.backend, tc.comm))
			if err != nil {
				t.Fatal(err)
			}
			got := want{bp.Backend, bp.CombineHeads, bp.HeadsOut, bp.Route(cp.RowDecode), bp.Route(cp.RowPrefill)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			caps, _ := plan.LookupBackend(plan.TargetCPU, bp.Backend)
			if diff := cmp.Diff(caps, bp.Capabilities); diff != "" {
				t.Errorf("capabilities are not plan's table entry:\n%s", diff)
			}
		})
	}
}

func TestBackendPlanRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  cp.BackendConfig
		want []string // fragments the refusal must name: constraint, values, a working setting
	}{
		{"a2a without DCP", baseConfig(comm.Layout{TP: 2, PCP: 1, DCP: 1}, plan.BackendAuto, plan.CommA2A),
			[]string{"a2a", "decode-context-parallel-size", "got 1", "--dcp-comm-backend ag_rs"}},
		{"unknown comm backend", baseConfig(comm.Layout{TP: 2, PCP: 1, DCP: 2}, plan.BackendAuto, "ring"),
			[]string{"ring", "ag_rs", "a2a"}},
		{"unknown attention backend", baseConfig(comm.Layout{TP: 2, PCP: 2, DCP: 2}, "FLASH_ATTN", ""),
			[]string{"FLASH_ATTN", "sparse-gather", "sparse-sharded"}},
		{"interleave above block size", func() cp.BackendConfig {
			c := baseConfig(comm.Layout{TP: 2, PCP: 1, DCP: 2}, plan.BackendAuto, "")
			c.Interleave = 32
			return c
		}(), []string{"32", "16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cp.NewBackendPlan(tc.cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, f := range tc.want {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("refusal %q does not name %q", err, f)
				}
			}
		})
	}
}
