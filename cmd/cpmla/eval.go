package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/eval"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/server"
)

func init() { register(newEvalCmd) }

// evalConfig is one lane: a name like tp2-pcp2 or tp1-pcp4-dcp4 (optionally
// -iN for the interleave and -a2a for the combine).
type evalConfig struct {
	name                     string
	tp, pcp, dcp, interleave int
	comm                     string
}

func parseEvalConfig(s string) (evalConfig, error) {
	c := evalConfig{name: s, tp: 1, pcp: 1, dcp: 1, interleave: 1, comm: "ag_rs"}
	for _, part := range strings.Split(s, "-") {
		var dst *int
		var num string
		switch {
		case part == "a2a":
			c.comm = "a2a"
			continue
		case strings.HasPrefix(part, "tp"):
			dst, num = &c.tp, part[2:]
		case strings.HasPrefix(part, "pcp"):
			dst, num = &c.pcp, part[3:]
		case strings.HasPrefix(part, "dcp"):
			dst, num = &c.dcp, part[3:]
		case strings.HasPrefix(part, "i"):
			dst, num = &c.interleave, part[1:]
		default:
			return c, fmt.Errorf("--configs entry %q: part %q is not tpN, pcpN, dcpN, iN or a2a (e.g. tp2-pcp2, tp1-pcp4-dcp4)", s, part)
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > maxRanks {
			return c, fmt.Errorf("--configs entry %q: %q needs a size in [1, %d]", s, part, maxRanks)
		}
		*dst = n
	}
	return c, nil
}

func newEvalCmd() *cobra.Command {
	var (
		configs, modelArg, kvDType, memoryLimit string
		weightSeed, seed                        uint64
		numPrompts, maxTokens, minLen, maxLen   int
		minAgreement                            float64
		asJSON                                  bool
	)
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Accuracy lanes: serve each parallel configuration and compare its greedy continuations with one rank",
		Long: `eval starts the engine and the OpenAI server for the single-rank configuration and for
each configuration of --configs, sends the same greedy completion requests to each through
/v1/completions, and prints per configuration the completed requests, the invalid rate (failed
or malformed responses) and the agreement with the single-rank continuations (exact match).
It exits non-zero if any configuration agrees less than --min-agreement.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lanes []evalConfig
			for _, s := range strings.Split(configs, ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				c, err := parseEvalConfig(s)
				if err != nil {
					return err
				}
				lanes = append(lanes, c)
			}
			if len(lanes) == 0 {
				return fmt.Errorf("--configs is empty; e.g. tp2-pcp2,tp1-pcp4,tp1-pcp4-dcp4")
			}
			if minAgreement < 0 || minAgreement > 1 {
				return fmt.Errorf("--min-agreement must be in [0, 1], got %v", minAgreement)
			}
			for _, c := range lanes {
				if err := checkParallel(c.tp, c.pcp, c.dcp, c.interleave); err != nil {
					return fmt.Errorf("--configs entry %s: %w", c.name, err)
				}
			}
			cfg, err := loadConfig(modelArg)
			if err != nil {
				return err
			}
			switch maxPos := int64(cfg.MaxPositionEmbeddings); {
			case numPrompts < 1 || numPrompts > maxQueue:
				return fmt.Errorf("--num-prompts %d must be in [1, %d]", numPrompts, maxQueue)
			case maxTokens < 1:
				return fmt.Errorf("--max-tokens %d must be at least 1", maxTokens)
			case minLen < 1 || maxLen < minLen:
				return fmt.Errorf("--min-prompt-len %d and --max-prompt-len %d need 1 ≤ min ≤ max", minLen, maxLen)
			case int64(maxLen)+int64(maxTokens)+16 > maxPos:
				return fmt.Errorf("--max-prompt-len %d + --max-tokens %d + 16 exceeds max_position_embeddings %d; lower them", maxLen, maxTokens, maxPos)
			}
			perPrompt := plan.AddSat(plan.MulSat(int64(maxLen), 8+4), plan.MulSat(int64(maxTokens), 64), 1<<10)
			if err := checkProcessFits("the prompts of eval", []namedBytes{{fmt.Sprintf("%d prompts", numPrompts), plan.MulSat(int64(numPrompts), perPrompt)}},
				fmt.Sprintf("lower --num-prompts to at most %d", maxCount(perPrompt))); err != nil {
				return err
			}
			prompts, err := eval.Prompts(eval.PromptOptions{NumPrompts: numPrompts, Seed: seed, MinLen: minLen, MaxLen: maxLen,
				VocabSize: min(cfg.VocabSize, 128000), FirstTokenID: 2})
			if err != nil {
				return err
			}
			client := &http.Client{Timeout: 10 * time.Minute}
			run := func(c evalConfig) ([]eval.Completion, error) {
				o := serveOptions{host: "127.0.0.1", port: 0, model: modelArg, weightSeed: weightSeed, http: server.HTTPLimits{}.WithDefaults(), promptWorkers: 1, collectiveTimeout: defaultCollectiveTimeout,
					tp: c.tp, pcp: c.pcp, dcp: c.dcp, interleave: c.interleave, backend: "auto", dcpComm: c.comm,
					kvDType: kvDType, idxDType: "f32", memoryLimit: memoryLimit, maxQueue: numPrompts}
				o.engine.MaxModelLen = maxLen + maxTokens + 16
				o.engine.MaxNumSeqs = 8
				o.engine.MaxNumBatchedTokens = 8 * (maxLen + 1)
				s, err := startServe(o, io.Discard)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", c.name, err)
				}
				defer s.close(10 * time.Second)
				return eval.Collect(cmd.Context(), client, s.URL, modelArg, prompts, maxTokens, 8), nil
			}
			ref, err := run(evalConfig{name: "tp1", tp: 1, pcp: 1, dcp: 1, interleave: 1, comm: "ag_rs"})
			if err != nil {
				return err
			}
			var outcomes []eval.Outcome
			outcomes = append(outcomes, eval.Score("tp1", ref, ref))
			for _, c := range lanes {
				got, err := run(c)
				if err != nil {
					return err
				}
				outcomes = append(outcomes, eval.Score(c.name, got, ref))
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(outcomes); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "CONFIG\tCOMPLETED\tINVALID RATE\tAGREEMENT WITH TP1")
				for _, o := range outcomes {
					fmt.Fprintf(tw, "%s\t%d/%d\t%.3f\t%.3f\n", o.Config, o.Completed, o.Total, o.InvalidRate, o.Agreement)
				}
				tw.Flush()
				for _, o := range outcomes {
					for _, p := range o.Problems {
						fmt.Fprintf(out, "%s: %s\n", o.Config, p)
					}
				}
			}
			var low []string
			for _, o := range outcomes {
				if o.Agreement < minAgreement {
					low = append(low, fmt.Sprintf("%s %.3f", o.Config, o.Agreement))
				}
			}
			if len(low) > 0 {
				return fmt.Errorf("agreement below --min-agreement %.3f: %s", minAgreement, strings.Join(low, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configs, "configs", "tp2-pcp2,tp1-pcp4,tp1-pcp4-dcp4", "comma-separated lanes: tpN-pcpN-dcpN[-iN][-a2a]")
	f.StringVar(&modelArg, "model", config.DefaultPreset, "preset name or checkpoint directory")
	f.Uint64Var(&weightSeed, "weight-seed", model.DefaultWeightSeed, "seed of a preset's random weights")
	f.IntVar(&numPrompts, "num-prompts", 16, "prompts sent to every configuration")
	f.Uint64Var(&seed, "seed", 0, "prompt seed")
	f.IntVar(&maxTokens, "max-tokens", 8, "greedy tokens per prompt")
	f.IntVar(&minLen, "min-prompt-len", 4, "shortest prompt in tokens")
	f.IntVar(&maxLen, "max-prompt-len", 48, "longest prompt in tokens")
	f.StringVar(&kvDType, "kv-cache-dtype", "f32", "KV cache dtype: f32, bf16, fp8_ds_mla")
	f.StringVar(&memoryLimit, "memory-limit", "1GiB", "memory of one rank")
	f.Float64Var(&minAgreement, "min-agreement", 1.0, "fail if a configuration agrees with one rank on less than this fraction of prompts")
	f.BoolVar(&asJSON, "json", false, "print a JSON list with config, completed, total, invalid_rate, agreement")
	return cmd
}
