package verify

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/oracle"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/spec"
)

// Config is one verification run: a model, a parallel configuration and the
// workload (a prefill of every prompt length in one batch, then greedy decode
// steps of all of them together).
type Config struct {
	Model        string // preset or checkpoint directory
	WeightSeed   uint64
	TP, PCP, DCP int
	Interleave   int
	DCPComm      string // ag_rs or a2a
	Backend      string // auto, sparse-gather, sparse-sharded (or aliases)
	KVDType      string
	IndexerDType string
	BlockSize    int
	PromptLens   []int
	DecodeSteps  int
	// SpecTokens adds draft tokens to every decode row (multi-token decode
	// rows, as when verifying speculative tokens).
	SpecTokens int
	// PrefillChunk splits prefills into chunks of at most this many tokens
	// (0: whole prompts), so later chunks continue a cached prefix.
	PrefillChunk int
	Seed         uint64 // prompt token seed
	// Tolerance bounds max |Δ logprob| against the single-rank engine and the oracle.
	Tolerance float64
	// SkipOracle leaves out the float64 oracle (it is slow on long prompts).
	SkipOracle bool
	// InjectMismatch makes one rank enter one collective with a wrong count.
	InjectMismatch bool
	// World, when set, makes this process one rank (World.Rank()) of a
	// multi-process world of TP·PCP processes (an MPI job): it runs its own
	// shard, and every process runs the single-rank reference and reaches
	// the same verdict. nil runs every rank as a goroutine of this process.
	World comm.Group
	// CollectiveTimeout bounds every collective (default 30 s).
	CollectiveTimeout time.Duration
	// worldGroups are World's TP, PCP and DCP groups, split once per run
	// (a multi-process world splits each group once).
	worldGroups *comm.Groups
	// ExpertParallel spreads the routed experts whole over the TP × PCP
	// ranks instead of slicing every expert over TP.
	ExpertParallel bool
	// Quantization "fp8" block-quantizes an unquantized checkpoint's Linear
	// weights at load (model.Quantize); "" keeps them as stored.
	Quantization string
	// Spec, when set, also runs the workload with MTP speculative decoding
	// on one rank and on the layout: both must generate the greedy tokens
	// of plain decoding and accept the same drafts round by round.
	Spec *spec.Config
}

// Result is what a run found.
type Result struct {
	OK                  bool    `json:"ok"`
	Config              string  `json:"config"`
	Backend             string  `json:"attention_backend"`
	DCPComm             string  `json:"dcp_comm_backend"`
	MaxAbsLogprobDiff   float64 `json:"max_abs_logprob_diff"`
	MaxAbsOracleDiff    float64 `json:"max_abs_oracle_logprob_diff"`
	GreedyIdentical     bool    `json:"greedy_identical"`
	RanksIdentical      bool    `json:"ranks_identical"`
	SelectionsIdentical bool    `json:"selections_identical"`
	KVTokensPerRank     []int   `json:"kv_tokens_per_rank"`
	SingleRankKVTokens  int     `json:"single_rank_kv_tokens"`
	Positions           int     `json:"positions_compared"`
	OracleRoundingTies  int     `json:"oracle_rounding_ties"`
	OracleNearIndexTies int     `json:"oracle_near_index_ties"`
	// RoutesIdentical: every row's routed experts equal the single rank's
	// and, with the oracle, the oracle's.
	RoutesIdentical     bool `json:"routes_identical"`
	OracleNearRouteTies int  `json:"oracle_near_route_ties"`
	// ExpertLoadPerRank is, per rank of the parallel run, the rows its
	// routed experts computed over every routed layer (with expert
	// parallelism each rank's own experts; without, every rank computes a
	// slice of every expert and sees every row).
	ExpertLoadPerRank []int64 `json:"expert_load_per_rank,omitempty"`
	// Speculative decoding (Config.Spec): greedy output with speculation
	// equals plain greedy output, single rank and parallel; the parallel
	// run accepts the same drafts in every round.
	SpecGreedyIdentical     *bool     `json:"spec_greedy_identical,omitempty"`
	SpecAcceptanceIdentical *bool     `json:"spec_acceptance_identical,omitempty"`
	SpecMeanAcceptance      float64   `json:"spec_mean_acceptance_length,omitempty"`
	SpecAcceptancePerPos    []float64 `json:"spec_acceptance_rate_per_position,omitempty"`
	SpecTargetSteps         int       `json:"spec_target_steps,omitempty"`
	// SpecDraftMaxDiff is the largest difference between the MTP layer's
	// draft log-probabilities on the layout and on one rank.
	SpecDraftMaxDiff float64 `json:"spec_draft_max_abs_logprob_diff,omitempty"`
	// SingleRankExpertRows is the rows the single-rank engine's experts
	// computed: with expert parallelism, ExpertLoadPerRank adds up to it.
	SingleRankExpertRows int64    `json:"single_rank_expert_rows,omitempty"`
	CollectivesPerRank   []uint64 `json:"collectives_per_rank"`
	Problems             []string `json:"problems,omitempty"`
	WallSeconds          float64  `json:"wall_seconds"`
}

func (c *Config) defaults() {
	if c.Model == "" {
		c.Model = config.DefaultPreset
	}
	for _, p := range []*int{&c.TP, &c.PCP, &c.DCP, &c.Interleave} {
		if *p == 0 {
			*p = 1
		}
	}
	if c.DCPComm == "" {
		c.DCPComm = plan.CommAGRS
	}
	if c.Backend == "" {
		c.Backend = plan.BackendAuto
	}
	if c.KVDType == "" {
		c.KVDType = "f32"
	}
	if c.IndexerDType == "" {
		c.IndexerDType = "f32"
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if len(c.PromptLens) == 0 {
		c.PromptLens = []int{1, 7, 40}
	}
	if c.Tolerance == 0 {
		c.Tolerance = 1e-4
	}
	if c.CollectiveTimeout == 0 {
		c.CollectiveTimeout = inproc.DefaultTimeout
	}
}

func (c *Config) String() string {
	s := fmt.Sprintf("TP%d/PCP%d/DCP%d I=%d %s kv=%s idx=%s", c.TP, c.PCP, c.DCP, c.Interleave, c.DCPComm, c.KVDType, c.IndexerDType)
	if c.ExpertParallel {
		s += " EP"
	}
	if c.Quantization != "" {
		s += " quant=" + c.Quantization
	}
	if k := c.Spec.K(); k > 0 {
		s += fmt.Sprintf(" mtp=%d", k)
	}
	return s
}

// shard is world rank's slice of the weights in the parallel run.
func (c *Config) shard(rank int) model.Shard {
	l := comm.Layout{TP: c.TP, PCP: c.PCP, DCP: c.DCP}
	s := model.Shard{TPRank: l.TPRank(rank), TPSize: l.TP}
	if c.ExpertParallel {
		s.EPRank, s.EPSize = rank, l.World()
	}
	return s
}

// Validate checks everything a run needs before any weight is loaded: the
// parallel layout, the interleave against the block size, head divisibility,
// the backend's capabilities for the exact combination, the cache dtypes and
// the workload. Every refusal names the constraint, the values and a setting
// that works.
func (c *Config) Validate(cfg *config.Model) (*cp.BackendPlan, error) {
	l := comm.Layout{TP: c.TP, PCP: c.PCP, DCP: c.DCP}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if cfg.NumHeads%c.TP != 0 {
		var ok []int
		for tp := 1; tp <= cfg.NumHeads; tp++ {
			if cfg.NumHeads%tp == 0 {
				ok = append(ok, tp)
			}
		}
		return nil, fmt.Errorf("num_attention_heads %d is not divisible by --tensor-parallel-size %d; use one of %v", cfg.NumHeads, c.TP, ok)
	}
	if err := model.CheckShard(cfg, c.shard(0)); err != nil {
		return nil, err
	}
	if c.Spec != nil {
		if err := c.Spec.Validate(); err != nil {
			return nil, err
		}
		if cfg.NumNextNPredict == 0 {
			return nil, fmt.Errorf("--speculative-config method mtp needs the model's MTP layer, but %q has num_nextn_predict_layers 0; use a model with one (glm5-moe-mini, v32-moe-mini)", cfg.Name)
		}
		if c.SpecTokens > 0 {
			return nil, fmt.Errorf("--spec-tokens adds fixed draft rows; --speculative-config drafts with the MTP layer: give one of them")
		}
	}
	if _, err := kvcache.ParseKVDType(c.KVDType); err != nil {
		return nil, err
	}
	if _, err := kvcache.ParseIndexerDType(c.IndexerDType); err != nil {
		return nil, err
	}
	bp, err := cp.NewBackendPlan(cp.BackendConfig{
		Layout: l, Interleave: c.Interleave, BlockSize: c.BlockSize, KVDtype: c.KVDType,
		Backend: c.Backend, Comm: c.DCPComm, HeadsPerRank: cfg.NumHeads / c.TP,
		QKNopeHeadDim: cfg.QKNopeHeadDim, Sparse: cfg.Sparse(),
	})
	if err != nil {
		return nil, err
	}
	for _, n := range c.PromptLens {
		if n < 1 {
			return nil, fmt.Errorf("--prompt-lens must be ≥ 1, got %d", n)
		}
		if n+c.DecodeSteps > cfg.MaxPositionEmbeddings {
			return nil, fmt.Errorf("prompt %d + %d decode steps exceeds max_position_embeddings %d", n, c.DecodeSteps, cfg.MaxPositionEmbeddings)
		}
	}
	if c.DecodeSteps < 0 {
		return nil, fmt.Errorf("--decode-steps must be ≥ 0, got %d", c.DecodeSteps)
	}
	return bp, nil
}

// traced records selections per (seq, position, layer).
type selKey struct{ seq, pos, layer int32 }

// engineRun is one engine (one or many ranks) over the workload.
type engineRun struct {
	logprobs    [][][]float64 // [seq][position][vocab] log-softmax, positions ≥ prompt-1 … and all prompt rows
	tokens      [][]int32     // [seq] prompt + generated
	sel         map[selKey][]int32
	routes      map[selKey][]int32 // routed experts, sorted, of the rows rank 0 saw
	runners     []*model.Runner
	tables      [][]int32
	collectives []uint64 // per rank, over its TP, PCP and DCP groups
}

// Run verifies one configuration.
func Run(ctx context.Context, c Config) (*Result, error) {
	start := time.Now()
	c.defaults()
	cfg, src, err := model.Source(c.Model, c.WeightSeed)
	if err != nil {
		return nil, err
	}
	if cfg, src, err = model.Quantize(cfg, src, c.Quantization); err != nil {
		return nil, err
	}
	bp, err := c.Validate(cfg)
	if err != nil {
		return nil, err
	}
	if c.World != nil {
		if c.World.Size() != c.TP*c.PCP {
			return nil, fmt.Errorf("the world has %d processes, TP=%d × PCP=%d needs %d; start it with mpirun -np %d", c.World.Size(), c.TP, c.PCP, c.TP*c.PCP, c.TP*c.PCP)
		}
		if c.KVDType != "f32" || c.IndexerDType != "f32" {
			return nil, fmt.Errorf("across processes verify compares f32 caches (quantized caches are judged by the oracle against every rank's cache, which needs one process); use --kv-cache-dtype f32 --indexer-cache-dtype f32 or run in-process")
		}
		if c.World.Rank() != 0 {
			c.SkipOracle = true // rank 0 checks the reference against the oracle
		}
		gs, err := comm.Layout{TP: c.TP, PCP: c.PCP, DCP: c.DCP}.Split(c.World)
		if err != nil {
			return nil, err
		}
		c.worldGroups = &gs
	}
	prompts := makePrompts(cfg, c.PromptLens, c.Seed)
	single, err := runEngine(ctx, cfg, src, c, prompts, nil)
	if err != nil {
		return nil, fmt.Errorf("single-rank run: %w", err)
	}
	par, err := runEngine(ctx, cfg, src, c, prompts, bp)
	if err != nil {
		return nil, err
	}
	res := &Result{Config: c.String(), Backend: bp.Backend, DCPComm: bp.Comm, GreedyIdentical: true, RanksIdentical: true, SelectionsIdentical: true, RoutesIdentical: true}
	// Greedy tokens: the parallel run chose its own tokens.
	for s := range prompts {
		if !slices.Equal(single.tokens[s], par.tokens[s]) {
			res.GreedyIdentical = false
			res.Problems = append(res.Problems, fmt.Sprintf("sequence %d: greedy tokens differ: single %v, parallel %v", s, single.tokens[s][len(prompts[s]):], par.tokens[s][len(prompts[s]):]))
		}
	}
	// Logprobs against the single rank, at every position both ran on the same tokens.
	for s := range prompts {
		n := min(len(single.logprobs[s]), len(par.logprobs[s]))
		for p := 0; p < n; p++ {
			if p >= len(prompts[s]) && single.tokens[s][p] != par.tokens[s][p] {
				break
			}
			res.Positions++
			res.MaxAbsLogprobDiff = math.Max(res.MaxAbsLogprobDiff, maxAbsDiff(single.logprobs[s][p], par.logprobs[s][p]))
		}
	}
	// Selections: every row's global top-k must equal the single rank's.
	for k, v := range single.sel {
		if got, ok := par.sel[k]; ok && !slices.Equal(got, v) {
			res.SelectionsIdentical = false
			if len(res.Problems) < 10 {
				res.Problems = append(res.Problems, fmt.Sprintf("sequence %d position %d layer %d: selection differs: single %v, parallel %v", k.seq, k.pos, k.layer, v, got))
			}
		}
	}
	// Routes: every row's experts must equal the single rank's.
	for k, v := range single.routes {
		if got, ok := par.routes[k]; ok && !slices.Equal(got, v) {
			res.RoutesIdentical = false
			if len(res.Problems) < 10 {
				res.Problems = append(res.Problems, fmt.Sprintf("sequence %d position %d layer %d: routed experts differ: single %v, parallel %v", k.seq, k.pos, k.layer, v, got))
			}
		}
	}
	if res.ExpertLoadPerRank, err = expertLoad(ctx, c, par); err != nil {
		return nil, err
	}
	if res.ExpertLoadPerRank != nil {
		res.SingleRankExpertRows = expertRows(single.runners[0])
		var total int64
		for _, v := range res.ExpertLoadPerRank {
			total += v
		}
		if c.ExpertParallel && total != res.SingleRankExpertRows {
			res.RoutesIdentical = false
			res.Problems = append(res.Problems, fmt.Sprintf("expert parallel ranks computed %d expert rows %v, the single rank %d: a routed row was lost or computed twice", total, res.ExpertLoadPerRank, res.SingleRankExpertRows))
		}
	}
	// KV tokens each rank holds.
	l := kvcache.Layout{N: c.DCP, I: c.Interleave}
	res.KVTokensPerRank = make([]int, c.TP*c.PCP)
	layout := comm.Layout{TP: c.TP, PCP: c.PCP, DCP: c.DCP}
	for rank := range res.KVTokensPerRank {
		for s := range prompts {
			res.KVTokensPerRank[rank] += l.LocalLen(len(par.tokens[s])-1, layout.DCPRank(rank))
		}
	}
	for s := range prompts {
		res.SingleRankKVTokens += len(single.tokens[s]) - 1
	}
	res.CollectivesPerRank = par.collectives
	if c.Spec != nil {
		if err := compareSpec(ctx, cfg, src, c, prompts, bp, single, res); err != nil {
			return nil, err
		}
	}
	if c.World != nil {
		mine := []float64{0}
		if r := par.runners[0]; r.Opt.Parallel != nil {
			g := r.Opt.Parallel.Groups
			mine[0] = float64(g.TP.Stats().Collectives + g.PCP.Stats().Collectives + g.DCP.Stats().Collectives)
		}
		all := make([]float64, c.World.Size())
		if err := comm.AllGather(ctx, c.World, all, mine); err != nil {
			return nil, err
		}
		res.CollectivesPerRank = make([]uint64, len(all))
		for i, v := range all {
			res.CollectivesPerRank[i] = uint64(v)
		}
	}
	if !c.SkipOracle {
		// Both engines against the oracle, each with rounding ties resolved
		// against its own cache: this is the comparison that holds for
		// quantized caches, where a value at a rounding boundary may land on
		// different codes in the two engines.
		single1, par1 := Result{SelectionsIdentical: true, RoutesIdentical: true}, Result{SelectionsIdentical: true, RoutesIdentical: true}
		if err := compareOracle(cfg, src, c, single, &single1); err != nil {
			return nil, err
		}
		if err := compareOracle(cfg, src, c, par, &par1); err != nil {
			return nil, err
		}
		res.MaxAbsOracleDiff = max(single1.MaxAbsOracleDiff, par1.MaxAbsOracleDiff)
		res.OracleRoundingTies = single1.OracleRoundingTies + par1.OracleRoundingTies
		res.OracleNearIndexTies = single1.OracleNearIndexTies
		res.OracleNearRouteTies = single1.OracleNearRouteTies
		res.SelectionsIdentical = res.SelectionsIdentical && single1.SelectionsIdentical && par1.SelectionsIdentical
		res.RoutesIdentical = res.RoutesIdentical && single1.RoutesIdentical && par1.RoutesIdentical
		res.Problems = append(res.Problems, single1.Problems...)
		for _, p := range par1.Problems {
			res.Problems = append(res.Problems, "parallel: "+p)
		}
	} else if c.KVDType != "f32" || c.IndexerDType != "f32" {
		return nil, fmt.Errorf("quantized caches (%s KV, %s indexer keys) are judged against the oracle; run without --skip-oracle", c.KVDType, c.IndexerDType)
	}
	res.WallSeconds = time.Since(start).Seconds()
	// With f32 caches the two engines compute the same values and must agree
	// within the tolerance directly. With quantized caches a value at a
	// rounding boundary may take neighbouring codes in the two engines, so each
	// is held to the tolerance against the oracle (above) instead.
	quantized := c.KVDType != "f32" || c.IndexerDType != "f32"
	closeToSingle := quantized || res.MaxAbsLogprobDiff <= c.Tolerance
	specOK := c.Spec == nil || (*res.SpecGreedyIdentical && *res.SpecAcceptanceIdentical)
	res.OK = specOK && res.GreedyIdentical && res.SelectionsIdentical && res.RoutesIdentical && res.RanksIdentical &&
		closeToSingle && (c.SkipOracle || res.MaxAbsOracleDiff <= c.Tolerance)
	if !closeToSingle {
		res.Problems = append(res.Problems, fmt.Sprintf("max |Δ logprob| vs single rank %.3g > %.3g", res.MaxAbsLogprobDiff, c.Tolerance))
	}
	if !c.SkipOracle && res.MaxAbsOracleDiff > c.Tolerance {
		res.Problems = append(res.Problems, fmt.Sprintf("max |Δ logprob| vs oracle %.3g > %.3g", res.MaxAbsOracleDiff, c.Tolerance))
	}
	if c.World != nil {
		// Every process reaches the same verdict: a difference any rank saw
		// (its own rows' selections, rank 0's oracle check) fails them all.
		bad := []int32{0}
		if !res.OK {
			bad[0] = 1
		}
		sum := make([]int32, 1)
		if err := comm.AllReduce(ctx, c.World, sum, bad); err != nil {
			return nil, err
		}
		if sum[0] > bad[0] {
			res.Problems = append(res.Problems, fmt.Sprintf("%d other rank(s) found a difference", sum[0]-bad[0]))
		}
		res.OK = sum[0] == 0
	}
	return res, nil
}

// compareOracle checks the single-rank engine (which the parallel run was just
// compared with) against the float64 oracle, resolving rounding ties against
// the engine's own cache: a stored row is read from the rank of the first DCP
// group that owns its position.
func compareOracle(cfg *config.Model, src model.TensorSource, c Config, single *engineRun, res *Result) error {
	owner := func(pos int) (*model.Runner, int32) { return single.runners[0], 0 }
	if r0 := single.runners[0]; r0.Opt.Parallel != nil {
		l := r0.Opt.Parallel.Layout
		members := l.DCPMembers(0)
		owner = func(pos int) (*model.Runner, int32) {
			d := r0.Layout.Owner(pos)
			return single.runners[members[d]], int32(d)
		}
	}
	for s := range single.tokens {
		om, err := oracle.New(cfg, model.OracleWeights{Src: src}, oracle.Options{KVDType: c.KVDType, IndexerDType: c.IndexerDType})
		if err != nil {
			return err
		}
		table := single.tables[s]
		lookup := func(pos int) (*model.Runner, int32) {
			r, d := owner(pos)
			return r, r.Layout.Slot(table, r.Cache.BlockSize(), pos, int(d))
		}
		om.WithStoredValues(oracle.StoredValues{
			Row: func(layer, pos int) []float32 {
				r, slot := lookup(pos)
				return slices.Clone(r.Cache.Layer(layer).Row(slot, make([]float32, cfg.CacheRowDim())))
			},
			Key: func(layer, pos int) []float32 {
				r, slot := lookup(pos)
				return slices.Clone(r.Cache.Layer(layer).Key(slot, make([]float32, max(cfg.IndexHeadDim, 1))))
			},
		})
		toks := single.tokens[s]
		ids := make([]int, len(toks)-1) // the last token was sampled, never run
		for i := range ids {
			ids[i] = int(toks[i])
		}
		or, err := om.Run(ids)
		if err != nil {
			return err
		}
		res.OracleRoundingTies += or.Rounding.Ties
		if or.Rounding.MismatchCount > 0 {
			res.Problems = append(res.Problems, fmt.Sprintf("sequence %d: %d cache values match no rounding of the oracle's: %v", s, or.Rounding.MismatchCount, or.Rounding.Mismatches))
			res.MaxAbsOracleDiff = math.Inf(1)
		}
		res.OracleNearIndexTies += len(or.NearTies(1e-5))
		routeTies := map[[2]int]bool{}
		for _, t := range or.RouteNearTies(1e-5) {
			routeTies[[2]int{t.Layer, t.Pos}] = true
		}
		res.OracleNearRouteTies += len(routeTies)
		for l := range or.Experts {
			for p := range ids {
				if or.Experts[l] == nil {
					break
				}
				want := or.Experts[l][p]
				got, traced := single.routes[selKey{int32(s), int32(p), int32(l)}]
				if traced && !slices.Equal(got, want) {
					res.RoutesIdentical = false
					tie := ""
					if routeTies[[2]int{l, p}] {
						tie = ", an oracle routing near tie"
					}
					res.Problems = append(res.Problems, fmt.Sprintf("sequence %d position %d layer %d: engine routed to experts %v, oracle %v (margin %.3g%s)", s, p, l, got, want, or.RouteMargin[l][p], tie))
				}
			}
		}
		for p := range ids {
			res.MaxAbsOracleDiff = math.Max(res.MaxAbsOracleDiff, maxAbsDiff(or.LogProbs[p], single.logprobs[s][p]))
		}
		if cfg.Sparse() {
			for l := range or.TopK {
				if or.TopK[l] == nil {
					continue // an MTP layer: a target run does not reach it
				}
				for p := range ids {
					want := or.TopK[l][p]
					got, traced := single.sel[selKey{int32(s), int32(p), int32(l)}]
					if traced && !slices.Equal(got, want) {
						res.SelectionsIdentical = false
						res.Problems = append(res.Problems, fmt.Sprintf("sequence %d position %d layer %d: engine selected %v, oracle %v (margin %.3g)", s, p, l, got, want, or.Margin[l][p]))
					}
				}
			}
		}
	}
	return nil
}

func maxAbsDiff(a, b []float64) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// makePrompts draws deterministic prompt token ids.
func makePrompts(cfg *config.Model, lens []int, seed uint64) [][]int32 {
	out := make([][]int32, len(lens))
	x := seed*0x9e3779b97f4a7c15 + 1
	for i, n := range lens {
		out[i] = make([]int32, n)
		for j := range out[i] {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			out[i][j] = int32(x % uint64(cfg.VocabSize))
		}
	}
	return out
}

// ranks is the layout and the DCP interleave a run uses: one rank without a
// backend plan (bp == nil), c's TP × PCP × DCP with one.
func (c Config) ranks(bp *cp.BackendPlan) (comm.Layout, int) {
	if bp == nil {
		return comm.Layout{TP: 1, PCP: 1, DCP: 1}, 1
	}
	return comm.Layout{TP: c.TP, PCP: c.PCP, DCP: c.DCP}, c.Interleave
}

// runEngine runs the workload on one rank (bp == nil) or on the TP × PCP
// in-process world of c. Every rank runs the same replicated batches; the
// greedy tokens come from rank 0's logits, and every rank's logits must be
// bit-identical to rank 0's.
func runEngine(ctx context.Context, cfg *config.Model, src model.TensorSource, c Config, prompts [][]int32, bp *cp.BackendPlan) (*engineRun, error) {
	layout, interleave := c.ranks(bp)
	kl := kvcache.Layout{N: layout.DCP, I: interleave}
	B := c.BlockSize
	maxLen := 0
	total := 0
	for _, p := range prompts {
		maxLen = max(maxLen, len(p)+c.DecodeSteps*(1+c.SpecTokens)+1)
		chunk := len(p)
		if c.PrefillChunk > 0 {
			chunk = min(chunk, c.PrefillChunk)
		}
		total += max(chunk, 1+c.SpecTokens)
	}
	blocksPerSeq := (kl.LocalLen(maxLen, 0) + B - 1) / B
	run := &engineRun{sel: map[selKey][]int32{}, routes: map[selKey][]int32{}}
	for s := range prompts {
		t := make([]int32, blocksPerSeq)
		for i := range t {
			// Interleave the sequences' blocks so tables are not the identity.
			t[i] = int32(i*len(prompts) + s)
		}
		run.tables = append(run.tables, t)
	}
	kvd, _ := kvcache.ParseKVDType(c.KVDType)
	idd, _ := kvcache.ParseIndexerDType(c.IndexerDType)
	opt := model.RunnerOptions{
		MaxTokens: total, MaxModelLen: blocksPerSeq * B * layout.DCP, MaxLogitRows: total,
		MaxSeqs: len(prompts), BlockSize: B, NumBlocks: blocksPerSeq * len(prompts), KVDType: kvd, IndexerDType: idd,
	}
	opt.MaxModelLen = max(opt.MaxModelLen, maxLen)
	var groups []comm.Group
	var err error
	if run.runners, groups, err = buildRunners(ctx, cfg, src, c, layout, interleave, bp, opt); err != nil {
		return nil, err
	}
	r0 := run.runners[0]
	batchSeq := make([]int, 0, len(prompts)) // batch sequence → workload sequence
	r0.Trace = func(layer int, pos, seq int32, positions []int32) {
		p := slices.Clone(positions)
		slices.Sort(p)
		run.sel[selKey{int32(batchSeq[seq]), pos, int32(layer)}] = p
	}
	r0.RouteTrace = func(layer int, pos, seq int32, experts []int32) {
		e := slices.Clone(experts)
		slices.Sort(e)
		run.routes[selKey{int32(batchSeq[seq]), pos, int32(layer)}] = e
	}
	run.tokens = make([][]int32, len(prompts))
	run.logprobs = make([][][]float64, len(prompts))
	for s, p := range prompts {
		run.tokens[s] = slices.Clone(p)
	}
	// The schedule is a function of the workload alone, so the single-rank and
	// the parallel run feed the same tokens: each sequence prefills in chunks
	// of PrefillChunk tokens, then runs DecodeSteps decode steps of 1 + SpecTokens
	// rows (the greedy token and fixed draft tokens); sequences that finish
	// prefill early decode while others still prefill.
	fed := make([]int, len(prompts))
	decoded := make([]int, len(prompts))
	drafts := draftTokens(cfg, c.Seed)
	for step := 0; ; step++ {
		batch := &model.Batch{}
		batchSeq = batchSeq[:0]
		for s, p := range prompts {
			var toks []int32
			switch {
			case fed[s] < len(p):
				n := len(p) - fed[s]
				if c.PrefillChunk > 0 {
					n = min(n, c.PrefillChunk)
				}
				toks = p[fed[s] : fed[s]+n]
			case decoded[s] < c.DecodeSteps:
				lg := run.logprobs[s][len(run.logprobs[s])-1]
				run.tokens[s] = append(run.tokens[s], int32(argmax(lg)))
				for k := 0; k < c.SpecTokens; k++ {
					run.tokens[s] = append(run.tokens[s], drafts[(fed[s]+k)%len(drafts)])
				}
				toks = run.tokens[s][fed[s]:]
				decoded[s]++
			default:
				continue
			}
			batch.Seqs = append(batch.Seqs, model.Seq{Tokens: toks, Start: fed[s], BlockTable: run.tables[s], LogitsAll: true})
			batchSeq = append(batchSeq, s)
			fed[s] += len(toks)
		}
		if len(batch.Seqs) == 0 {
			break
		}
		if err := forwardAll(ctx, run.runners, groups, batch); err != nil {
			return nil, err
		}
		// Every rank's logits must equal rank 0's: compared directly in one
		// process, through a hash of each rank's logits across processes.
		if c.World != nil && bp != nil {
			if err := sameLogitsAcrossProcesses(ctx, c.World, r0, step); err != nil {
				return nil, err
			}
		}
		// Rows in batch order.
		for i := 0; i < r0.NumLogitRows(); i++ {
			br, lg := r0.Logits(i)
			for _, r := range run.runners[1:] {
				_, other := r.Logits(i)
				if !slices.Equal(lg, other) {
					return nil, fmt.Errorf("step %d: logits of batch row %d differ between ranks", step, br)
				}
			}
			s := batchSeq[seqOf(batch, br)]
			lse := sampler.LogSumExp(lg)
			row := make([]float64, len(lg))
			for j, v := range lg {
				row[j] = float64(v) - lse
			}
			run.logprobs[s] = append(run.logprobs[s], row)
		}
	}
	// The last greedy token of each sequence (sampled, never run).
	for s := range prompts {
		run.tokens[s] = append(run.tokens[s], int32(argmax(run.logprobs[s][len(run.logprobs[s])-1])))
	}
	if bp != nil && c.World == nil {
		// Across processes the ledger checks every collective before data
		// moves; in one process the traces are compared here as well.
		if err := sameCollectives(run.runners); err != nil {
			return nil, err
		}
		for _, r := range run.runners {
			g := r.Opt.Parallel.Groups
			run.collectives = append(run.collectives, g.TP.Stats().Collectives+g.PCP.Stats().Collectives+g.DCP.Stats().Collectives)
		}
	}
	return run, nil
}

// buildRunners builds the single-rank runner (bp == nil) or every rank's
// runner of the parallel layout: the in-process world's ranks, or this
// process's rank of a multi-process world. It returns the groups forwardAll
// runs the ranks over (nil for one rank).
func buildRunners(ctx context.Context, cfg *config.Model, src model.TensorSource, c Config, layout comm.Layout, interleave int, bp *cp.BackendPlan, opt model.RunnerOptions) ([]*model.Runner, []comm.Group, error) {
	world := layout.World()
	var groups []comm.Group
	var err error
	switch {
	case bp != nil && c.World != nil:
		// One rank of a multi-process world: this process holds one runner.
		groups = []comm.Group{c.World}
		world = 1
	case bp != nil:
		groups, err = inproc.NewWorld(world, inproc.Options{Timeout: c.CollectiveTimeout, TraceCapacity: 1 << 16})
		if err != nil {
			return nil, nil, err
		}
	}
	runners := make([]*model.Runner, world)
	if bp == nil {
		m, err := model.Build(cfg, src, model.Shard{TPSize: 1})
		if err != nil {
			return nil, nil, err
		}
		if runners[0], err = model.NewRunner(m, opt); err != nil {
			return nil, nil, err
		}
		return runners, nil, nil
	}
	errs := runRanks(ctx, groups, func(ctx context.Context, g comm.Group) error {
		rank := g.Rank()
		var gs comm.Groups
		if c.worldGroups != nil {
			gs = *c.worldGroups
		} else if gs, err = layout.Split(g); err != nil {
			return err
		}
		if c.InjectMismatch && rank == layout.World()-1 {
			gs = injectMismatch(gs)
		}
		m, err := model.Build(cfg, src, c.shard(rank))
		if err != nil {
			return err
		}
		o := opt
		o.Parallel = &model.Parallel{Layout: layout, Groups: gs, Interleave: interleave, Backend: bp, Ctx: ctx}
		r, err := model.NewRunner(m, o)
		if err != nil {
			return err
		}
		runners[min(rank, len(runners)-1)] = r
		return nil
	})
	if err := comm.FirstRankError(errs); err != nil {
		return nil, nil, err
	}
	return runners, groups, nil
}

// injectMismatch wraps the first group of size > 1 so that one collective
// declares a wrong count.
func injectMismatch(gs comm.Groups) comm.Groups {
	switch {
	case gs.DCP.Size() > 1:
		gs.DCP = comm.WithMismatch(gs.DCP, 1, 1)
	case gs.TP.Size() > 1:
		gs.TP = comm.WithMismatch(gs.TP, 1, 1)
	case gs.PCP.Size() > 1:
		gs.PCP = comm.WithMismatch(gs.PCP, 1, 1)
	}
	return gs
}

func forwardAll(ctx context.Context, runners []*model.Runner, groups []comm.Group, b *model.Batch) error {
	if len(runners) == 1 {
		return runners[0].Forward(b)
	}
	errs := inproc.Run(ctx, groups, func(ctx context.Context, g comm.Group) error {
		return runners[g.Rank()].Forward(b)
	})
	return comm.FirstRankError(errs)
}

// runRanks calls fn for every in-process rank, or once for this process's
// rank of a multi-process world.
func runRanks(ctx context.Context, groups []comm.Group, fn func(context.Context, comm.Group) error) []error {
	if len(groups) == 1 {
		return []error{fn(ctx, groups[0])}
	}
	return inproc.Run(ctx, groups, fn)
}

// sameLogitsAcrossProcesses all-gathers a hash of this rank's logits of the
// step and fails, on every rank alike, if any rank's differs from rank 0's.
func sameLogitsAcrossProcesses(ctx context.Context, world comm.Group, r *model.Runner, step int) error {
	h := fnv.New64a()
	var buf [4]byte
	for i := 0; i < r.NumLogitRows(); i++ {
		_, lg := r.Logits(i)
		for _, v := range lg {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			h.Write(buf[:])
		}
	}
	sum := h.Sum64()
	mine := []int32{int32(sum), int32(sum >> 32)}
	all := make([]int32, 2*world.Size())
	if err := comm.AllGather(ctx, world, all, mine); err != nil {
		return fmt.Errorf("step %d: logits hash gather: %w", step, err)
	}
	for rank := 1; rank < world.Size(); rank++ {
		if all[2*rank] != all[0] || all[2*rank+1] != all[1] {
			return fmt.Errorf("step %d: logits of rank %d differ from rank 0's", step, rank)
		}
	}
	return nil
}

func seqOf(b *model.Batch, row int) int {
	for s, q := range b.Seqs {
		if row < len(q.Tokens) {
			return s
		}
		row -= len(q.Tokens)
	}
	return -1
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// sameCollectives checks, from the transport's traces, that every member of
// every TP, PCP and DCP group issued the same collectives (op, dtype, count)
// in the same order.
func sameCollectives(runners []*model.Runner) error {
	type groupTrace struct {
		rank  int
		trace []comm.TraceEntry
	}
	seen := map[string]groupTrace{}
	for rank, r := range runners {
		g := r.Opt.Parallel.Groups
		for _, grp := range []comm.Group{g.TP, g.PCP, g.DCP} {
			tr := grp.Trace(nil)
			first, ok := seen[grp.Name()]
			if !ok {
				seen[grp.Name()] = groupTrace{rank, tr}
				continue
			}
			if len(tr) != len(first.trace) {
				return fmt.Errorf("group %s: rank %d issued %d collectives, rank %d issued %d", grp.Name(), rank, len(tr), first.rank, len(first.trace))
			}
			for i := range tr {
				a, b := tr[i], first.trace[i]
				// AllToAllV counts differ by member; the ledger checks them pairwise.
				if a.Op != b.Op || a.DType != b.DType || (a.Count != b.Count && a.Op != comm.OpAllToAllV) {
					return fmt.Errorf("group %s collective %d: rank %d issued %v %v %d, rank %d issued %v %v %d", grp.Name(), i, rank, a.Op, a.DType, a.Count, first.rank, b.Op, b.DType, b.Count)
				}
			}
		}
	}
	return nil
}

// draftTokens are the fixed draft tokens of multi-token decode rows.
func draftTokens(cfg *config.Model, seed uint64) []int32 {
	return makePrompts(cfg, []int{97}, seed+1)[0]
}

// expertLoad is, per rank of the parallel run, the rows its routed experts
// computed (all-gathered across processes).
func expertLoad(ctx context.Context, c Config, par *engineRun) ([]int64, error) {
	sum := expertRows
	if par.runners[0].ExpertLoad() == nil {
		return nil, nil
	}
	if c.World == nil {
		out := make([]int64, len(par.runners))
		for i, r := range par.runners {
			out[i] = sum(r)
		}
		return out, nil
	}
	all := make([]float64, c.World.Size())
	if err := comm.AllGather(ctx, c.World, all, []float64{float64(sum(par.runners[0]))}); err != nil {
		return nil, fmt.Errorf("expert load gather: %w", err)
	}
	out := make([]int64, len(all))
	for i, v := range all {
		out[i] = int64(v)
	}
	return out, nil
}

// expertRows is the rows a runner's routed experts computed, over every
// routed layer.
func expertRows(r *model.Runner) int64 {
	var n int64
	for _, layer := range r.ExpertLoad() {
		for _, v := range layer {
			n += v
		}
	}
	return n
}
