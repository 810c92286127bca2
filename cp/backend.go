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

// Combine kinds: how a row's partial results are merged across the DCP group.
const (
	CombineNone = "none"  // DCP = 1: the rank holds every key
	CombineAGRS = "ag_rs" // LSE all-gather + reduce-scatter of the member blocks (Combiner.Combine)
	CombineA2A  = "a2a"   // one packed all-to-all + local combine (Combiner.Combine)
)

// Query gather: over which group the absorbed queries are all-gathered before
// the sparse attention on the local shard.
const (
	GatherNone = "none" // DCP = 1
	// GatherDCP: every member of the DCP group contributes one block of its
	// rows × its TP heads (rows differ across PCP members, heads across TP
	// members); every member attends every block over its own shard and the
	// combine returns each member its own block.
	GatherDCP = "dcp"
)

// Route is what runs for one kind of row.
type Route struct {
	Combine        string // CombineNone, CombineAGRS or CombineA2A
	QueryGather    string // GatherNone or GatherDCP
	CompactIndices bool   // localized indices packed to the row front with a count
}

// BackendPlan is the resolved attention backend of a deployment and its
// per-row-kind routes. It is computed once at start-up; every rank computes
// the same plan from the same configuration.
type BackendPlan struct {
	Backend      string // canonical backend name
	Capabilities plan.Capabilities
	Comm         string // ag_rs or a2a
	// CombineHeads is the number of query heads entering the DCP combine on
	// each rank (one block of HeadsOut heads per DCP member), and HeadsOut the
	// heads each rank keeps.
	CombineHeads, HeadsOut int
	routes                 [2]Route
}

// NewBackendPlan validates cfg and resolves the backend through
// plan.SelectBackend on the cpu target (the capability table lives there).
// Every refusal names the constraint, the values and a setting that works.
//
// On CPU every row, decode or prefill, runs on the rank's local KV shard and
// is DCP-combined: the two backends differ in how localized top-k indices are
// laid out (in place with −1 holes for sparse-gather, as FlashMLA reads them;
// compacted to the row front for sparse-sharded, as FlashInfer reads them).
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
	bp := &BackendPlan{Backend: name, Capabilities: caps, Comm: cfg.Comm, HeadsOut: cfg.HeadsPerRank}
	if bp.Comm == "" {
		bp.Comm = plan.CommAGRS
	}
	route := Route{Combine: CombineNone, QueryGather: GatherNone, CompactIndices: caps.CompactIndices}
	bp.CombineHeads = cfg.HeadsPerRank
	switch bp.Comm {
	case plan.CommA2A:
		if l.DCP < 2 {
			return nil, fmt.Errorf("cp: --dcp-comm-backend %s needs --decode-context-parallel-size > 1, got %d; use --dcp-comm-backend %s", plan.CommA2A, l.DCP, plan.CommAGRS)
		}
	case plan.CommAGRS:
	default:
		return nil, fmt.Errorf("cp: unknown --dcp-comm-backend %q; use %s or %s", cfg.Comm, plan.CommAGRS, plan.CommA2A)
	}
	if l.DCP > 1 {
		route.Combine, route.QueryGather = bp.Comm, GatherDCP
		bp.CombineHeads = cfg.HeadsPerRank * l.DCP
	}
	bp.routes[RowDecode] = route
	bp.routes[RowPrefill] = route
	return bp, nil
}

// Route returns what runs for rows of the given kind.
func (bp *BackendPlan) Route(kind RowKind) Route { return bp.routes[kind] }
