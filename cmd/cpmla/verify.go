package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/comm/mpi"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/verify"
)

func init() { register(newVerifyCmd) }

func newVerifyCmd() *cobra.Command {
	var c verify.Config
	var lens string
	var asJSON bool
	var commName string
	var threads int
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
	f.StringVar(&c.Model, "model", config.DefaultPreset, "preset name or checkpoint directory")
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
