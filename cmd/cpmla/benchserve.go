package main

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/bench"
)

func init() { registerBench(newBenchServeCmd) }

type benchServeOptions struct {
	baseURL, endpoint, model string
	dataset, tokenizer       string
	random                   bench.RandomOptions
	maxConcurrency           int
	requestRate              string
	ignoreEOS, noProgress    bool
	resultFile               string
}

// parseRate accepts a positive number of requests per second or "inf".
func parseRate(s string) (float64, error) {
	if strings.EqualFold(strings.TrimSpace(s), "inf") {
		return math.Inf(1), nil
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(r > 0) || math.IsInf(r, 0) {
		return 0, fmt.Errorf("--request-rate %q: give a positive number of requests per second, or inf (all at once)", s)
	}
	return r, nil
}

func newBenchServeCmd() *cobra.Command {
	var o benchServeOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serving benchmark: drive an OpenAI-compatible server and report TTFT, TPOT, ITL, E2EL and throughput",
		Long: "Send --num-prompts random prompts to --base-url and measure every streamed response, with the\n" +
			"metric definitions of vllm bench serve. Prompts are random ordinary token ids of the tokenizer\n" +
			"that the served model takes (the vocab_size of its /v1/models card or of /tokenizer_info)\n" +
			"(--random-input-len ± --random-range-ratio); /v1/completions gets the ids themselves,\n" +
			"/v1/chat/completions their decoded text as one user message. The progress bar goes to stderr,\n" +
			"the report to stdout, and --result-file gets JSON with vLLM's key names.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.dataset != "random" {
				return fmt.Errorf("--dataset-name %q is not available; use random", o.dataset)
			}
			rate, err := parseRate(o.requestRate)
			if err != nil {
				return err
			}
			if err := o.random.Validate(); err != nil {
				return err
			}
			if o.endpoint != bench.EndpointCompletions && o.endpoint != bench.EndpointChat {
				return fmt.Errorf("--endpoint is %q; use %s or %s", o.endpoint, bench.EndpointCompletions, bench.EndpointChat)
			}
			if o.maxConcurrency < 0 {
				return fmt.Errorf("--max-concurrency is %d; use 0 (no bound) or more", o.maxConcurrency)
			}
			if err := checkProcessFits("the random dataset", []namedBytes{{fmt.Sprintf("%d prompts", o.random.NumPrompts), o.random.Bytes()}},
				fmt.Sprintf("lower --num-prompts to at most %d", maxCount(o.random.Bytes()/int64(o.random.NumPrompts)))); err != nil {
				return err
			}
			// The server first: what it serves decides the ids drawn.
			base := strings.TrimRight(o.baseURL, "/")
			served, err := bench.Discover(cmd.Context(), http.DefaultClient, base, o.model)
			if err != nil {
				return err
			}
			tk, err := loadTokenizer(o.tokenizer, "")
			if err != nil {
				return fmt.Errorf("load tokenizer: %w", err)
			}
			o.random.VocabSize = served.VocabSize
			if served.VocabSize > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "bench serve: model %q takes token ids below %d (%s); random prompts draw from those\n", served.Model, served.VocabSize, served.VocabSource)
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "bench serve: %s does not say how many token ids model %q takes; random prompts draw from the whole tokenizer\n", base, served.Model)
			}
			prompts, err := bench.RandomDataset(tk, o.random)
			if err != nil {
				return err
			}
			opts := bench.Options{
				BaseURL: o.baseURL, Endpoint: o.endpoint, Model: served.Model, Prompts: prompts,
				MaxConcurrency: o.maxConcurrency, RequestRate: rate, IgnoreEOS: o.ignoreEOS,
				Seed: o.random.Seed, Tokenizer: tk,
			}
			if !o.noProgress {
				bar := progressbar.NewOptions(len(prompts),
					progressbar.OptionSetWriter(cmd.ErrOrStderr()),
					progressbar.OptionSetDescription("bench serve"),
					progressbar.OptionShowCount(),
					progressbar.OptionSetPredictTime(true),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(cmd.ErrOrStderr()) }))
				opts.Progress = func() { bar.Add(1) }
			}
			res, err := bench.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if err := res.WriteReport(cmd.OutOrStdout()); err != nil {
				return err
			}
			if o.resultFile != "" {
				f, err := os.Create(o.resultFile)
				if err != nil {
					return fmt.Errorf("--result-file: %w", err)
				}
				if err := res.WriteJSON(f); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("--result-file: %w", err)
				}
			}
			if res.Metrics.Completed == 0 {
				return fmt.Errorf("all %d requests failed, the first with: %s", res.Metrics.Failed, res.Outputs[0].Error)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.baseURL, "base-url", "http://127.0.0.1:8000", "the server to benchmark")
	f.StringVar(&o.endpoint, "endpoint", bench.EndpointCompletions, "API endpoint: /v1/completions or /v1/chat/completions")
	f.StringVar(&o.model, "model", "", "model name to send (default: the first of the server's /v1/models)")
	f.StringVar(&o.dataset, "dataset-name", "random", "dataset: random")
	f.StringVar(&o.tokenizer, "tokenizer", "", "directory with tokenizer.json for the prompts (default: the embedded DeepSeek-V3 tokenizer)")
	f.IntVar(&o.random.NumPrompts, "num-prompts", 100, "requests to send")
	f.IntVar(&o.random.InputLen, "random-input-len", 128, "mean prompt tokens")
	f.IntVar(&o.random.OutputLen, "random-output-len", 32, "mean tokens to generate (max_tokens)")
	f.Float64Var(&o.random.RangeRatio, "random-range-ratio", 0, "lengths are drawn uniformly from [len·(1−r), len·(1+r)]")
	f.Uint64Var(&o.random.Seed, "seed", 0, "seed of the prompts and of the arrival times")
	f.IntVar(&o.maxConcurrency, "max-concurrency", 0, "most requests in flight (0: no bound)")
	f.StringVar(&o.requestRate, "request-rate", "inf", "Poisson arrival rate in requests per second, or inf (all at once)")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", false, "ask the server to generate every requested token (ignore_eos)")
	f.StringVar(&o.resultFile, "result-file", "", "write the results as JSON here")
	f.BoolVar(&o.noProgress, "disable-progress-bar", false, "no progress bar on stderr")
	return cmd
}
