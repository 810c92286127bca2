package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/bench"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/eval"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/server"
	"github.com/cpmla/cpmla/spec"
	"github.com/cpmla/cpmla/tokenizer"
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

// evalRun is one server eval starts: a lane and its num_speculative_tokens.
type evalRun struct {
	lane evalConfig
	k    int
}

// trainedTasks are the tasks a built-in checkpoint was trained on, which
// --tasks auto runs.
var trainedTasks = map[string][]string{
	"cpmla-tiny":     {"arithmetic", "passkey"},
	"cpmla-tiny-fp8": {"arithmetic", "passkey"},
}

// evalTasks resolves --tasks for model: "auto" is the tasks the model was
// trained on (none for random weights), "none" is none.
func evalTasks(flag, model string) (arithmetic, passkey bool, err error) {
	var names []string
	switch flag = strings.TrimSpace(flag); flag {
	case "auto":
		names = trainedTasks[model]
	case "none", "":
	default:
		names = strings.Split(flag, ",")
	}
	for _, n := range names {
		switch strings.TrimSpace(n) {
		case "arithmetic":
			arithmetic = true
		case "passkey":
			passkey = true
		default:
			return false, false, fmt.Errorf("--tasks %q: %q is not a task; use arithmetic, passkey, a comma-separated list of them, auto (what a built-in checkpoint was trained on) or none", flag, n)
		}
	}
	return arithmetic, passkey, nil
}

// parseFloatList parses comma-separated numbers of flag.
func parseFloatList(flag, s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("%s item %q is not a number; e.g. %s 0,0.5,1", flag, f, flag)
		}
		out = append(out, v)
	}
	return out, nil
}

// maxEvalSpecTokens bounds --num-speculative-tokens: the draft positions
// bench.ScrapeSpec reads.
const maxEvalSpecTokens = 64

// evalSpeculative resolves --num-speculative-tokens and --speculative-config
// into the JSON every lane's server gets ("" for plain decoding) and K.
func evalSpeculative(cmd *cobra.Command, k int, js string, cfg *config.Model) (string, int, error) {
	switch {
	case cmd.Flags().Changed("speculative-config") && cmd.Flags().Changed("num-speculative-tokens"):
		return "", 0, fmt.Errorf("give one of --speculative-config and --num-speculative-tokens, not both")
	case cmd.Flags().Changed("speculative-config"):
		c, err := spec.ParseConfig(js)
		if err != nil {
			return "", 0, fmt.Errorf("--speculative-config: %w", err)
		}
		return js, c.K(), nil
	case k == -1: // auto
		if cfg.NumNextNPredict == 0 {
			return "", 0, nil
		}
		k = 1
	case k == 0:
		return "", 0, nil
	case k < 0 || k > maxEvalSpecTokens:
		return "", 0, fmt.Errorf("--num-speculative-tokens %d must be in [0, %d] (-1: 1 when the model has an MTP layer, else 0)", k, maxEvalSpecTokens)
	}
	js = fmt.Sprintf(`{"method":"mtp","num_speculative_tokens":%d}`, k)
	if _, err := spec.ParseConfig(js); err != nil {
		return "", 0, fmt.Errorf("--num-speculative-tokens: %w", err)
	}
	return js, k, nil
}

func newEvalCmd() *cobra.Command {
	var (
		configs, modelArg, kvDType, memoryLimit string
		tasksFlag, lengthsFlag, depthsFlag      string
		specJSON, outputJSON                    string
		weightSeed, seed                        uint64
		numPrompts, maxTokens, minLen, maxLen   int
		limit, maxGenToks, maxReply, numSpec    int
		concurrency                             int
		minAgreement                            float64
		asJSON, logSamples                      bool
	)
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Accuracy lanes: serve each parallel configuration, score its tasks and MTP acceptance, and compare its greedy output with one rank",
		Long: `eval starts the engine and the OpenAI server for the single-rank configuration and for
each configuration of --configs, and sends every server the same greedy requests:

  agreement   --num-prompts random token prompts through /v1/completions (ignore_eos, exactly
              --max-tokens tokens each);
  arithmetic  the held-out arithmetic problems (--limit of the 500) through /v1/completions as
              lm-eval's gsm8k task sends them zero-shot ("Question: ...\nAnswer:", temperature 0,
              stop ["Question:", "</s>", "<|im_end|>"] and the eos text, max_tokens --max-gen-toks),
              scored with gsm8k's strict-match and flexible-extract filters and exact_match;
  passkey     a five-digit pass key hidden at each of --passkey-depths in filler haystacks that
              fill each of --passkey-lengths tokens (prompt plus reply), through
              /v1/chat/completions; a reply is correct when it contains the key.

--tasks auto runs the tasks a built-in checkpoint was trained on (arithmetic and passkey for
cpmla-tiny and cpmla-tiny-fp8; none for a preset's random weights). With MTP
(--num-speculative-tokens K, by default 1 when the model has an MTP layer) the single-rank
reference is served plain and every lane, single-rank included, with
--speculative-config '{"method":"mtp","num_speculative_tokens":K}'; each lane's acceptance rate
per draft position comes from its server's /metrics (vllm:spec_decode_*) over the eval's requests.

It prints per lane the arithmetic accuracy (strict / flexible), the passkey retrievals by
length, the MTP acceptance by position and the fraction of requests whose text equals the
reference's, and exits non-zero if a lane agrees on less than --min-agreement of its requests,
scores any problem or case otherwise than the reference, or accepts otherwise than the first
speculative lane (greedy decoding must give the same tokens on every layout).`,
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
			if concurrency < 1 || concurrency > 256 {
				return fmt.Errorf("--num-concurrent %d must be in [1, 256]", concurrency)
			}
			for _, c := range lanes {
				if err := checkParallel(c.tp, c.pcp, c.dcp, c.interleave); err != nil {
					return fmt.Errorf("--configs entry %s: %w", c.name, err)
				}
			}
			doArith, doPasskey, err := evalTasks(tasksFlag, modelArg)
			if err != nil {
				return err
			}
			for _, f := range []struct {
				task  string
				run   bool
				flags []string
			}{{"arithmetic", doArith, []string{"limit", "max-gen-toks"}}, {"passkey", doPasskey, []string{"passkey-lengths", "passkey-depths", "passkey-max-tokens"}}} {
				for _, name := range f.flags {
					if cmd.Flags().Changed(name) && !f.run {
						return fmt.Errorf("--%s applies to the %s task, which --tasks %s does not run for --model %s; add --tasks %s", name, f.task, tasksFlag, modelArg, f.task)
					}
				}
			}
			cfg, err := loadConfig(modelArg)
			if err != nil {
				return err
			}
			maxPos := cfg.MaxPositionEmbeddings
			switch {
			case numPrompts < 1 || numPrompts > maxQueue:
				return fmt.Errorf("--num-prompts %d must be in [1, %d]", numPrompts, maxQueue)
			case maxTokens < 1:
				return fmt.Errorf("--max-tokens %d must be at least 1", maxTokens)
			case minLen < 1 || maxLen < minLen:
				return fmt.Errorf("--min-prompt-len %d and --max-prompt-len %d need 1 ≤ min ≤ max", minLen, maxLen)
			case int64(maxLen)+int64(maxTokens)+16 > int64(maxPos):
				return fmt.Errorf("--max-prompt-len %d + --max-tokens %d + 16 exceeds max_position_embeddings %d; lower them", maxLen, maxTokens, maxPos)
			case limit < 0:
				return fmt.Errorf("--limit %d must be ≥ 0 (0: every problem)", limit)
			case maxGenToks < 1 || maxGenToks > maxPos:
				return fmt.Errorf("--max-gen-toks %d must be in [1, %d] (max_position_embeddings)", maxGenToks, maxPos)
			case maxReply < 1 || maxReply > maxPos:
				return fmt.Errorf("--passkey-max-tokens %d must be in [1, %d] (max_position_embeddings)", maxReply, maxPos)
			}
			specConfig, k, err := evalSpeculative(cmd, numSpec, specJSON, cfg)
			if err != nil {
				return err
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
			modelLen := maxLen + maxTokens + 16
			var problems []eval.Problem
			var cases []eval.PasskeyCase
			var eos string
			if doArith || doPasskey {
				tk, err := loadTokenizer("", modelArg)
				if err != nil {
					return fmt.Errorf("load tokenizer: %w", err)
				}
				if id := tk.EOS(); id >= 0 {
					eos, _ = tk.Token(id)
				}
				if doArith {
					if problems, err = eval.HeldoutProblems(); err != nil {
						return err
					}
					if limit > 0 && limit < len(problems) {
						problems = problems[:limit]
					}
					for _, p := range problems {
						modelLen = max(modelLen, len(tk.Encode(eval.GSM8KPrompt(p.Question), true))+maxGenToks)
					}
					if modelLen > maxPos {
						return fmt.Errorf("an arithmetic prompt plus --max-gen-toks %d is %d tokens, beyond max_position_embeddings %d; lower --max-gen-toks", maxGenToks, modelLen, maxPos)
					}
				}
				if doPasskey {
					var lengths []int
					for _, f := range strings.Split(lengthsFlag, ",") {
						l, err := strconv.Atoi(strings.TrimSpace(f))
						if err != nil {
							return fmt.Errorf("--passkey-lengths item %q is not a whole number of tokens; e.g. --passkey-lengths 512,4096", f)
						}
						lengths = append(lengths, l)
					}
					for _, l := range lengths {
						if l < 1 || l > maxPos {
							return fmt.Errorf("--passkey-lengths %d is outside [1, %d] (max_position_embeddings)", l, maxPos)
						}
						modelLen = max(modelLen, l)
					}
					depths, err := parseFloatList("--passkey-depths", depthsFlag)
					if err != nil {
						return err
					}
					count := func(content string) (int, error) {
						ids, err := tk.EncodeChat([]tokenizer.Message{{Role: "user", Content: content}}, true)
						return len(ids), err
					}
					if cases, err = eval.PasskeyCases(eval.PasskeyOptions{Lengths: lengths, Depths: depths, Seed: seed, MaxReplyTokens: maxReply}, count); err != nil {
						return err
					}
				}
			}
			client := &http.Client{Timeout: 10 * time.Minute}
			ctx := cmd.Context()
			run := func(c evalConfig, specConfig string, k int) (eval.LaneResult, error) {
				name := c.name
				if k > 0 {
					name = fmt.Sprintf("%s+mtp%d", c.name, k)
				}
				o := serveOptions{host: "127.0.0.1", port: 0, http: server.HTTPLimits{}.WithDefaults(), promptWorkers: 1, maxQueue: max(numPrompts, len(problems), len(cases)),
					engineFlags: engineFlags{model: modelArg, weightSeed: weightSeed, collectiveTimeout: defaultCollectiveTimeout,
						tp: c.tp, pcp: c.pcp, dcp: c.dcp, interleave: c.interleave, backend: "auto", dcpComm: c.comm,
						kvDType: kvDType, idxDType: "f32", memoryLimit: memoryLimit, speculative: specConfig}}
				o.engine.MaxModelLen = modelLen
				o.engine.MaxNumSeqs = concurrency
				o.engine.MaxNumBatchedTokens = concurrency * (maxLen + 1)
				if doArith || doPasskey {
					o.engine.MaxNumBatchedTokens = max(o.engine.MaxNumBatchedTokens, min(modelLen, 2048))
				}
				s, err := startServe(o, io.Discard)
				if err != nil {
					return eval.LaneResult{}, fmt.Errorf("%s: %w", name, err)
				}
				defer s.close(10 * time.Second)
				res := eval.LaneResult{Lane: name, K: k}
				var before *bench.SpecCounters
				if k > 0 {
					if before, err = bench.ScrapeSpec(ctx, client, s.URL); err != nil {
						return res, fmt.Errorf("%s: %w", name, err)
					}
				}
				res.Agreement = eval.Collect(ctx, client, s.URL, modelArg, prompts, maxTokens, concurrency)
				if doArith {
					if res.Arithmetic, err = eval.RunArithmetic(ctx, client, s.URL, problems, eval.ArithmeticOptions{Model: modelArg, MaxGenToks: maxGenToks, EOS: eos, Concurrency: concurrency}); err != nil {
						return res, err
					}
				}
				if doPasskey {
					res.Passkey = eval.RunPasskey(ctx, client, s.URL, modelArg, cases, maxReply, concurrency)
				}
				if k > 0 {
					after, err := bench.ScrapeSpec(ctx, client, s.URL)
					if err != nil {
						return res, fmt.Errorf("%s: %w", name, err)
					}
					if after != nil {
						res.SpecDecode = after.Since(before)
					}
				}
				return res, nil
			}
			// The plain single-rank reference, the same with MTP (unless a
			// lane of one rank among --configs is that already), the lanes.
			single := evalConfig{name: "tp1", tp: 1, pcp: 1, dcp: 1, interleave: 1, comm: "ag_rs"}
			runs := []evalRun{{single, 0}}
			if k > 0 && !slices.ContainsFunc(lanes, func(c evalConfig) bool { c.name = single.name; return c == single }) {
				runs = append(runs, evalRun{single, k})
			}
			for _, c := range lanes {
				runs = append(runs, evalRun{c, k})
			}
			var results []eval.LaneResult
			for _, r := range runs {
				js := ""
				if r.k > 0 {
					js = specConfig
				}
				res, err := run(r.lane, js, r.k)
				if err != nil {
					return err
				}
				results = append(results, res)
			}
			rep := eval.Compare(modelArg, results, minAgreement)
			if logSamples {
				rep = rep.WithSamples(results)
			}
			out := cmd.OutOrStdout()
			if outputJSON != "" {
				raw, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					return err
				}
				if err := os.WriteFile(outputJSON, append(raw, '\n'), 0o644); err != nil {
					return fmt.Errorf("--output-json: %w", err)
				}
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else if err := rep.WriteTable(out); err != nil {
				return err
			}
			if len(rep.Failures) > 0 {
				return fmt.Errorf("eval failed: %s", strings.Join(rep.Failures, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configs, "configs", "tp2-pcp2,tp1-pcp4,tp1-pcp4-dcp4", "comma-separated lanes: tpN-pcpN-dcpN[-iN][-a2a]")
	f.StringVar(&modelArg, "model", defaultModel, modelUsage)
	f.Uint64Var(&weightSeed, "weight-seed", model.DefaultWeightSeed, "seed of a preset's random weights")
	f.StringVar(&tasksFlag, "tasks", "auto", "tasks besides agreement: arithmetic, passkey (comma-separated), auto (what a built-in checkpoint was trained on) or none")
	f.IntVar(&limit, "limit", 0, "arithmetic problems of the 500 held out (lm-eval's --limit; 0: all)")
	f.IntVar(&maxGenToks, "max-gen-toks", eval.GSM8KMaxGenToks, "max_tokens of an arithmetic request (lm-eval's max_gen_toks)")
	f.StringVar(&lengthsFlag, "passkey-lengths", "512,1024,2048,4096", "passkey context lengths in tokens (prompt plus --passkey-max-tokens)")
	f.StringVar(&depthsFlag, "passkey-depths", "0,0.25,0.5,0.75,1", "passkey needle depths in [0, 1]")
	f.IntVar(&maxReply, "passkey-max-tokens", 24, "max_tokens of a passkey request")
	f.IntVar(&numSpec, "num-speculative-tokens", -1, "MTP draft tokens per step of every lane (0: plain decoding; -1: 1 when the model has an MTP layer, else 0)")
	f.StringVar(&specJSON, "speculative-config", "", specConfigUsage+" for every lane, instead of --num-speculative-tokens")
	f.IntVar(&concurrency, "num-concurrent", 8, "requests in flight to each server (lm-eval's num_concurrent) and the servers' --max-num-seqs")
	f.IntVar(&numPrompts, "num-prompts", 16, "agreement prompts sent to every configuration")
	f.Uint64Var(&seed, "seed", 0, "seed of the agreement prompts and the passkey keys and haystacks")
	f.IntVar(&maxTokens, "max-tokens", 8, "greedy tokens per agreement prompt")
	f.IntVar(&minLen, "min-prompt-len", 4, "shortest agreement prompt in tokens")
	f.IntVar(&maxLen, "max-prompt-len", 48, "longest agreement prompt in tokens")
	f.StringVar(&kvDType, "kv-cache-dtype", "f32", "KV cache dtype: f32, bf16, fp8_ds_mla")
	f.StringVar(&memoryLimit, "memory-limit", "1GiB", "memory of one rank")
	f.Float64Var(&minAgreement, "min-agreement", 1.0, "fail if a lane agrees with the reference on less than this fraction of its requests")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON instead of the table")
	f.StringVar(&outputJSON, "output-json", "", "also write the report as JSON to this file")
	f.BoolVar(&logSamples, "log-samples", false, "put every lane's replies to the tasks in the JSON report (lm-eval's --log_samples)")
	return cmd
}
