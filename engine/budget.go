package engine

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
)

// Memory is one rank's start-up memory account: the plan.Budget the engine
// was sized with, what it computed, and the parts of non-KV memory.
type Memory struct {
	Budget plan.Budget
	Result plan.BudgetResult
	// LimitSource says where Budget.DeviceBytes came from.
	LimitSource string

	WeightBytes     int64
	ActivationBytes int64 // measured: bytes allocated during the profile step
	WorkspaceBytes  int64 // sum of Workspaces
	Workspaces      []model.Buffer
	// Overrides are the --workspace-bytes values, each at least the need.
	Overrides map[string]int64

	// KVCacheMemory is the --kv-cache-memory setting (0: the default,
	// DefaultKVCacheMemory within the budget).
	KVCacheMemory int64
	// KVDefaultCapped is set when the default KV space was more than the
	// budget leaves, which the cache got instead.
	KVDefaultCapped bool
	NumBlocks       int   // block ids each rank's cache holds
	LocalBlock      int   // token slots per block on one rank
	KVBytes         int64 // each rank's cache: NumBlocks × LocalBlock × SlotBytes
	MaxNumSeqs      int
}

// budgetFlags are the flag names refusals point to.
const (
	flagUtilization = "--memory-utilization"
	flagLimit       = "--memory-limit"
)

// sizeKV decides the KV cache of one rank from the measured non-KV memory.
// It refuses a budget that cannot hold one max-model-len request, naming the
// smallest utilization and limit that work.
func sizeKV(o Options, sc SchedulerConfig, slot int64, mem *Memory) error {
	limit, source := o.MemoryLimit, "--memory-limit"
	if limit == 0 {
		avail, err := AvailableMemory()
		if err != nil {
			return fmt.Errorf("host memory (set --memory-limit instead): %w", err)
		}
		limit = avail.Bytes / int64(o.RanksPerHost)
		source = fmt.Sprintf("%s / %d ranks", avail, o.RanksPerHost)
		if avail.Unmapped {
			// The weights are mapped already; the budget counts them again.
			limit += mem.WeightBytes
			source += " + weights already mapped"
		}
	}
	mem.LimitSource = source
	mem.LocalBlock = sc.LocalBlockSize()
	mem.MaxNumSeqs = o.MaxNumSeqs
	mem.Budget = plan.Budget{
		DeviceBytes: limit, Utilization: o.MemoryUtilization,
		NonKVBytes: mem.WeightBytes + mem.ActivationBytes + mem.WorkspaceBytes,
		SlotBytes:  slot, DCP: sc.layout().N, Interleave: sc.layout().I,
		BlockSize: mem.LocalBlock, MaxModelLen: sc.MaxModelLen,
	}
	if err := mem.Budget.Validate(); err != nil {
		return fmt.Errorf("memory budget: %w", err)
	}
	mem.Result = mem.Budget.Compute()
	var tokens int64
	if o.KVCacheMemory > 0 {
		mem.KVCacheMemory = o.KVCacheMemory
		tokens = o.KVCacheMemory / slot / int64(mem.LocalBlock) * int64(mem.LocalBlock)
	} else {
		if err := mem.Budget.Check(flagUtilization, flagLimit); err != nil {
			r := mem.Result
			return fmt.Errorf("memory budget refused (%s %d bytes = %s; smallest working %s %d bytes, or %s %.4f): %w",
				flagLimit, limit, source, flagLimit, r.MinDeviceBytes, flagUtilization, r.MinUtilization, err)
		}
		tokens = mem.Result.KVTokensPerRank
		// The default, as vLLM's CPU backend sizes its KV cache: a fixed
		// space (at least one max-model-len request) rather than whatever
		// the host's memory leaves; a budget too small for it caps it.
		lb := int64(mem.LocalBlock)
		def := max(DefaultKVCacheMemory/slot/lb, int64(sc.BlocksFor(sc.MaxModelLen))) * lb
		if def <= tokens {
			tokens = def
		} else {
			mem.KVDefaultCapped = true
		}
	}
	mem.NumBlocks = int(tokens / int64(mem.LocalBlock))
	mem.KVBytes = int64(mem.NumBlocks) * int64(mem.LocalBlock) * slot
	if need := sc.BlocksFor(sc.MaxModelLen); mem.NumBlocks < need {
		return fmt.Errorf("KV cache of %d blocks cannot hold one --max-model-len %d request (%d blocks); raise --kv-cache-memory to %d bytes",
			mem.NumBlocks, sc.MaxModelLen, need, int64(need)*int64(mem.LocalBlock)*slot)
	}
	return nil
}

// ContextTokens is the number of tokens of context the DCP group caches.
func (m *Memory) ContextTokens() int64 {
	return int64(m.NumBlocks) * int64(m.LocalBlock) * int64(m.Budget.DCP)
}

// MaxConcurrency is how many max-model-len requests the cache holds at once.
func (m *Memory) MaxConcurrency() float64 {
	return float64(m.ContextTokens()) / float64(m.Budget.MaxModelLen)
}

// WriteTable prints the start-up memory table: the budget, every part of
// non-KV memory with each workspace listed, the KV cache, KV tokens per rank,
// context tokens across DCP and the concurrency at max-model-len.
func (m *Memory) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, b int64, note string) {
		fmt.Fprintf(tw, "%s\t%s\t  %s\n", name, plan.FormatBytes(b), note)
	}
	b, r := m.Budget, m.Result
	fmt.Fprintf(tw, "memory per rank\t\t\n")
	row("limit", b.DeviceBytes, m.LimitSource)
	row("budget", r.RequestedBytes, fmt.Sprintf("× %s %.4g", flagUtilization, b.Utilization))
	row("weights", m.WeightBytes, "weight shard")
	row("activation peak", m.ActivationBytes, "measured by a profile step at --max-num-batched-tokens")
	row("workspaces", m.WorkspaceBytes, fmt.Sprintf("%d persistent buffers, listed below", len(m.Workspaces)))
	row("non-KV", b.NonKVBytes, "weights + activation peak + workspaces")
	row("KV budget", r.KVBudgetBytes, "budget − non-KV")
	kvNote := fmt.Sprintf("%d blocks × %d slots × %d B", m.NumBlocks, m.LocalBlock, b.SlotBytes)
	switch {
	case m.KVCacheMemory > 0:
		kvNote += fmt.Sprintf(" (--kv-cache-memory %d)", m.KVCacheMemory)
		if m.KVCacheMemory > r.KVBudgetBytes {
			kvNote += "; exceeds the KV budget"
		}
	case m.KVDefaultCapped:
		kvNote += fmt.Sprintf(" (the KV budget, less than the default %s)", plan.FormatBytes(DefaultKVCacheMemory))
	default:
		kvNote += fmt.Sprintf(" (the default KV space %s)", plan.FormatBytes(DefaultKVCacheMemory))
	}
	row("KV cache", m.KVBytes, kvNote)
	fmt.Fprintf(tw, "KV tokens per rank\t%d\t\n", int64(m.NumBlocks)*int64(m.LocalBlock))
	fmt.Fprintf(tw, "context tokens (DCP %d)\t%d\t\n", b.DCP, m.ContextTokens())
	fmt.Fprintf(tw, "max concurrency at %d tokens\t%.2f\t  requests\n", b.MaxModelLen, m.MaxConcurrency())
	fmt.Fprintf(tw, "workspaces\t\t\n")
	ws := append([]model.Buffer(nil), m.Workspaces...)
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].Bytes > ws[j].Bytes })
	for _, x := range ws {
		note := ""
		if o, ok := m.Overrides[workspaceKey(x.Name)]; ok {
			note = fmt.Sprintf("--workspace-bytes %s=%d", workspaceKey(x.Name), o)
		}
		row("  "+x.Name, x.Bytes, note)
	}
	return tw.Flush()
}

// workspaceKey is the flag spelling of a buffer name: lower case, spaces and
// underscores as dashes ("top-k slots" → "top-k-slots").
func workspaceKey(name string) string {
	return strings.NewReplacer(" ", "-", "_", "-").Replace(strings.ToLower(strings.TrimSpace(name)))
}

// checkWorkspaceOverrides refuses an override of an unknown buffer or one
// smaller than the worst step needs, naming the size required.
func checkWorkspaceOverrides(over map[string]int64, bufs []model.Buffer, o Options) (map[string]int64, error) {
	need := make(map[string]int64, len(bufs))
	names := make([]string, 0, len(bufs))
	for _, b := range bufs {
		k := workspaceKey(b.Name)
		need[k] = b.Bytes
		names = append(names, k)
	}
	out := make(map[string]int64, len(over))
	keys := make([]string, 0, len(over))
	for k := range over {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, key := over[k], workspaceKey(k)
		n, ok := need[key]
		if !ok {
			return nil, fmt.Errorf("--workspace-bytes %s: no such workspace; the workspaces are %s", k, strings.Join(names, ", "))
		}
		if v < n {
			return nil, fmt.Errorf("--workspace-bytes %s=%d is smaller than the %d bytes (%s) the worst step needs (--max-num-batched-tokens %d, --max-num-seqs %d, --max-model-len %d); set it to at least %d or drop the override",
				key, v, n, plan.FormatBytes(n), o.MaxNumBatchedTokens, o.MaxNumSeqs, o.MaxModelLen, n)
		}
		out[key] = v
	}
	return out, nil
}
