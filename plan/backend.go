package plan

import (
	"fmt"
	"slices"
	"strings"
)

// Target is the kind of machine a backend runs on.
type Target string

// Targets: the CPU engine itself, and the two GPU generations a planned
// deployment may use (Hopper SM90: H100/H200; Blackwell SM100: B200).
const (
	TargetCPU   Target = "cpu"
	TargetSM90  Target = "sm90"
	TargetSM100 Target = "sm100"
)

// Backend names. "auto" asks SelectBackend to choose.
const (
	BackendAuto          = "auto"
	BackendSparseGather  = "sparse-gather"
	BackendSparseSharded = "sparse-sharded"
)

// Capabilities is what one sparse-MLA attention backend declares on one
// target. A backend serves a combination only if every field allows it.
type Capabilities struct {
	Name  string // canonical name
	Alias string // the production backend it mirrors (accepted as a name)
	// DCP: decode context parallelism (needs the decode LSE).
	DCP bool
	// PCP: prefill context parallelism.
	PCP bool
	// PCPWithDCP: both at once. A backend that DCP-combines every PCP query
	// row cannot: PCP ranks hold unequal row counts, so the combine's
	// collectives would be entered with unequal counts.
	PCPWithDCP bool
	ReturnsLSE bool   // returns the per-row softmax LSE the DCP combine needs
	LSEBase    string // "e" or "2" as returned by the kernel; converted to e at the boundary
	// CompactIndices: localized top-k indices are packed to the front of each
	// row with a count, instead of keeping −1 holes in place.
	CompactIndices bool
	KVDtypes       []string // MLA row dtypes it reads
	// DCPKVDtypes are the KV dtypes with which it returns the decode LSE
	// (serves DCP); nil means every dtype in KVDtypes.
	DCPKVDtypes []string
	// MultiTokenDecode: decode rows with more than one query token (MTP
	// verification) stay on the decode path.
	MultiTokenDecode bool
	// NopeHeadDims restricts qk_nope_head_dim; nil means any.
	NopeHeadDims []int
	// Why explains the capability limits in one sentence for refusals.
	Why string
}

var (
	engineGather = Capabilities{
		Name: BackendSparseGather, Alias: "FLASHMLA_SPARSE",
		DCP: true, PCP: true, PCPWithDCP: true, ReturnsLSE: true, LSEBase: "e",
		CompactIndices: false, KVDtypes: []string{DtypeF32, DtypeBF16, DtypeFP8DSMLA}, MultiTokenDecode: true,
		Why: "every row runs on the local KV shard with localized top-k indices kept in place (−1 holes, as FlashMLA reads them) and is DCP-combined over the group's row blocks",
	}
	engineSharded = Capabilities{
		Name: BackendSparseSharded, Alias: "FLASHINFER_MLA_SPARSE",
		DCP: true, PCP: true, PCPWithDCP: true, ReturnsLSE: true, LSEBase: "e",
		CompactIndices: true, KVDtypes: []string{DtypeF32, DtypeBF16, DtypeFP8DSMLA}, MultiTokenDecode: true,
		Why: "every row runs on the local KV shard with localized top-k indices compacted to the row front (as FlashInfer reads them) and is DCP-combined; PCP ranks gather their queries as equal-size row blocks, so their combine counts agree",
	}
	gpuFlashMLASparse = Capabilities{
		Name: BackendSparseGather, Alias: "FLASHMLA_SPARSE",
		DCP: true, PCP: true, PCPWithDCP: true, ReturnsLSE: true, LSEBase: "e",
		CompactIndices: false, KVDtypes: []string{DtypeBF16, DtypeFP8DSMLA}, DCPKVDtypes: []string{DtypeFP8DSMLA},
		MultiTokenDecode: true,
		Why:              "the decode LSE comes from the fp8_ds_mla mixed-batch kernel, so DCP needs --kv-cache-dtype fp8_ds_mla; PCP prefill rows gather the DCP KV shards and run rank-locally",
	}
	gpuFlashInferSparse = Capabilities{
		Name: BackendSparseSharded, Alias: "FLASHINFER_MLA_SPARSE",
		DCP: true, PCP: true, PCPWithDCP: false, ReturnsLSE: true, LSEBase: "2",
		CompactIndices: true, KVDtypes: []string{DtypeBF16}, MultiTokenDecode: true,
		NopeHeadDims: []int{128, 192},
		Why:          "it filters top-k indices to the local DCP shard for every row and DCP-combines every PCP query row without gathering the KV first, so PCP ranks with unequal query rows enter the combine with unequal counts",
	}
)

// BackendTable lists the sparse backends available on a target with their
// capabilities, in the default priority order (see SelectBackend for the
// SM100 order rule).
func BackendTable(t Target) []Capabilities {
	switch t {
	case TargetCPU:
		return []Capabilities{engineGather, engineSharded}
	case TargetSM90:
		return []Capabilities{gpuFlashMLASparse}
	case TargetSM100:
		return []Capabilities{gpuFlashInferSparse, gpuFlashMLASparse}
	}
	return nil
}

// Combination is the exact configuration a backend must serve.
type Combination struct {
	Target            Target
	TP, PCP, DCP      int
	KVDtype           string
	HeadsPerRank      int // query heads per TP rank
	QKNopeHeadDim     int
	Sparse            bool // the model has a DSA indexer
	SpeculativeTokens int  // > 0: decode rows carry 1 + k query tokens
}

func (c Combination) String() string {
	return fmt.Sprintf("TP=%d PCP=%d DCP=%d kv-cache-dtype=%s on %s", c.TP, c.PCP, c.DCP, NormalizeKVDtype(c.KVDtype), c.Target)
}

// Serves returns nil if the backend can serve the combination, or the reason
// it cannot.
func (b Capabilities) Serves(c Combination) error {
	kv := NormalizeKVDtype(c.KVDtype)
	switch {
	case !c.Sparse:
		return fmt.Errorf("%s serves sparse-MLA models (with index_topk) only", b.Name)
	case !slices.Contains(b.KVDtypes, kv):
		return fmt.Errorf("%s does not read %s KV rows (it reads %s)", b.Name, kv, strings.Join(b.KVDtypes, ", "))
	case b.NopeHeadDims != nil && !slices.Contains(b.NopeHeadDims, c.QKNopeHeadDim):
		return fmt.Errorf("%s needs qk_nope_head_dim in %v, got %d", b.Name, b.NopeHeadDims, c.QKNopeHeadDim)
	case c.PCP > 1 && c.DCP > 1 && !b.PCPWithDCP:
		return fmt.Errorf("%s does not serve PCP and DCP together: %s", b.Name, b.Why)
	case c.PCP > 1 && !b.PCP:
		return fmt.Errorf("%s does not serve PCP", b.Name)
	case c.DCP > 1 && !(b.DCP && b.ReturnsLSE):
		return fmt.Errorf("%s cannot use DCP because it does not return the decode softmax LSE", b.Name)
	case c.DCP > 1 && b.DCPKVDtypes != nil && !slices.Contains(b.DCPKVDtypes, kv):
		return fmt.Errorf("%s returns the decode LSE only with %s KV rows, so it cannot use DCP with %s", b.Name, strings.Join(b.DCPKVDtypes, ", "), kv)
	case c.SpeculativeTokens > 0 && !b.MultiTokenDecode:
		return fmt.Errorf("%s does not keep multi-token decode rows on the decode path", b.Name)
	}
	return nil
}

// LookupBackend resolves a canonical name or an alias (case-insensitive for
// aliases) on a target.
func LookupBackend(t Target, name string) (Capabilities, bool) {
	for _, b := range BackendTable(t) {
		if name == b.Name || strings.EqualFold(name, b.Alias) {
			return b, true
		}
	}
	return Capabilities{}, false
}

// knownBackend reports whether name is a backend of any target.
func knownBackend(name string) bool {
	for _, t := range []Target{TargetCPU, TargetSM90, TargetSM100} {
		if _, ok := LookupBackend(t, name); ok {
			return true
		}
	}
	return false
}

// priority orders the target's backends for auto-selection. On SM100 the
// FlashInfer sparse backend goes first when the KV cache is quantized or a
// rank has at most 16 heads, FlashMLA sparse first otherwise.
func priority(c Combination) []Capabilities {
	table := BackendTable(c.Target)
	if c.Target == TargetSM100 && !(NormalizeKVDtype(c.KVDtype) == DtypeFP8DSMLA || c.HeadsPerRank <= 16) {
		slices.Reverse(table)
	}
	return table
}

// SelectBackend returns the canonical name of the backend that serves the
// combination. "auto" (or "") picks the first backend in priority order that
// serves it; an explicit name (canonical or alias) that cannot serve it is
// refused with the reason and a setting that works.
func SelectBackend(requested string, c Combination) (string, error) {
	order := priority(c)
	if len(order) == 0 {
		return "", fmt.Errorf("no sparse attention backends are known for target %q; use cpu, sm90 or sm100", c.Target)
	}
	if requested == "" || requested == BackendAuto {
		var reasons []string
		for _, b := range order {
			err := b.Serves(c)
			if err == nil {
				return b.Name, nil
			}
			reasons = append(reasons, err.Error())
		}
		return "", fmt.Errorf("no attention backend serves %s: %s; %s", c, strings.Join(reasons, "; "), alternative(c, ""))
	}
	b, ok := LookupBackend(c.Target, requested)
	if !ok {
		if knownBackend(requested) {
			names := make([]string, 0, len(order))
			for _, x := range order {
				names = append(names, x.Name+" ("+x.Alias+")")
			}
			return "", fmt.Errorf("attention backend %q is not available on %s; use auto or one of %s", requested, c.Target, strings.Join(names, ", "))
		}
		return "", fmt.Errorf("unknown attention backend %q; use auto, %s (alias FLASHMLA_SPARSE) or %s (alias FLASHINFER_MLA_SPARSE)", requested, BackendSparseGather, BackendSparseSharded)
	}
	if err := b.Serves(c); err != nil {
		return "", fmt.Errorf("attention backend %s (%s) cannot serve %s: %w; %s", b.Name, b.Alias, c, err, alternative(c, b.Name))
	}
	return b.Name, nil
}

// alternative names a setting that works: another backend for the same
// combination, the same combination with another KV dtype, or fewer context
// parallel axes.
func alternative(c Combination, exclude string) string {
	for _, b := range priority(c) {
		if b.Name != exclude && b.Serves(c) == nil {
			return fmt.Sprintf("use --attention-backend %s (%s) or auto", b.Name, b.Alias)
		}
	}
	for _, kv := range KVCacheDtypes {
		d := c
		d.KVDtype = kv
		for _, b := range priority(d) {
			if b.Serves(d) == nil {
				return fmt.Sprintf("use --kv-cache-dtype %s with --attention-backend %s (%s)", kv, b.Name, b.Alias)
			}
		}
	}
	if !c.Sparse {
		return "sparse backends need a model with a DSA indexer (index_topk > 0)"
	}
	for _, d := range []Combination{{PCP: 1, DCP: c.DCP}, {PCP: c.PCP, DCP: 1}} {
		e := c
		e.PCP, e.DCP = d.PCP, d.DCP
		for _, b := range priority(e) {
			if b.Serves(e) == nil {
				return fmt.Sprintf("run with --prefill-context-parallel-size %d --decode-context-parallel-size %d on %s (%s)", e.PCP, e.DCP, b.Name, b.Alias)
			}
		}
	}
	return "run without context parallelism"
}
