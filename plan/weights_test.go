package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The published totals: DeepSeek-V3 671B (main model), DeepSeek-V3.2 685B
// (with its MTP module), GLM-5 744B.
func TestParamCountsMatchPublishedTotals(t *testing.T) {
	v3 := mustModel(t, "deepseek-v3.2")
	v3.IndexTopK, v3.IndexNHeads = 0, 0 // DeepSeek-V3: the same model without the indexer
	tests := []struct {
		name      string
		groups    []ParamGroup
		published float64
	}{
		{"DeepSeek-V3", ParamGroups(v3, false), 671e9},
		{"DeepSeek-V3.2 with MTP", ParamGroups(mustModel(t, "deepseek-v3.2"), true), 685e9},
		{"GLM-5", ParamGroups(mustModel(t, "glm-5"), false), 744e9},
	}
	for _, tt := range tests {
		got := float64(TotalParams(tt.groups))
		if diff := cmp.Diff(tt.published, got, cmpopts.EquateApprox(0.002, 0)); diff != "" {
			t.Errorf("%s parameters (-published +counted):\n%s", tt.name, diff)
		}
	}
}

func TestWeightBytesPerRankSharding(t *testing.T) {
	m := mustModel(t, "glm-5")
	groups := ParamGroups(m, false)
	var tp, rep, exp float64
	for _, g := range groups {
		switch g.Sharding {
		case ShardTP:
			tp += float64(g.Params)
		case ShardReplicated:
			rep += float64(g.Params)
		case ShardExperts:
			exp += float64(g.Params)
		}
	}
	if exp != float64((m.NumLayers-m.FirstKDenseReplace)*m.NRoutedExperts*3*m.HiddenSize*m.MoEIntermediateSize) {
		t.Errorf("routed expert parameters %g do not match layers × experts × 3 × hidden × moe_intermediate", exp)
	}
	tests := []struct {
		dtype  string
		tp, ep int
	}{{"bf16", 1, 1}, {"bf16", 8, 8}, {"fp8", 8, 8}, {"nvfp4", 4, 16}, {"f32", 2, 3}}
	for _, tt := range tests {
		got, err := WeightBytesPerRank(m, groups, tt.dtype, tt.tp, tt.ep)
		if err != nil {
			t.Fatal(err)
		}
		q, _ := WeightBytesPerParam(tt.dtype)
		var want float64
		for _, g := range groups {
			per := 2.0
			if g.Quantized {
				per = q
			}
			n := float64(g.Params)
			switch g.Sharding {
			case ShardTP:
				n /= float64(tt.tp)
			case ShardExperts:
				n *= math.Ceil(float64(m.NRoutedExperts)/float64(tt.ep)) / float64(m.NRoutedExperts)
			}
			want += n * per
		}
		if diff := cmp.Diff(want, float64(got), cmpopts.EquateApprox(0, 1)); diff != "" {
			t.Errorf("%s TP%d EP%d (-want +got):\n%s", tt.dtype, tt.tp, tt.ep, diff)
		}
	}
	// bf16 on one rank is 2 B per parameter.
	one, _ := WeightBytesPerRank(m, groups, "bf16", 1, 1)
	if diff := cmp.Diff(2*(tp+rep+exp), float64(one), cmpopts.EquateApprox(0, 1)); diff != "" {
		t.Errorf("bf16 single rank (-want +got):\n%s", diff)
	}
	if _, err := WeightBytesPerRank(m, groups, "int3", 1, 1); err == nil || !strings.Contains(err.Error(), "use bf16, fp8, nvfp4 or f32") {
		t.Errorf("unknown weight dtype: %v", err)
	}
	if _, err := WeightBytesPerRank(m, groups, "bf16", 0, 1); err == nil {
		t.Error("TP 0 accepted")
	}
}

func TestWeightBytesPerParam(t *testing.T) {
	for _, c := range []struct {
		dtype string
		want  float64
	}{{"bf16", 2}, {"bfloat16", 2}, {"f32", 4}, {"fp8", 1 + 4.0/16384}, {"nvfp4", 0.5 + 1.0/16}} {
		got, err := WeightBytesPerParam(c.dtype)
		if err != nil || got != c.want {
			t.Errorf("WeightBytesPerParam(%s) = %g, %v; want %g", c.dtype, got, err, c.want)
		}
	}
}
