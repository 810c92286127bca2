package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/spec"
)

// engineFlags are the flags the commands that start the engine on ranks of
// their own (serve, bench latency, bench throughput) share: the model and
// its weights, the ranks and their processes, and the engine's sizes and
// caches. Each command embeds them and adds its own; what differs between
// the commands (--model's default, --max-num-seqs and --max-model-len, the
// prefix cache's switch) stays with the command.
type engineFlags struct {
	model                      string
	weightSeed                 uint64
	tp, dcp, pcp, interleave   int
	backend, dcpComm           string
	comm                       string
	threadsPerRank             int
	collectiveTimeout          time.Duration
	expertParallel             bool
	quantization               string
	speculative                string // --speculative-config, where the command takes it
	engine                     engine.Options
	kvDType, idxDType          string
	memoryLimit, kvCacheMemory string
	workspaces                 []string

	// procs, set on world rank 0 of a multi-process deployment, drives the
	// other processes' ranks; procWeights is the most loaded rank's weights.
	procs       *engine.Procs
	procWeights int64
}

// addEngineFlags registers the shared flags on cmd, --model defaulting to
// defaultModel.
func (e *engineFlags) addEngineFlags(cmd *cobra.Command, defaultModel string) {
	f := cmd.Flags()
	f.StringVar(&e.model, "model", defaultModel, modelUsage)
	f.Uint64Var(&e.weightSeed, "weight-seed", model.DefaultWeightSeed, "seed of a preset's random weights")
	f.IntVar(&e.tp, "tensor-parallel-size", 1, "tensor-parallel ranks")
	f.IntVar(&e.dcp, "decode-context-parallel-size", 1, "decode-context-parallel ranks")
	f.IntVar(&e.pcp, "prefill-context-parallel-size", 1, "prefill-context-parallel ranks")
	f.IntVar(&e.interleave, "cp-kv-cache-interleave-size", 1, "consecutive positions kept on one DCP rank")
	addThreadsFlag(cmd, &e.threadsPerRank)
	addCollectiveTimeoutFlag(f, &e.collectiveTimeout)
	f.StringVar(&e.comm, "comm", "inproc", "transport: inproc (ranks are goroutines) or mpi (one process per rank under mpirun -np TP·PCP, rank 0 leading the others; build with -tags mpi)")
	f.StringVar(&e.backend, "attention-backend", "auto", "auto, sparse-gather (FLASHMLA_SPARSE) or sparse-sharded (FLASHINFER_MLA_SPARSE)")
	f.StringVar(&e.dcpComm, "dcp-comm-backend", "ag_rs", "DCP combine: ag_rs or a2a")
	addModelFlags(f, &e.expertParallel, &e.quantization)
	f.IntVar(&e.engine.MaxNumBatchedTokens, "max-num-batched-tokens", engine.DefaultMaxNumBatchedTokens, "tokens per step")
	f.IntVar(&e.engine.BlockSize, "block-size", engine.DefaultBlockSize, "positions per KV block (the prefix-cache granularity)")
	f.StringVar(&e.kvDType, "kv-cache-dtype", "f32", "KV cache dtype: f32, bf16, fp8_ds_mla")
	f.StringVar(&e.idxDType, "indexer-cache-dtype", "f32", "indexer key cache dtype: f32, fp8")
	f.StringVar(&e.memoryLimit, "memory-limit", "", "memory of one rank, e.g. 8GiB (default: this host's RAM)")
	f.Float64Var(&e.engine.MemoryUtilization, "memory-utilization", plan.DefaultUtilization, "fraction of --memory-limit the engine may use")
	f.StringVar(&e.kvCacheMemory, "kv-cache-memory", "", "KV cache bytes per rank, e.g. 8GiB (default: 4GiB, as vLLM's CPU backend; what --memory-limit leaves after weights and workspaces when that is less)")
	f.StringArrayVar(&e.workspaces, "workspace-bytes", nil, "NAME=BYTES: size a workspace explicitly (refused if smaller than the worst step needs)")
}

// deployment is what the flags say about the ranks and their processes.
func (e *engineFlags) deployment() deployment {
	return deployment{comm: e.comm, model: e.model, weightSeed: e.weightSeed, tp: e.tp, pcp: e.pcp, dcp: e.dcp,
		interleave: e.interleave, backend: e.backend, dcpComm: e.dcpComm, kvDType: e.kvDType, blockSize: e.engine.BlockSize,
		expertParallel: e.expertParallel, quantization: e.quantization, collectiveTimeout: e.collectiveTimeout}
}

// engineOptions turns the shared flags into engine options (the command's
// own flags are applied by the caller), refusing impossible values.
func (e *engineFlags) engineOptions() (engine.Options, error) {
	eo := e.engine
	if err := checkParallel(e.tp, e.pcp, e.dcp, e.interleave); err != nil {
		return eo, err
	}
	if err := checkCollectiveTimeout(e.collectiveTimeout); err != nil {
		return eo, err
	}
	eo.Layout = kvcache.Layout{N: e.dcp, I: e.interleave}
	eo.RanksPerHost = e.tp * e.pcp
	if err := applyCacheFlags(&eo, e.kvDType, e.idxDType, e.memoryLimit, e.kvCacheMemory, e.workspaces); err != nil {
		return eo, err
	}
	if err := applySpeculative(&eo, e.speculative); err != nil {
		return eo, err
	}
	return eo, nil
}

// preflight loads the model's config, takes the engine options from
// options (the command's whole set of flags, checked) and checks the
// attention backend and the memory of the engine's start-up, all before
// anything loads.
func (e *engineFlags) preflight(options func(*config.Model) (engine.Options, error)) (*config.Model, engine.Options, error) {
	cfg, err := loadConfig(e.model)
	if err != nil {
		return nil, engine.Options{}, err
	}
	eo, err := options(cfg)
	if err != nil {
		return nil, eo, err
	}
	d := e.deployment()
	d.blockSize = eo.BlockSize
	if _, err := d.backendPlan(cfg); err != nil {
		return nil, eo, err
	}
	if err := checkEngineStart(e.model, cfg, eo, d); err != nil {
		return nil, eo, err
	}
	return cfg, eo, nil
}

// builtRanks are the model's ranks, built: the model's config, the factory
// of their executors, the most loaded rank's weight bytes and what releases
// what was built.
type builtRanks struct {
	cfg     *config.Model
	factory engine.ExecutorFactory
	weights int64
	release func()
}

// buildRanks loads the model's weights and builds its ranks for KV blocks
// of blockSize positions, checking the attention backend before any weight
// loads.
func (e *engineFlags) buildRanks(blockSize int) (builtRanks, error) {
	cfg, src, err := loadModel(e.model, e.weightSeed, e.quantization)
	if err != nil {
		return builtRanks{}, err
	}
	d := e.deployment()
	d.blockSize = blockSize
	bp, err := d.backendPlan(cfg)
	if err != nil {
		return builtRanks{}, err
	}
	factory, weights, release, err := d.executors(e.procs, e.procWeights, cfg, src, bp)
	if err != nil {
		return builtRanks{}, err
	}
	return builtRanks{cfg: cfg, factory: factory, weights: weights, release: release}, nil
}

// specConfigUsage is --speculative-config's help, the same on every command.
const specConfigUsage = `MTP speculative decoding, vLLM's JSON: '{"method":"mtp","num_speculative_tokens":K}'`

// addSpeculativeFlag registers --speculative-config.
func addSpeculativeFlag(f *pflag.FlagSet, dst *string) {
	f.StringVar(dst, "speculative-config", "", specConfigUsage)
}

// applySpeculative parses --speculative-config into eo (nil when unset).
func applySpeculative(eo *engine.Options, s string) error {
	c, err := spec.ParseConfig(s)
	if err != nil {
		return fmt.Errorf("--speculative-config: %w", err)
	}
	eo.Speculative = c
	return nil
}

// applyCacheFlags parses the cache and memory flags every engine command
// shares (--kv-cache-dtype, --indexer-cache-dtype, --memory-limit,
// --kv-cache-memory, --workspace-bytes NAME=BYTES) into eo.
func applyCacheFlags(eo *engine.Options, kvDType, idxDType, memoryLimit, kvCacheMemory string, workspaces []string) error {
	var err error
	if eo.KVDType, err = kvcache.ParseKVDType(kvDType); err != nil {
		return err
	}
	if eo.IndexerDType, err = kvcache.ParseIndexerDType(idxDType); err != nil {
		return err
	}
	for _, f := range []struct {
		name, v string
		dst     *int64
	}{{"--memory-limit", memoryLimit, &eo.MemoryLimit}, {"--kv-cache-memory", kvCacheMemory, &eo.KVCacheMemory}} {
		if f.v == "" {
			continue
		}
		if *f.dst, err = plan.ParseSize(f.v); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	for _, w := range workspaces {
		name, size, ok := strings.Cut(w, "=")
		if !ok {
			return fmt.Errorf("--workspace-bytes %q: want NAME=BYTES, e.g. logits=64MiB", w)
		}
		b, err := plan.ParseSize(size)
		if err != nil {
			return fmt.Errorf("--workspace-bytes %s: %w", name, err)
		}
		if eo.WorkspaceBytes == nil {
			eo.WorkspaceBytes = map[string]int64{}
		}
		eo.WorkspaceBytes[name] = b
	}
	return nil
}

// specResult is the speculative-decoding part of a bench report, in the
// terms of vLLM's spec-decode metrics.
type specResult struct {
	K                    int       `json:"num_speculative_tokens"`
	Drafts               int64     `json:"num_drafts"`
	DraftTokens          int64     `json:"num_draft_tokens"`
	AcceptedTokens       int64     `json:"num_accepted_tokens"`
	AcceptanceRate       float64   `json:"acceptance_rate"`
	MeanAcceptanceLength float64   `json:"mean_acceptance_length"`
	AcceptanceRatePerPos []float64 `json:"acceptance_rate_per_position"`
}

// newSpecResult reports st, or nil without speculation.
func newSpecResult(c *spec.Config, st spec.Stats) *specResult {
	if c == nil {
		return nil
	}
	r := &specResult{K: c.K(), Drafts: st.Drafts, DraftTokens: st.DraftTokens, AcceptedTokens: st.AcceptedTokens,
		MeanAcceptanceLength: st.MeanAcceptanceLength(), AcceptanceRatePerPos: st.AcceptanceRatePerPos()}
	if st.DraftTokens > 0 {
		r.AcceptanceRate = float64(st.AcceptedTokens) / float64(st.DraftTokens)
	}
	return r
}

// formatRates prints rates as percentages.
func formatRates(r []float64) string {
	var b strings.Builder
	for i, v := range r {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.1f%%", 100*v)
	}
	return b.String()
}

// sizeValue is a flag of a byte count that accepts what plan.ParseSize
// reads ("4GiB", "512MiB", "1.5GB", "1073741824"), so that every size flag
// of every command takes the same forms. It stores into an int64 or an int.
type sizeValue struct {
	i64 *int64
	i   *int
}

// sizeVar registers a size flag stored in *p with default def.
func sizeVar(f *pflag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	f.Var(sizeValue{i64: p}, name, usage)
}

// sizeIntVar is sizeVar for an int.
func sizeIntVar(f *pflag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	f.Var(sizeValue{i: p}, name, usage)
}

func (v sizeValue) get() int64 {
	if v.i64 != nil {
		return *v.i64
	}
	if v.i != nil {
		return int64(*v.i)
	}
	return 0
}

// String writes the size with the largest binary unit that divides it.
func (v sizeValue) String() string {
	b := v.get()
	for _, u := range []struct {
		name string
		n    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && b%u.n == 0 {
			return fmt.Sprintf("%d%s", b/u.n, u.name)
		}
	}
	return fmt.Sprint(b)
}

func (v sizeValue) Set(s string) error {
	b, err := plan.ParseSize(s)
	if err != nil {
		return err
	}
	if v.i != nil {
		if b > math.MaxInt {
			return fmt.Errorf("size %q is larger than %d bytes", s, math.MaxInt)
		}
		*v.i = int(b)
		return nil
	}
	*v.i64 = b
	return nil
}

func (v sizeValue) Type() string { return "size" }
