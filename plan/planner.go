package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cpmla/cpmla/config"
)

// DCP communication backends.
const (
	CommAGRS = "ag_rs"
	CommA2A  = "a2a"
)

// Default scheduler and cache settings of a planned deployment.
const (
	DefaultUtilization         = 0.9
	DefaultMaxNumBatchedTokens = 8192
	DefaultMaxNumSeqs          = 256
	DefaultBlockSize           = 64
)

// Warning codes. Each warning's message says what to set.
const (
	WarnNegativeKVBudget   = "negative_kv_budget"
	WarnKVCacheTooSmall    = "kv_cache_too_small"
	WarnAutotuneHeadroom   = "autotune_headroom"
	WarnWorkspaceOverflow  = "workspace_overflow"
	WarnA2ABufferOverflow  = "a2a_buffer_overflow"
	WarnUnsupportedBackend = "unsupported_backend_combination"
)

// Measured holds numbers a profiler or a previous run reported; they
// override the planner's estimates. A nil pointer means "not measured".
type Measured struct {
	// NonKVBytes: weights + activation peak + non-torch memory, including the
	// workspaces allocated during the measured run.
	NonKVBytes *int64
	// CUDAGraphBytes: the CUDA-graph memory estimate of the profiler.
	CUDAGraphBytes *int64
	// AutotuneRequestBytes: what a kernel autotuner asks for after the KV
	// cache is allocated (0: no autotuner expected).
	AutotuneRequestBytes int64
	// UnaccountedBytes: memory outside the utilization budget already in use
	// (runtime context, communication buffers).
	UnaccountedBytes int64
	// FlashInferWorkspaceBytes: the configured FlashInfer workspace buffer
	// (0: the default, DefaultFlashInferWorkspaceBytes).
	FlashInferWorkspaceBytes int64
}

// Config is one deployment to plan.
type Config struct {
	Model       *config.Model
	Device      Device // Bytes may be overridden by DeviceBytes
	DeviceBytes int64  // 0: Device.Bytes
	TP, PCP     int
	DCP         int
	Interleave  int // cp_kv_cache_interleave_size; 0 means 1
	// ExpertParallel is how many ranks share the routed experts; 0 means
	// every rank of the deployment (TP × PCP).
	ExpertParallel      int
	Utilization         float64
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	MaxModelLen         int // 0: the model's max_position_embeddings
	SpeculativeTokens   int
	ParallelDrafting    bool
	CaptureSize         int // 0: DefaultCaptureSize
	KVDtype             string
	IndexerDtype        string // "": fp8
	WeightDtype         string // "": the model's torch_dtype
	AttentionBackend    string // "": auto
	DCPCommBackend      string // "": ag_rs
	BlockSize           int    // 0: DefaultBlockSize
	Measured            Measured
}

// Warning is one problem the plan found and the setting that fixes it.
type Warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Rank is the position of one rank in the deployment.
type Rank struct {
	Rank     int `json:"rank"`
	TPRank   int `json:"tp_rank"`
	PCPRank  int `json:"pcp_rank"`
	DCPRank  int `json:"dcp_rank"`
	DCPGroup int `json:"dcp_group"`
}

// Plan is the result of planning one deployment. Every rank of a
// deployment has the same memory arithmetic; Ranks gives their positions.
// It marshals to one flat JSON object.
type Plan struct {
	Model                  string    `json:"model"`
	Device                 string    `json:"device"`
	Target                 Target    `json:"target"`
	DeviceMemoryBytes      int64     `json:"device_memory_bytes"`
	GPUMemoryUtilization   float64   `json:"gpu_memory_utilization"`
	TP                     int       `json:"tensor_parallel_size"`
	PCP                    int       `json:"prefill_context_parallel_size"`
	DCP                    int       `json:"decode_context_parallel_size"`
	WorldSize              int       `json:"world_size"`
	ExpertParallel         int       `json:"expert_parallel_size"`
	HeadsPerRank           int       `json:"heads_per_rank"`
	GatheredHeads          int       `json:"gathered_heads"`
	KVCacheDtype           string    `json:"kv_cache_dtype"`
	IndexerCacheDtype      string    `json:"indexer_cache_dtype"`
	WeightDtype            string    `json:"weight_dtype"`
	MaxModelLen            int       `json:"max_model_len"`
	MaxNumBatchedTokens    int       `json:"max_num_batched_tokens"`
	MaxNumSeqs             int       `json:"max_num_seqs"`
	SpeculativeTokens      int       `json:"num_speculative_tokens"`
	ParallelDrafting       bool      `json:"parallel_drafting"`
	CaptureSize            int       `json:"max_cudagraph_capture_size"`
	WeightsBytes           int64     `json:"weights_bytes"`
	ActivationBytes        int64     `json:"activation_bytes"`
	WorkspaceBytes         int64     `json:"workspace_bytes"`
	NonKVBytes             int64     `json:"non_kv_bytes"`
	NonKVMeasured          bool      `json:"non_kv_measured"`
	CUDAGraphBytes         int64     `json:"cudagraph_bytes"`
	CUDAGraphMeasured      bool      `json:"cudagraph_measured"`
	RequestedBytes         int64     `json:"requested_bytes"`
	KVBudgetBytes          int64     `json:"kv_budget_bytes"`
	KVSlotBytes            int64     `json:"kv_slot_bytes"`
	KVBytesPerToken        float64   `json:"kv_bytes_per_token"`
	KVTokensPerRank        int64     `json:"kv_tokens_per_rank"`
	ContextTokens          int64     `json:"context_tokens"`
	MaxConcurrency         float64   `json:"max_concurrency"`
	RequestKVBytes         int64     `json:"request_kv_bytes"`
	MaxModelLenFit         int64     `json:"max_model_len_fit"`
	MinUtilization         float64   `json:"min_gpu_memory_utilization"`
	MinDeviceBytes         int64     `json:"min_device_memory_bytes"`
	RecommendedUtilization float64   `json:"recommended_gpu_memory_utilization"`
	UnaccountedBytes       int64     `json:"unaccounted_bytes"`
	AutotuneRequestBytes   int64     `json:"autotune_request_bytes"`
	AutotuneFreeBytes      int64     `json:"autotune_free_bytes"`
	MaxUtilForAutotune     float64   `json:"max_gpu_memory_utilization_for_autotune"`
	FlashInferNeedBytes    int64     `json:"flashinfer_sparse_workspace_bytes"`
	FlashInferConfigured   int64     `json:"flashinfer_workspace_configured_bytes"`
	FlashInferMaxTokens    int64     `json:"flashinfer_workspace_max_batched_tokens"`
	DCPCommBackend         string    `json:"dcp_comm_backend"`
	A2ATokens              int64     `json:"dcp_a2a_buffer_tokens"`
	A2ABytes               int64     `json:"dcp_a2a_buffer_bytes"`
	A2ABytesAtMaxBatched   int64     `json:"dcp_a2a_buffer_bytes_at_max_batched_tokens"`
	AttentionBackend       string    `json:"attention_backend"`
	AttentionBackendAlias  string    `json:"attention_backend_alias"`
	AttentionBackendOK     bool      `json:"attention_backend_supported"`
	Warnings               []Warning `json:"warnings"`
	Notes                  []string  `json:"notes"`
	Ranks                  []Rank    `json:"-"`
}

// Warning returns the warning with the given code, if the plan has one.
func (p *Plan) Warning(code string) (Warning, bool) {
	for _, w := range p.Warnings {
		if w.Code == code {
			return w, true
		}
	}
	return Warning{}, false
}

// withDefaults fills the zero-valued settings with their defaults.
func (c Config) withDefaults() Config {
	if c.Interleave == 0 {
		c.Interleave = 1
	}
	if c.ExpertParallel == 0 {
		c.ExpertParallel = c.TP * c.PCP
	}
	if c.MaxModelLen == 0 && c.Model != nil {
		c.MaxModelLen = c.Model.MaxPositionEmbeddings
	}
	if c.CaptureSize == 0 {
		c.CaptureSize = DefaultCaptureSize(c.MaxNumSeqs, c.SpeculativeTokens)
	}
	if c.KVDtype == "" {
		c.KVDtype = DtypeBF16
	}
	c.KVDtype = NormalizeKVDtype(c.KVDtype)
	if c.IndexerDtype == "" {
		c.IndexerDtype = DtypeFP8
	}
	c.IndexerDtype = NormalizeKVDtype(c.IndexerDtype)
	if c.WeightDtype == "" && c.Model != nil {
		c.WeightDtype = c.Model.TorchDtype
		if q := c.Model.Quantization; q != nil && q.QuantMethod == "fp8" {
			c.WeightDtype = WeightFP8
		}
	}
	if c.WeightDtype == "" || c.WeightDtype == "bfloat16" {
		c.WeightDtype = WeightBF16
	}
	if c.AttentionBackend == "" {
		c.AttentionBackend = BackendAuto
	}
	if c.DCPCommBackend == "" {
		c.DCPCommBackend = CommAGRS
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.DeviceBytes == 0 {
		c.DeviceBytes = c.Device.Bytes
	}
	if c.Measured.FlashInferWorkspaceBytes == 0 {
		c.Measured.FlashInferWorkspaceBytes = DefaultFlashInferWorkspaceBytes
	}
	return c
}

// validDCP lists the DCP sizes a TP × PCP deployment accepts.
func validDCP(tp, pcp int) []int {
	if pcp > 1 {
		return slices.Compact([]int{1, pcp, tp * pcp})
	}
	var out []int
	for d := 1; d <= tp; d++ {
		if tp%d == 0 {
			out = append(out, d)
		}
	}
	return out
}

// Validate refuses impossible settings; each error names the constraint,
// the values and a setting that works.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Model == nil {
		return errors.New("no model given; use --model with a preset or a config.json directory")
	}
	if err := c.Model.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.DeviceBytes <= 0 {
		bad("device memory must be > 0 bytes, got %d; give --device (%s) or --device-memory", c.DeviceBytes, strings.Join(DeviceNames(), ", "))
	}
	if c.TP < 1 || c.PCP < 1 || c.DCP < 1 {
		bad("parallel sizes must be ≥ 1, got TP=%d PCP=%d DCP=%d", c.TP, c.PCP, c.DCP)
		return errors.Join(errs...)
	}
	if c.Model.NumHeads%c.TP != 0 {
		bad("num_attention_heads=%d must be divisible by tensor_parallel_size=%d; use a TP size that divides %d", c.Model.NumHeads, c.TP, c.Model.NumHeads)
	}
	if valid := validDCP(c.TP, c.PCP); !slices.Contains(valid, c.DCP) {
		if c.PCP == 1 {
			bad("tp_size=%d must be divisible by dcp_size=%d (DCP shards the KV over ranks of the TP group); valid DCP sizes are %v", c.TP, c.DCP, valid)
		} else {
			bad("when PCP is enabled, DCP must be 1, span the PCP axis, or span the full TP x PCP axis; got TP=%d PCP=%d DCP=%d, valid DCP sizes are %v", c.TP, c.PCP, c.DCP, valid)
		}
	}
	if c.Interleave < 1 || c.BlockSize < 1 || c.BlockSize%c.Interleave != 0 {
		bad("block size (%d) must be ≥ cp_kv_cache_interleave_size (%d) and divisible by it; use --cp-kv-cache-interleave-size 1", c.BlockSize, c.Interleave)
	}
	if c.ExpertParallel < 1 {
		bad("expert parallel size must be ≥ 1, got %d", c.ExpertParallel)
	}
	if !(c.Utilization > 0 && c.Utilization <= 1) {
		bad("--gpu-memory-utilization must be in (0, 1], got %g; %g is the default", c.Utilization, DefaultUtilization)
	}
	if c.MaxNumSeqs < 1 {
		bad("--max-num-seqs must be ≥ 1, got %d", c.MaxNumSeqs)
	}
	if c.MaxNumBatchedTokens < max(c.MaxNumSeqs, 1) {
		bad("--max-num-batched-tokens (%d) must be ≥ --max-num-seqs (%d); set it to at least %d", c.MaxNumBatchedTokens, c.MaxNumSeqs, max(c.MaxNumSeqs, 1))
	}
	if c.MaxModelLen < 1 || c.MaxModelLen > c.Model.MaxPositionEmbeddings {
		bad("--max-model-len must be in [1, %d] (the model's max_position_embeddings), got %d", c.Model.MaxPositionEmbeddings, c.MaxModelLen)
	}
	if c.SpeculativeTokens < 0 {
		bad("--num-speculative-tokens must be ≥ 0, got %d", c.SpeculativeTokens)
	}
	if c.ParallelDrafting && c.SpeculativeTokens == 0 {
		bad("--parallel-drafting needs speculative tokens; set --num-speculative-tokens ≥ 1 or drop --parallel-drafting")
	}
	if c.CaptureSize < 0 {
		bad("--max-cudagraph-capture-size must be ≥ 0, got %d", c.CaptureSize)
	}
	switch c.DCPCommBackend {
	case CommAGRS:
	case CommA2A:
		if c.DCP <= 1 {
			bad("--dcp-comm-backend a2a requires --decode-context-parallel-size > 1, got %d; use ag_rs", c.DCP)
		}
	default:
		bad("--dcp-comm-backend must be ag_rs or a2a, got %q", c.DCPCommBackend)
	}
	if _, err := MLARowBytes(c.Model, c.KVDtype); err != nil {
		errs = append(errs, err)
	}
	if _, err := IndexerKeyBytes(c.Model, c.IndexerDtype); err != nil {
		errs = append(errs, err)
	}
	if _, err := WeightBytesPerParam(c.WeightDtype); err != nil {
		errs = append(errs, err)
	}
	if b := c.AttentionBackend; b != BackendAuto && !knownBackend(b) {
		bad("unknown --attention-backend %q; use auto, %s (FLASHMLA_SPARSE) or %s (FLASHINFER_MLA_SPARSE)", b, BackendSparseGather, BackendSparseSharded)
	}
	m := c.Measured
	for name, v := range map[string]int64{"--autotune-request": m.AutotuneRequestBytes, "--unaccounted-memory": m.UnaccountedBytes, "--flashinfer-workspace-bytes": m.FlashInferWorkspaceBytes} {
		if v < 0 {
			bad("%s must be ≥ 0 bytes, got %d", name, v)
		}
	}
	for name, p := range map[string]*int64{"--non-kv-memory": m.NonKVBytes, "--cudagraph-memory": m.CUDAGraphBytes} {
		if p != nil && *p < 0 {
			bad("%s must be ≥ 0 bytes, got %d", name, *p)
		}
	}
	return errors.Join(errs...)
}

// rankLayout places every rank: TP innermost, then PCP. DCP groups are
// contiguous TP ranks without PCP, the PCP axis when DCP = PCP, and the
// whole TP × PCP grid when DCP = TP × PCP.
func rankLayout(tp, pcp, dcp int) []Rank {
	ranks := make([]Rank, tp*pcp)
	for r := range ranks {
		k := Rank{Rank: r, TPRank: r % tp, PCPRank: r / tp}
		switch {
		case pcp == 1 || dcp == tp*pcp:
			k.DCPRank, k.DCPGroup = r%dcp, r/dcp
		case dcp == pcp:
			k.DCPRank, k.DCPGroup = k.PCPRank, k.TPRank
		default: // dcp == 1
			k.DCPRank, k.DCPGroup = 0, r
		}
		ranks[r] = k
	}
	return ranks
}

// ActivationBytes is the planner's coarse estimate of one rank's activation
// peak for a step of T tokens (bf16 activations, see docs/planner.md):
// T × 2 B × (8·hidden + max(attention, MLP) per token) + the sampler's f32
// logits for every query row + the indexer's top-k ids and scores.
func ActivationBytes(m *config.Model, tp, dcp, tokens, maxNumSeqs, spec int) int64 {
	h := int64(m.HiddenSize)
	hr := int64(m.NumHeads / tp)
	attn := hr*int64(m.QKHeadDim()) + hr*int64(m.QKNopeHeadDim+m.VHeadDim) +
		hr*int64(dcp)*int64(m.CacheRowDim()) + hr*int64(dcp)*int64(m.KVLoraRank)
	mlp := 3 * int64(m.IntermediateSize) / int64(tp)
	if m.NRoutedExperts > 0 {
		mlp = max(mlp, int64(m.NumExpertsPerTok)*(3*int64(m.MoEIntermediateSize)/int64(tp)+h))
	}
	t := int64(tokens)
	b := t * 2 * (8*h + max(attn, mlp))
	b += int64(maxNumSeqs) * int64(1+spec) * int64(m.VocabSize) * 4
	if m.Sparse() {
		b += t * int64(m.IndexTopK) * 8
	}
	return b
}

// Compute plans the deployment. It returns an error only for impossible
// settings (Validate); everything that is possible but does not fit comes
// back as warnings with fixes.
func Compute(cfg Config) (*Plan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	c := cfg.withDefaults()
	m := c.Model
	gpu := c.Device.Target != TargetCPU
	p := &Plan{
		Model: m.Name, Device: c.Device.Name, Target: c.Device.Target, DeviceMemoryBytes: c.DeviceBytes,
		GPUMemoryUtilization: c.Utilization, TP: c.TP, PCP: c.PCP, DCP: c.DCP, WorldSize: c.TP * c.PCP,
		ExpertParallel: c.ExpertParallel, HeadsPerRank: m.NumHeads / c.TP, KVCacheDtype: c.KVDtype,
		IndexerCacheDtype: c.IndexerDtype, WeightDtype: c.WeightDtype, MaxModelLen: c.MaxModelLen,
		MaxNumBatchedTokens: c.MaxNumBatchedTokens, MaxNumSeqs: c.MaxNumSeqs, SpeculativeTokens: c.SpeculativeTokens,
		ParallelDrafting: c.ParallelDrafting, CaptureSize: c.CaptureSize, DCPCommBackend: c.DCPCommBackend,
		UnaccountedBytes: c.Measured.UnaccountedBytes, AutotuneRequestBytes: c.Measured.AutotuneRequestBytes,
		Warnings: []Warning{}, Notes: []string{}, Ranks: rankLayout(c.TP, c.PCP, c.DCP),
	}
	p.GatheredHeads = p.HeadsPerRank * c.DCP
	if !gpu {
		p.CaptureSize = 0
	}

	// Attention backend for the exact combination.
	comb := Combination{
		Target: c.Device.Target, TP: c.TP, PCP: c.PCP, DCP: c.DCP, KVDtype: c.KVDtype,
		HeadsPerRank: p.HeadsPerRank, QKNopeHeadDim: m.QKNopeHeadDim, Sparse: m.Sparse(),
		SpeculativeTokens: c.SpeculativeTokens,
	}
	name, err := SelectBackend(c.AttentionBackend, comb)
	switch {
	case err == nil:
		p.AttentionBackend, p.AttentionBackendOK = name, true
	default:
		p.addWarning(WarnUnsupportedBackend, "%s", err.Error())
		if c.AttentionBackend != BackendAuto {
			if b, ok := LookupBackend(c.Device.Target, c.AttentionBackend); ok {
				p.AttentionBackend = b.Name // plan the requested backend's buffers anyway
			}
		}
	}
	if b, ok := LookupBackend(c.Device.Target, p.AttentionBackend); ok {
		p.AttentionBackendAlias = b.Alias
	}

	// GPU workspaces: FlashInfer sparse workspace, direct DCP a2a buffer.
	p.FlashInferConfigured = c.Measured.FlashInferWorkspaceBytes
	flashInfer := gpu && p.AttentionBackend == BackendSparseSharded
	if gpu {
		p.FlashInferNeedBytes = FlashInferSparseWorkspaceBytes(DefaultFlashInferWorkspaceBytes, p.HeadsPerRank, c.DCP, c.MaxNumBatchedTokens)
		if c.DCP > 1 {
			p.FlashInferMaxTokens = MaxTokensForWorkspace(p.FlashInferConfigured, DefaultFlashInferWorkspaceBytes, p.GatheredHeads)
		} else {
			p.FlashInferMaxTokens = int64(c.MaxNumBatchedTokens)
		}
		if c.DCP > 1 {
			p.A2ATokens = DCPA2ATokens(c.MaxNumBatchedTokens, c.MaxNumSeqs, c.SpeculativeTokens, c.ParallelDrafting, c.CaptureSize)
			p.A2ABytes = DCPA2ABytes(c.DCP, p.A2ATokens, p.HeadsPerRank, m.KVLoraRank)
			p.A2ABytesAtMaxBatched = DCPA2ABytes(c.DCP, int64(c.MaxNumBatchedTokens), p.HeadsPerRank, m.KVLoraRank)
		}
	}
	if flashInfer {
		p.WorkspaceBytes += p.FlashInferConfigured
	}
	if gpu && c.DCPCommBackend == CommA2A {
		p.WorkspaceBytes += p.A2ABytes
	}

	// Non-KV memory: measured, or weights + activations + workspaces.
	spec := c.SpeculativeTokens > 0
	groups := ParamGroups(m, spec)
	if p.WeightsBytes, err = WeightBytesPerRank(m, groups, c.WeightDtype, c.TP, c.ExpertParallel); err != nil {
		return nil, fmt.Errorf("plan: weights: %w", err)
	}
	p.ActivationBytes = ActivationBytes(m, c.TP, c.DCP, c.MaxNumBatchedTokens, c.MaxNumSeqs, c.SpeculativeTokens)
	if c.Measured.NonKVBytes != nil {
		p.NonKVBytes, p.NonKVMeasured = *c.Measured.NonKVBytes, true
	} else {
		p.NonKVBytes = p.WeightsBytes + p.ActivationBytes + p.WorkspaceBytes
		p.Notes = append(p.Notes, "non-KV memory is an estimate (weights + activation peak + workspaces); pass --non-kv-memory with the profiler's figure")
	}
	if c.Measured.CUDAGraphBytes != nil {
		p.CUDAGraphBytes, p.CUDAGraphMeasured = *c.Measured.CUDAGraphBytes, true
	} else if gpu {
		p.Notes = append(p.Notes, "CUDA-graph memory is not estimated; pass --cudagraph-memory with the profiler's estimate")
	}
	if gpu && c.Measured.AutotuneRequestBytes == 0 {
		p.Notes = append(p.Notes, "no autotuner request given (--autotune-request); the autotuner headroom is not checked")
	}

	// The memory budget.
	layers := CacheLayers(m, spec)
	slot, err := KVSlotBytes(m, c.KVDtype, c.IndexerDtype, layers)
	if err != nil {
		return nil, fmt.Errorf("plan: kv cache: %w", err)
	}
	bud := Budget{
		DeviceBytes: c.DeviceBytes, Utilization: c.Utilization, NonKVBytes: p.NonKVBytes, GraphBytes: p.CUDAGraphBytes,
		OutsideBytes: c.Measured.UnaccountedBytes, SlotBytes: slot, DCP: c.DCP, Interleave: c.Interleave,
		BlockSize: c.BlockSize, MaxModelLen: c.MaxModelLen,
	}
	if err := bud.Validate(); err != nil {
		return nil, fmt.Errorf("plan: budget: %w", err)
	}
	r := bud.Compute()
	p.RequestedBytes, p.KVBudgetBytes, p.KVSlotBytes, p.KVBytesPerToken = r.RequestedBytes, r.KVBudgetBytes, slot, r.KVBytesPerToken
	p.KVTokensPerRank, p.ContextTokens, p.MaxConcurrency = r.KVTokensPerRank, r.ContextTokens, r.MaxConcurrency
	p.RequestKVBytes, p.MaxModelLenFit = r.RequestKVBytes, r.MaxModelLenFit
	p.MinUtilization, p.MinDeviceBytes, p.RecommendedUtilization = r.MinUtilization, r.MinDeviceBytes, r.RecommendedUtilization
	p.AutotuneFreeBytes = r.HeadroomBytes
	p.MaxUtilForAutotune = bud.MaxUtilizationFor(c.Measured.AutotuneRequestBytes)

	p.budgetWarnings(bud, r)
	if gpu {
		p.autotuneWarning(bud)
	}
	if flashInfer && c.DCP > 1 && p.FlashInferNeedBytes > p.FlashInferConfigured {
		p.workspaceWarning(comb)
	}
	if gpu && c.DCPCommBackend == CommA2A && m.Sparse() && int64(c.MaxNumBatchedTokens) > p.A2ATokens {
		p.a2aWarning()
	}
	return p, nil
}

func (p *Plan) addWarning(code, format string, a ...any) {
	p.Warnings = append(p.Warnings, Warning{Code: code, Message: fmt.Sprintf(format, a...)})
}

// utilFix names the utilization (or device size) that gives the KV budget
// at least kv bytes.
func utilFix(b Budget, kv int64) string {
	u := b.MinUtilization(kv)
	if u <= 1 {
		return fmt.Sprintf("--gpu-memory-utilization %.4f", u)
	}
	return fmt.Sprintf("a device of at least %s (or less non-KV memory: more TP or expert-parallel ranks, a smaller --max-num-batched-tokens)", FormatGiB(b.MinDeviceBytes(kv)))
}

func (p *Plan) budgetWarnings(b Budget, r BudgetResult) {
	breakdown := fmt.Sprintf("%.4g × %s = %s minus non-KV %s minus CUDA graphs %s",
		b.Utilization, FormatGiB(b.DeviceBytes), FormatGiB(r.RequestedBytes), FormatGiB(b.NonKVBytes), FormatGiB(b.GraphBytes))
	least := fmt.Sprintf("the least that holds one %d-token request is %s", p.MaxModelLen, utilFix(b, r.RequestKVBytes))
	switch {
	case r.KVBudgetBytes <= 0:
		msg := fmt.Sprintf("KV-cache budget is %s at --gpu-memory-utilization %.4g (%s). ", FormatGiB(r.KVBudgetBytes), b.Utilization, breakdown)
		old := r.RequestedBytes - b.NonKVBytes
		if b.GraphBytes > 0 && old > 0 && r.RecommendedUtilization <= 1 {
			msg += fmt.Sprintf("Set --gpu-memory-utilization %.4f to keep the %s budget an engine that did not count graph memory had at %.4g; %s.",
				r.RecommendedUtilization, FormatGiB(old), b.Utilization, least)
		} else {
			msg += "Raise the budget: " + least + "."
		}
		p.addWarning(WarnNegativeKVBudget, "%s", msg)
	case r.KVTokensPerRank < r.RequestSlots:
		fix := least
		if r.MaxModelLenFit > 0 {
			fix += fmt.Sprintf(", or set --max-model-len %d", r.MaxModelLenFit)
		}
		p.addWarning(WarnKVCacheTooSmall, "KV-cache budget %s (%s) holds %d token slots per rank, but one %d-token request needs %d (%s); %s.",
			FormatGiB(r.KVBudgetBytes), breakdown, r.KVTokensPerRank, p.MaxModelLen, r.RequestSlots, FormatGiB(r.RequestKVBytes), fix)
	}
}

func (p *Plan) autotuneWarning(b Budget) {
	req := p.AutotuneRequestBytes
	if req == 0 || p.AutotuneFreeBytes >= req {
		return
	}
	u := p.MaxUtilForAutotune
	msg := fmt.Sprintf("the kernel autotuner asks for %s after the KV cache is allocated, but only %s stays free outside the %.4g budget (%s × (1 − %.4g) − unaccounted %s). ",
		FormatGiB(req), FormatGiB(p.AutotuneFreeBytes), b.Utilization, FormatGiB(b.DeviceBytes), b.Utilization, FormatGiB(b.OutsideBytes))
	if u > 0 {
		gain := requested(b.DeviceBytes, b.Utilization) - requested(b.DeviceBytes, u)
		msg += fmt.Sprintf("Set --gpu-memory-utilization %.4f or lower (%s more headroom)", u, FormatGiB(gain))
		if r := (Budget{DeviceBytes: b.DeviceBytes, Utilization: u, NonKVBytes: b.NonKVBytes, GraphBytes: b.GraphBytes}); requested(r.DeviceBytes, u)-r.NonKVBytes-r.GraphBytes < p.RequestKVBytes {
			msg += fmt.Sprintf("; at that setting the KV cache cannot hold one %d-token request, so also lower non-KV memory (more TP or expert-parallel ranks) or --max-model-len", p.MaxModelLen)
		}
		msg += "."
	} else {
		msg += fmt.Sprintf("No utilization leaves enough: the request plus unaccounted memory (%s) exceeds the device; lower the autotuner's workspace or the unaccounted memory.", FormatGiB(req+b.OutsideBytes))
	}
	p.addWarning(WarnAutotuneHeadroom, "%s", msg)
}

func (p *Plan) workspaceWarning(comb Combination) {
	msg := fmt.Sprintf("the FlashInfer sparse-MLA workspace under DCP needs %s (%s base + LSE slab 8 B × %d gathered heads × %d tokens × 256 + 1 MiB) but the configured buffer is %s. Set --flashinfer-workspace-bytes %d (VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=%d)",
		FormatBytes(p.FlashInferNeedBytes), FormatBytes(DefaultFlashInferWorkspaceBytes), p.GatheredHeads, p.MaxNumBatchedTokens,
		FormatBytes(p.FlashInferConfigured), p.FlashInferNeedBytes, p.FlashInferNeedBytes)
	if p.FlashInferMaxTokens >= int64(max(p.MaxNumSeqs, 1)) {
		msg += fmt.Sprintf(", or --max-num-batched-tokens %d", p.FlashInferMaxTokens)
	}
	alt := comb
	if name, err := SelectBackend(BackendSparseGather, alt); err == nil {
		msg += fmt.Sprintf(", or --attention-backend %s (FLASHMLA_SPARSE), which needs no LSE slab", name)
	}
	p.addWarning(WarnWorkspaceOverflow, "%s.", msg)
}

func (p *Plan) a2aWarning() {
	extra := p.A2ABytesAtMaxBatched - p.A2ABytes
	p.addWarning(WarnA2ABufferOverflow, "the direct DCP all-to-all buffer holds %d tokens (%s = min(max_num_batched_tokens, max(max_num_seqs × (1 + k × spec), capture size))) but a forced-MQA sparse step can carry up to %d tokens. Size it for --max-num-batched-tokens: %s per rank (%s, %.0f MB more), or set --max-num-batched-tokens %d, or --dcp-comm-backend ag_rs.",
		p.A2ATokens, FormatBytes(p.A2ABytes), p.MaxNumBatchedTokens, FormatBytes(p.A2ABytesAtMaxBatched), FormatGiB(p.A2ABytesAtMaxBatched), float64(extra)/1e6, p.A2ATokens)
}
