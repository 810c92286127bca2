package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/mpi"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/spec"
	"github.com/cpmla/cpmla/verify"
)

func init() { register(newVerifyCmd) }

func newVerifyCmd() *cobra.Command {
	var c verify.Config
	var lens string
	var asJSON bool
	var commName string
	var threads int
	var specConfig string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Run a model under a TP/PCP/DCP configuration on in-process ranks and compare it with one rank and the float64 oracle",
		Long: `verify runs a prefill of every --prompt-lens prompt (in one batch, in chunks of
--prefill-chunk tokens if set) and --decode-steps greedy decode steps (each row
carrying --spec-tokens extra draft tokens if set) under the given parallel
configuration, and compares with the single-rank engine and the float64 oracle:
greedy tokens, log-probabilities over the whole vocabulary, every row's top-k
selection, logits on every rank, and the collective sequence of every group.
It exits 0 only when everything agrees.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if c.PromptLens, err = parseLens(lens); err != nil {
				return err
			}
			if c.Spec, err = spec.ParseConfig(specConfig); err != nil {
				return fmt.Errorf("--speculative-config: %w", err)
			}
			if err := checkVerify(c, commName == "mpi"); err != nil {
				return err
			}
			if err := applyThreads(threads, c.TP*c.PCP); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			switch commName {
			case "inproc":
			case "mpi":
				proc, err := mpi.Init(mpi.Options{Timeout: c.CollectiveTimeout, AbortGrace: 2 * time.Second})
				if err != nil {
					return err
				}
				defer proc.Close()
				c.World = proc.World()
				if c.World.Rank() != 0 {
					out = io.Discard // rank 0 reports; every rank exits with the same verdict
				}
			default:
				return fmt.Errorf("--comm %q: use inproc (ranks are goroutines) or mpi (one process per rank under mpirun)", commName)
			}
			res, err := verify.Run(ctx, c)
			if err != nil {
				return err
			}
			if asJSON {
				if err := json.NewEncoder(out).Encode(res); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "config               %s (backend %s, combine %s)\n", res.Config, res.Backend, res.DCPComm)
				fmt.Fprintf(out, "max |Δ logprob|      %.3g vs single rank, %.3g vs oracle (%d positions)\n", res.MaxAbsLogprobDiff, res.MaxAbsOracleDiff, res.Positions)
				fmt.Fprintf(out, "greedy identical     %v\n", res.GreedyIdentical)
				fmt.Fprintf(out, "selections identical %v\n", res.SelectionsIdentical)
				if res.SpecGreedyIdentical != nil {
					fmt.Fprintf(out, "speculative (mtp)    greedy identical %v, acceptance identical %v, drafter |Δ logprob| %.3g vs one rank, mean acceptance length %.3f, per position %.3f, %d target steps\n",
						*res.SpecGreedyIdentical, *res.SpecAcceptanceIdentical, res.SpecDraftMaxDiff, res.SpecMeanAcceptance, res.SpecAcceptancePerPos, res.SpecTargetSteps)
				}
				if res.ExpertLoadPerRank != nil {
					fmt.Fprintf(out, "routes identical     %v (%d oracle near ties)\n", res.RoutesIdentical, res.OracleNearRouteTies)
					fmt.Fprintf(out, "expert rows per rank %v\n", res.ExpertLoadPerRank)
				}
				fmt.Fprintf(out, "kv tokens per rank   %v (single rank %d)\n", res.KVTokensPerRank, res.SingleRankKVTokens)
				fmt.Fprintf(out, "collectives per rank %v\n", res.CollectivesPerRank)
				for _, p := range res.Problems {
					fmt.Fprintln(out, "problem:", p)
				}
				fmt.Fprintf(out, "ok                   %v (%.1f s)\n", res.OK, res.WallSeconds)
			}
			if !res.OK {
				return fmt.Errorf("verification failed for %s", res.Config)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Model, "model", config.DefaultPreset, modelUsage)
	f.Uint64Var(&c.WeightSeed, "weight-seed", model.DefaultWeightSeed, "seed of a preset's random weights")
	f.IntVar(&c.TP, "tensor-parallel-size", 1, "tensor parallel size")
	f.IntVar(&c.PCP, "prefill-context-parallel-size", 1, "prefill context parallel size")
	f.IntVar(&c.DCP, "decode-context-parallel-size", 1, "decode context parallel size")
	f.IntVar(&c.Interleave, "cp-kv-cache-interleave-size", 1, "tokens per DCP rank before the KV moves to the next rank")
	f.StringVar(&c.DCPComm, "dcp-comm-backend", "ag_rs", "DCP combine: ag_rs or a2a")
	f.StringVar(&c.Backend, "attention-backend", "auto", "auto, sparse-gather (FLASHMLA_SPARSE) or sparse-sharded (FLASHINFER_MLA_SPARSE)")
	f.StringVar(&c.KVDType, "kv-cache-dtype", "f32", "KV cache dtype: f32, bf16, fp8_ds_mla")
	f.StringVar(&c.IndexerDType, "indexer-cache-dtype", "f32", "indexer key cache dtype: f32, fp8")
	f.IntVar(&c.BlockSize, "block-size", 16, "KV cache block size in tokens")
	f.StringVar(&lens, "prompt-lens", "1,7,40", "comma-separated prompt lengths, prefilled in one batch")
	f.IntVar(&c.DecodeSteps, "decode-steps", 4, "greedy decode steps after the prefill")
	f.IntVar(&c.SpecTokens, "spec-tokens", 0, "extra draft tokens on every decode row (multi-token decode rows)")
	f.IntVar(&c.PrefillChunk, "prefill-chunk", 0, "prefill in chunks of at most this many tokens (0: whole prompts)")
	f.Uint64Var(&c.Seed, "seed", 0, "prompt token seed")
	f.Float64Var(&c.Tolerance, "tolerance", 1e-4, "max |Δ logprob| allowed against the single rank and the oracle")
	f.BoolVar(&c.SkipOracle, "skip-oracle", false, "compare with the single-rank engine only")
	addModelFlags(f, &c.ExpertParallel, &c.Quantization)
	addSpeculativeFlag(f, &specConfig)
	f.BoolVar(&c.InjectMismatch, "inject-collective-mismatch", false, "make one rank enter one collective with a wrong count (the run must fail with the ledger's error)")
	f.DurationVar(&c.CollectiveTimeout, "collective-timeout", 30*time.Second, "deadline of every collective")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	addThreadsFlag(cmd, &threads)
	f.StringVar(&commName, "comm", "inproc", "transport: inproc (ranks are goroutines) or mpi (one process per rank: mpirun -np TP·PCP cpmla verify --comm mpi; build with -tags mpi)")
	return cmd
}

func parseLens(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--prompt-lens entry %q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--prompt-lens is empty; give at least one length, e.g. 1,7,40")
	}
	return out, nil
}

// checkVerify refuses, before anything loads, flag values verify cannot run
// with (the same parallel-size rules as every engine command, where
// verify.Config alone would read 0 as 1) and a run whose ranks, reference
// runs, oracle and stored logprobs cannot fit in this process's memory,
// naming a smaller setting that fits. Under MPI this process holds one rank.
func checkVerify(c verify.Config, mpi bool) error {
	if err := checkParallel(c.TP, c.PCP, c.DCP, c.Interleave); err != nil {
		return err
	}
	switch {
	case c.BlockSize < 1 || c.BlockSize > engine.MaxBlockSize:
		return fmt.Errorf("--block-size %d must be in [1, %d]; 16 is the usual setting", c.BlockSize, engine.MaxBlockSize)
	case c.DecodeSteps < 0:
		return fmt.Errorf("--decode-steps must be ≥ 0, got %d", c.DecodeSteps)
	case c.SpecTokens < 0:
		return fmt.Errorf("--spec-tokens must be ≥ 0, got %d", c.SpecTokens)
	case c.PrefillChunk < 0:
		return fmt.Errorf("--prefill-chunk must be ≥ 0 (0: whole prompts), got %d", c.PrefillChunk)
	case !(c.Tolerance > 0) || math.IsInf(c.Tolerance, 0):
		return fmt.Errorf("--tolerance must be a positive number, got %v", c.Tolerance)
	case c.CollectiveTimeout <= 0:
		return fmt.Errorf("--collective-timeout must be positive, got %v", c.CollectiveTimeout)
	}
	cfg, err := loadConfig(c.Model)
	if err != nil {
		return err
	}
	if err := checkShardable(cfg, c.TP); err != nil {
		return err
	}
	if _, err := kvcache.ParseKVDType(c.KVDType); err != nil {
		return err
	}
	if _, err := kvcache.ParseIndexerDType(c.IndexerDType); err != nil {
		return err
	}
	maxPos := cfg.MaxPositionEmbeddings
	if c.SpecTokens >= maxPos || c.DecodeSteps >= maxPos {
		return fmt.Errorf("--decode-steps %d and --spec-tokens %d must each stay below max_position_embeddings %d", c.DecodeSteps, c.SpecTokens, maxPos)
	}
	for _, n := range c.PromptLens {
		if l := int64(n) + int64(c.DecodeSteps)*int64(1+c.SpecTokens); l > int64(maxPos) {
			return fmt.Errorf("prompt %d + --decode-steps %d × (1 + --spec-tokens %d) = %d positions exceed max_position_embeddings %d; shorten the prompt or take fewer steps",
				n, c.DecodeSteps, c.SpecTokens, l, maxPos)
		}
	}
	src, err := sourceOf(c.Model, cfg)
	if err != nil {
		return err
	}
	need := func(c verify.Config) []namedBytes { return verifyFootprint(cfg, src, c, mpi) }
	avail, err := availableMemory()
	if err != nil {
		return err
	}
	fits := func(c verify.Config) bool { return sumBytes(need(c)) <= avail.Bytes }
	if fits(c) {
		return nil
	}
	var fixes []string
	if c.PCP > 1 && !mpi {
		if v, ok := plan.LargestFitting(1, c.PCP, func(p int) bool { return fits(withPCP(c, p)) }); ok {
			w := withPCP(c, v)
			fixes = append(fixes, fmt.Sprintf("--prefill-context-parallel-size %d --decode-context-parallel-size %d", w.PCP, w.DCP))
		}
	}
	if !c.SkipOracle {
		if w := c; func() bool { w.SkipOracle = true; return fits(w) }() {
			fixes = append(fixes, "--skip-oracle")
		}
	}
	longest := slices.Max(c.PromptLens)
	if v, ok := plan.LargestFitting(1, longest, func(n int) bool {
		w := c
		w.PromptLens = make([]int, len(c.PromptLens))
		for i, p := range c.PromptLens {
			w.PromptLens[i] = min(p, n)
		}
		return fits(w)
	}); ok {
		fixes = append(fixes, fmt.Sprintf("--prompt-lens entries of at most %d", v))
	}
	fix := "fewer ranks in one process (--comm mpi spreads them over processes)"
	if len(fixes) > 0 {
		fix = "set " + strings.Join(fixes, ", or ")
	}
	parts := need(c)
	return fmt.Errorf("verify %s needs %s (%s), more than the %s this process may use; %s",
		c.String(), formatSize(sumBytes(parts)), listBytes(parts), avail, fix)
}

// withPCP is c with PCP p and its DCP following the PCP axis as before.
func withPCP(c verify.Config, p int) verify.Config {
	switch c.DCP {
	case c.PCP:
		c.DCP = p
	case c.TP * c.PCP:
		c.DCP = c.TP * p
	}
	c.PCP = p
	return c
}

// verifyFootprint is what a verify run allocates in this process: the weight
// source, every in-process rank's copies, step buffers and cache (as verify
// sizes its runners), the single-rank reference, the logprobs both runs
// keep and the float64 oracle.
func verifyFootprint(cfg *config.Model, src weightSource, c verify.Config, mpi bool) []namedBytes {
	var longest, tokens, positions int64
	for _, n := range c.PromptLens {
		l := int64(n) + int64(c.DecodeSteps)*int64(1+c.SpecTokens)
		longest = max(longest, l+1)
		chunk := int64(n)
		if c.PrefillChunk > 0 {
			chunk = min(chunk, int64(c.PrefillChunk))
		}
		tokens = plan.AddSat(tokens, max(chunk, int64(1+c.SpecTokens)))
		positions = plan.AddSat(positions, l)
	}
	B, dcp, I := int64(c.BlockSize), int64(c.DCP), int64(c.Interleave)
	span := plan.MulSat(dcp, I)
	local := longest/span*I + min(longest%span, I)
	blocksPerSeq := (local + B - 1) / B
	seqs := int64(len(c.PromptLens))
	clamp := func(v int64) int { return int(min(v, math.MaxInt32)) }
	ro := model.RunnerOptions{
		MaxTokens: clamp(tokens), MaxModelLen: clamp(max(plan.MulSat(blocksPerSeq, B, dcp), longest)),
		MaxLogitRows: clamp(tokens), MaxSeqs: clamp(seqs), BlockSize: int(B),
		NumBlocks: clamp(plan.MulSat(blocksPerSeq, seqs)), KVDType: kvcache.KVDType(c.KVDType), IndexerDType: kvcache.IndexerDType(c.IndexerDType),
	}
	l := comm.Layout{TP: c.TP, PCP: c.PCP, DCP: c.DCP}
	buf, cache, err := engine.RunnerBytes(cfg, ro, l, c.Interleave)
	if err != nil {
		buf = math.MaxInt64
	}
	single := ro
	single.MaxModelLen, single.NumBlocks = clamp(longest), clamp(plan.MulSat((longest+B-1)/B, seqs))
	singleBuf, singleCache, err := engine.RunnerBytes(cfg, single, comm.Layout{TP: 1, PCP: 1, DCP: 1}, 1)
	if err != nil {
		singleBuf = math.MaxInt64
	}
	_, copied := rankWeights(cfg, src, deployment{tp: c.TP, pcp: c.PCP, dcp: c.DCP, expertParallel: c.ExpertParallel, quantization: c.Quantization})
	ranks := int64(l.World())
	if mpi {
		ranks = 1
	}
	vocab := int64(cfg.VocabSize)
	parts := []namedBytes{
		{"weights of --model " + c.Model, src.bytes},
		{fmt.Sprintf("copies, step buffers and caches of %d rank(s)", ranks), plan.MulSat(ranks, plan.AddSat(copied, buf, cache))},
		{"the single-rank reference", plan.AddSat(singleBuf, singleCache)},
		{"logprobs of both runs", plan.MulSat(2, positions, vocab, 8)},
	}
	if !c.SkipOracle {
		params := plan.TotalParams(plan.ParamGroups(cfg, false))
		width := int64(2*cfg.HiddenSize+cfg.NumHeads*(2*cfg.QKNopeHeadDim+cfg.QKRopeHeadDim+cfg.VHeadDim)+cfg.KVLoraRank+cfg.QKRopeHeadDim) + vocab
		parts = append(parts, namedBytes{"the float64 oracle", plan.AddSat(plan.MulSat(params, 4), plan.MulSat(longest, width, 8), plan.MulSat(longest, longest, 8))})
	}
	return parts
}
