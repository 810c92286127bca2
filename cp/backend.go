package cp

import (
	"fmt"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/plan"
)

// BackendConfig is what decides the attention path of a deployment: the
// parallel layout, the KV interleave and block size, the KV cache dtype, the
// requested attention backend (plan.BackendAuto, plan.BackendSparseGather,
// plan.BackendSparseSharded or their aliases FLASHMLA_SPARSE and
// FLASHINFER_MLA_SPARSE) and DCP communication backend (plan.CommAGRS, the
// default, or plan.CommA2A), and the model's attention shape.
type BackendConfig struct {
	Layout            comm.Layout
	Interleave        int // --cp-kv-cache-interleave-size
	BlockSize         int
	KVDtype           string
	Backend           string // --attention-backend
	Comm              string // --dcp-comm-backend
	HeadsPerRank      int    // query heads per TP rank
	QKNopeHeadDim     int
	Sparse            bool
	SpeculativeTokens int
}

// RowKind is the kind of a query row of a step.
type RowKind int

const (
	// RowDecode is a decode row (one or, with speculative tokens, a few
	// query tokens of a request), replicated over PCP ranks.
	RowDecode RowKind = iota
	// RowPrefill is a prefill row, split over PCP ranks by Partition.
	RowPrefill
)

func (k RowKind) String() string {
	if k == RowPrefill {
		return "prefill"
	}
	return "decode"
}

// Path is where a row's sparse attention reads its keys.
type Path int

const (
	// PathLocalShard: the row runs on this rank's DCP shard of the KV cache
	// with localized indices, and its partial is DCP-combined.
	PathLocalShard Path = iota
	// PathGatheredKV: the row runs rank-locally over the full KV gathered
	// from all DCP ranks, with global indices and no combine.
	PathGatheredKV
)

func (p Path) String() string {
	if p == PathGatheredKV {
		return "gathered-kv"
	}
	return "local-shard"
}

// Combine kinds: how a row's partial results are merged across the DCP
// group.
const (
	CombineNone = "none"  // DCP = 1 or the row saw every key
	CombineAGRS = "ag_rs" // LSE all-gather + reduce-scatter over heads (Combiner.Combine)
	CombineAGAR = "ag_ar" // LSE all-gather + all-reduce, all heads on every rank (Combiner.CombineAll)
	CombineA2A  = "a2a"   // one packed all-to-all + local combine (Combiner.Combine)
)

// Query gather groups: over which group a decode row's absorbed queries are
// all-gathered before the sparse attention on the local shard.
const (
	GatherNone = "none" // every rank already holds all the heads it combines
	GatherDCP  = "dcp"  // PCP = 1: the DCP group inside the TP group
	GatherTP   = "tp"   // DCP spans TP×PCP: heads are sharded over TP, replicated over PCP
)

// Route is what runs for one kind of row.
type Route struct {
	Path           Path
	Combine        string // CombineNone, CombineAGRS, CombineAGAR or CombineA2A
	QueryGather    string // GatherNone, GatherDCP or GatherTP
	CompactIndices bool   // localized indices packed to the row front with a count
}

// BackendPlan is the resolved attention backend of a deployment and its
// per-row-kind routes. It is computed once at start-up; every rank computes
// the same plan from the same configuration.
type BackendPlan struct {
	Backend      string // canonical backend name
	Capabilities plan.Capabilities
	Comm         string // ag_rs or a2a
	// CombineHeads is the number of heads entering the DCP combine on each
	// rank (the gathered heads), and HeadsOut the heads each rank keeps.
	CombineHeads, HeadsOut int
	routes                 [2]Route
}

// NewBackendPlan validates cfg and resolves the backend through
// plan.SelectBackend on the cpu target (the capability table lives there).
// Every refusal names the constraint, the values and a setting that works.
func NewBackendPlan(cfg BackendConfig) (*BackendPlan, error) {
	l := cfg.Layout
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("cp: backend plan: %w", err)
	}
	if err := (kvcache.Layout{N: l.DCP, I: cfg.Interleave}).Validate(cfg.BlockSize); err != nil {
		return nil, fmt.Errorf("cp: backend plan: %w", err)
	}
	if cfg.HeadsPerRank < 1 {
		return nil, fmt.Errorf("cp: backend plan needs at least 1 query head per TP rank, got %d", cfg.HeadsPerRank)
	}
	name, err := plan.SelectBackend(cfg.Backend, plan.Combination{
		Target: plan.TargetCPU, TP: l.TP, PCP: l.PCP, DCP: l.DCP, KVDtype: cfg.KVDtype,
		HeadsPerRank: cfg.HeadsPerRank, QKNopeHeadDim: cfg.QKNopeHeadDim, Sparse: cfg.Sparse,
		SpeculativeTokens: cfg.SpeculativeTokens,
	})
	if err != nil {
		return nil, fmt.Errorf("cp: backend plan: %w", err)
	}
	caps, ok := plan.LookupBackend(plan.TargetCPU, name)
	if !ok {
		return nil, fmt.Errorf("cp: backend plan: %s resolved but has no cpu capabilities", name)
	}
	bp := &BackendPlan{Backend: name, Capabilities: caps, Comm: cfg.Comm}
	if bp.Comm == "" {
		bp.Comm = plan.CommAGRS
	}

	// Heads entering the combine and the query gather group (the DCP group
	// is inside TP with PCP = 1, equals the PCP group, or spans the world).
	gather := GatherNone
	switch {
	case l.DCP == 1:
		bp.CombineHeads = cfg.HeadsPerRank
	case l.PCP == 1:
		bp.CombineHeads, gather = cfg.HeadsPerRank*l.DCP, GatherDCP
	case l.DCP == l.PCP:
		bp.CombineHeads = cfg.HeadsPerRank
	default: // DCP = TP·PCP
		bp.CombineHeads, gather = cfg.HeadsPerRank*l.TP, GatherTP
	}

	combine := CombineNone
	switch bp.Comm {
	case plan.CommA2A:
		if l.DCP < 2 {
			return nil, fmt.Errorf("cp: --dcp-comm-backend %s needs --decode-context-parallel-size > 1, got %d; use --dcp-comm-backend %s", plan.CommA2A, l.DCP, plan.CommAGRS)
		}
		if bp.CombineHeads%l.DCP != 0 {
			return nil, fmt.Errorf("cp: --dcp-comm-backend %s splits the %d combined heads over %d DCP ranks, which does not divide them; use --dcp-comm-backend %s",
				plan.CommA2A, bp.CombineHeads, l.DCP, plan.CommAGRS)
		}
		combine = CombineA2A
	case plan.CommAGRS:
		switch {
		case l.DCP == 1:
		case l.PCP > 1:
			combine = CombineAGAR
		default:
			combine = CombineAGRS
		}
	default:
		return nil, fmt.Errorf("cp: unknown --dcp-comm-backend %q; use %s or %s", cfg.Comm, plan.CommAGRS, plan.CommA2A)
	}
	switch combine {
	case CombineAGAR:
		bp.HeadsOut = bp.CombineHeads
	case CombineNone:
		bp.HeadsOut = bp.CombineHeads
	default:
		bp.HeadsOut = bp.CombineHeads / l.DCP
	}

	local := Route{Path: PathLocalShard, Combine: combine, QueryGather: gather, CompactIndices: caps.CompactIndices}
	bp.routes[RowDecode] = local
	bp.routes[RowPrefill] = local
	if !caps.CompactIndices && l.DCP > 1 {
		// sparse-gather: prefill rows read the KV gathered from every DCP
		// rank and run rank-locally on their own heads, with no combine.
		bp.routes[RowPrefill] = Route{Path: PathGatheredKV, Combine: CombineNone, QueryGather: GatherNone}
	}
	return bp, nil
}

// Route returns what runs for rows of the given kind.
func (bp *BackendPlan) Route(kind RowKind) Route { return bp.routes[kind] }
