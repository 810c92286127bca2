package engine

import (
	"fmt"
	"math"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/spec"
)

// Options configure an engine. Zero fields take the defaults below.
type Options struct {
	MaxNumBatchedTokens int // default 512
	MaxNumSeqs          int // default 16
	MaxModelLen         int // default: the model's max_position_embeddings
	BlockSize           int // default 16; tokens of a request per block id
	// Layout is the DCP ownership function (size N, interleave I); the zero
	// value is one rank. Each rank's cache blocks hold BlockSize/N slots.
	Layout kvcache.Layout
	// DisablePrefixCaching turns off the reuse of cached full blocks.
	DisablePrefixCaching bool

	KVDType      kvcache.KVDType      // default f32
	IndexerDType kvcache.IndexerDType // default f32

	// MemoryLimit is one rank's memory (--memory-limit); 0 means this host's
	// RAM divided by RanksPerHost.
	MemoryLimit  int64
	RanksPerHost int // ranks sharing this host's RAM; default 1
	// MemoryUtilization is the fraction of MemoryLimit the engine may use
	// (--memory-utilization); default 0.9.
	MemoryUtilization float64
	// KVCacheMemory, when > 0, sets each rank's KV cache bytes directly
	// (--kv-cache-memory). 0 gives the cache DefaultKVCacheMemory (at least
	// one MaxModelLen request), or what the budget leaves after weights and
	// workspaces when that is less.
	KVCacheMemory int64
	// WorkspaceBytes overrides named workspaces (--workspace-bytes NAME=BYTES).
	// An override smaller than the worst step needs is refused at start-up.
	WorkspaceBytes map[string]int64

	// MaxQueue bounds the requests submitted but not yet admitted; Submit
	// refuses more with ErrOverloaded. Default 1024.
	MaxQueue int
	// MaxPromptLogitRows bounds the logit rows per step spent on prompts
	// that need every row's logits (prompt logprobs, echo); each row is
	// vocab_size float32 values of the executor's logits buffer, allocated
	// at start-up. Default DefaultMaxPromptLogitRows; negative means 0 (such
	// requests are refused).
	MaxPromptLogitRows int
	// MeasureAllocs counts the process's heap allocations around every
	// decode-only step (runtime.ReadMemStats; Stats.DecodeStepAllocs):
	// every goroutine's and the Go runtime's own. AllocCounter counts the
	// engine's alone.
	MeasureAllocs bool
	// Speculative enables speculative decoding with the model's MTP layer
	// (--speculative-config): every decoding sequence verifies up to K
	// drafts per step, and the MTP layer's caches and steps are part of
	// every executor.
	Speculative *spec.Config
}

// Defaults of the engine's sizes.
const (
	DefaultMaxNumBatchedTokens = 512
	DefaultMaxNumSeqs          = 16
	DefaultBlockSize           = 16
	DefaultMaxQueue            = 1024
	DefaultMaxPromptLogitRows  = 64
	// MaxBlockSize bounds --block-size (and DCP size × interleave, which
	// must divide it).
	MaxBlockSize = 1 << 20
	// DefaultKVCacheMemory is the KV cache of a rank when --kv-cache-memory
	// is not given: a fixed space, 4 GiB as vLLM's CPU backend gives it
	// (VLLM_CPU_KVCACHE_SPACE), rather than a fraction of the host's RAM.
	DefaultKVCacheMemory int64 = 4 << 30
)

// WithDefaults fills the zero fields for cfg.
func (o Options) WithDefaults(cfg *config.Model) Options {
	if o.MaxNumBatchedTokens == 0 {
		o.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if o.MaxNumSeqs == 0 {
		o.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if o.MaxModelLen == 0 {
		o.MaxModelLen = cfg.MaxPositionEmbeddings
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.Layout == (kvcache.Layout{}) {
		o.Layout = kvcache.Layout{N: 1, I: 1}
	}
	if o.KVDType == "" {
		o.KVDType = kvcache.KVF32
	}
	if o.IndexerDType == "" {
		o.IndexerDType = kvcache.IdxF32
	}
	if o.RanksPerHost == 0 {
		o.RanksPerHost = 1
	}
	if o.MemoryUtilization == 0 {
		o.MemoryUtilization = plan.DefaultUtilization
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = DefaultMaxQueue
	}
	switch {
	case o.MaxPromptLogitRows == 0:
		o.MaxPromptLogitRows = DefaultMaxPromptLogitRows
	case o.MaxPromptLogitRows < 0:
		o.MaxPromptLogitRows = 0
	}
	return o
}

// scheduler is the scheduler configuration of o for numBlocks blocks.
func (o Options) scheduler(numBlocks int) SchedulerConfig {
	return SchedulerConfig{
		MaxNumBatchedTokens: o.MaxNumBatchedTokens, MaxNumSeqs: o.MaxNumSeqs, MaxModelLen: o.MaxModelLen,
		BlockSize: o.BlockSize, Layout: o.Layout, NumBlocks: numBlocks, PrefixCaching: !o.DisablePrefixCaching,
		MaxPromptLogitRows: o.MaxPromptLogitRows, SpecTokens: o.Speculative.K(),
	}
}

// SlotBytes is what one cached token costs its owner rank over all layers:
// plan.KVSlotBytes, the one definition the planner shares.
func (o Options) SlotBytes(cfg *config.Model) (int64, error) {
	b, err := plan.KVSlotBytes(cfg, string(o.KVDType), string(o.IndexerDType), plan.CacheLayers(cfg, o.Speculative != nil))
	if err != nil {
		return 0, fmt.Errorf("KV bytes per token: %w", err)
	}
	return b, nil
}

// Validate refuses impossible settings before any weight loads. o must have
// its defaults filled (WithDefaults). Each refusal names the values and a
// setting that works.
func (o Options) Validate(cfg *config.Model) error {
	// Bounds that keep the arithmetic below exact: no product of these
	// overflows, and no loop runs over an absurd count.
	switch l := o.Layout; {
	case o.BlockSize > MaxBlockSize:
		return fmt.Errorf("--block-size %d is more than %d positions per block; 16 is the usual setting", o.BlockSize, MaxBlockSize)
	case l.N > MaxBlockSize || l.I > MaxBlockSize || (l.N > 0 && l.I > 0 && plan.MulSat(int64(l.N), int64(l.I)) > int64(max(o.BlockSize, 1))):
		return fmt.Errorf("DCP size %d × --cp-kv-cache-interleave-size %d exceeds --block-size %d: each block must hold whole interleave runs of every DCP rank; set --block-size to a multiple of %d or lower the interleave",
			l.N, l.I, o.BlockSize, plan.MulSat(int64(l.N), int64(l.I)))
	}
	if err := o.scheduler(1 << 30).Validate(); err != nil {
		return err
	}
	if sp := o.Speculative; sp != nil {
		if err := sp.Validate(); err != nil {
			return err
		}
		if cfg.NumNextNPredict == 0 {
			return fmt.Errorf("--speculative-config method mtp needs the model's MTP layer, but %q has num_nextn_predict_layers 0; serve a checkpoint that has one, or drop --speculative-config", cfg.Name)
		}
	}
	if o.MaxModelLen > cfg.MaxPositionEmbeddings {
		return fmt.Errorf("--max-model-len %d exceeds the model's max_position_embeddings %d; set --max-model-len to at most %d",
			o.MaxModelLen, cfg.MaxPositionEmbeddings, cfg.MaxPositionEmbeddings)
	}
	if _, err := kvcache.ParseKVDType(string(o.KVDType)); err != nil {
		return err
	}
	if _, err := kvcache.ParseIndexerDType(string(o.IndexerDType)); err != nil {
		return err
	}
	switch {
	case o.MemoryLimit < 0:
		return fmt.Errorf("--memory-limit must be ≥ 0 bytes (0: this host's RAM), got %d", o.MemoryLimit)
	case o.RanksPerHost < 1:
		return fmt.Errorf("ranks per host must be ≥ 1, got %d", o.RanksPerHost)
	case !(o.MemoryUtilization > 0 && o.MemoryUtilization <= 1):
		return fmt.Errorf("--memory-utilization must be in (0, 1], got %g; 0.9 is the usual setting", o.MemoryUtilization)
	case o.KVCacheMemory < 0:
		return fmt.Errorf("--kv-cache-memory must be ≥ 0 bytes (0: the default %s within the budget), got %d", plan.FormatBytes(DefaultKVCacheMemory), o.KVCacheMemory)
	case o.MaxQueue < 1:
		return fmt.Errorf("max queue must be ≥ 1 request, got %d", o.MaxQueue)
	}
	for name, b := range o.WorkspaceBytes {
		if b <= 0 {
			return fmt.Errorf("--workspace-bytes %s=%d: size must be > 0 bytes", name, b)
		}
	}
	slot, err := o.SlotBytes(cfg)
	if err != nil {
		return err
	}
	sc := o.scheduler(1)
	reqBytes := plan.MulSat(int64(sc.BlocksFor(o.MaxModelLen)), int64(sc.LocalBlockSize()), slot)
	if reqBytes == math.MaxInt64 {
		return fmt.Errorf("the KV cache of one --max-model-len %d request would need more than 8 EiB; lower --max-model-len or --block-size", o.MaxModelLen)
	}
	if o.KVCacheMemory > 0 && o.KVCacheMemory < reqBytes {
		return fmt.Errorf("--kv-cache-memory %s holds fewer than the %d blocks one --max-model-len %d request needs (%s); set --kv-cache-memory to at least %d or lower --max-model-len to %d",
			plan.FormatBytes(o.KVCacheMemory), sc.BlocksFor(o.MaxModelLen), o.MaxModelLen, plan.FormatBytes(reqBytes), reqBytes,
			o.KVCacheMemory/(int64(sc.LocalBlockSize())*slot)*int64(sc.LocalBlockSize())*int64(o.Layout.N))
	}
	if o.KVCacheMemory == 0 && o.MemoryLimit > 0 {
		// Before loading, only the KV of one request is known; the full budget
		// with weights and workspaces is checked once they are measured.
		usable := int64(float64(o.MemoryLimit) * o.MemoryUtilization)
		if usable < reqBytes {
			need := int64(float64(reqBytes)/o.MemoryUtilization) + 1
			return fmt.Errorf("--memory-limit %s × --memory-utilization %g = %s cannot hold even the KV of one --max-model-len %d request (%s), before weights; set --memory-limit above %d bytes",
				plan.FormatBytes(o.MemoryLimit), o.MemoryUtilization, plan.FormatBytes(usable), o.MaxModelLen, plan.FormatBytes(reqBytes), need)
		}
	}
	return nil
}
