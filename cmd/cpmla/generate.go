package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/tokenizer"
)

func init() { register(newGenerateCmd) }

type generateOptions struct {
	model         string
	weightSeed    uint64
	promptIDs     []int
	maxTokens     int
	params        sampler.Params
	kvDType       string
	idxDType      string
	blockSize     int
	stopAtEOS     bool
	tp, pcp       int
	dcp           int
	interleave    int
	backend       string
	dcpComm       string
	memoryLimit   string
	kvCacheMemory string
	threads       int
	// expertParallel and quantization: --enable-expert-parallel, --quantization
	expertParallel bool
	speculative    string
	quantization   string
	// beforeLoad, if set, runs once the flags are checked and before any
	// weight loads (the command loads its tokenizer there).
	beforeLoad func() error
}

type generateResult struct {
	Tokens   []int     `json:"tokens"`
	Logprobs []float64 `json:"logprobs"`
	// Text is Tokens decoded by the model's tokenizer (its own tokenizer.json,
	// else the embedded DeepSeek-V3 one); empty when an id is not one of the
	// tokenizer's.
	Text string `json:"text"`
}

// generate runs one request to completion through the engine, on one rank
// or on the in-process ranks of a TP/PCP/DCP layout.
func generate(o generateOptions) (*generateResult, error) {
	if err := checkParallel(o.tp, o.pcp, o.dcp, o.interleave); err != nil {
		return nil, err
	}
	if err := applyThreads(o.threads, o.tp*o.pcp); err != nil {
		return nil, err
	}
	if len(o.promptIDs) == 0 {
		return nil, fmt.Errorf("--prompt-ids is empty: give at least one token id")
	}
	if err := o.params.Validate(math.MaxInt32); err != nil { // token ids are checked against the model's vocabulary once it loads
		return nil, err
	}
	if o.maxTokens < 0 {
		return nil, fmt.Errorf("--max-tokens must be ≥ 0, got %d", o.maxTokens)
	}
	cfg, err := loadConfig(o.model)
	if err != nil {
		return nil, err
	}
	if o.maxTokens > cfg.MaxPositionEmbeddings || len(o.promptIDs)+o.maxTokens > cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("prompt (%d) + --max-tokens (%d) exceeds max_position_embeddings %d; set --max-tokens to at most %d",
			len(o.promptIDs), o.maxTokens, cfg.MaxPositionEmbeddings, max(cfg.MaxPositionEmbeddings-len(o.promptIDs), 0))
	}
	total := len(o.promptIDs) + o.maxTokens
	for i, id := range o.promptIDs {
		if id < 0 || id >= cfg.VocabSize {
			return nil, fmt.Errorf("prompt token %d is %d, outside the vocabulary [0, %d)", i, id, cfg.VocabSize)
		}
	}
	if o.blockSize < 1 || o.blockSize > engine.MaxBlockSize {
		return nil, fmt.Errorf("--block-size %d must be in [1, %d]; 16 is the usual setting", o.blockSize, engine.MaxBlockSize)
	}
	eo := engine.Options{
		MaxNumBatchedTokens: len(o.promptIDs), MaxNumSeqs: 1, MaxModelLen: (total + o.blockSize - 1) / o.blockSize * o.blockSize,
		BlockSize: o.blockSize, Layout: kvcache.Layout{N: o.dcp, I: o.interleave}, RanksPerHost: o.tp * o.pcp,
	}
	eo.MaxModelLen = min(eo.MaxModelLen, cfg.MaxPositionEmbeddings)
	if err := applyCacheFlags(&eo, o.kvDType, o.idxDType, o.memoryLimit, o.kvCacheMemory, nil); err != nil {
		return nil, err
	}
	if err := applySpeculative(&eo, o.speculative); err != nil {
		return nil, err
	}
	// A verification step carries the last token and K drafts.
	eo.MaxNumBatchedTokens = max(eo.MaxNumBatchedTokens, 1+eo.Speculative.K())
	eo = eo.WithDefaults(cfg)
	if err := eo.Validate(cfg); err != nil {
		return nil, err
	}
	d := deployment{tp: o.tp, pcp: o.pcp, dcp: o.dcp, interleave: o.interleave, backend: o.backend, dcpComm: o.dcpComm,
		kvDType: string(eo.KVDType), blockSize: o.blockSize, expertParallel: o.expertParallel, quantization: o.quantization}
	bp, err := d.backendPlan(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkEngineStart(o.model, cfg, eo, d); err != nil {
		return nil, err
	}
	if o.beforeLoad != nil {
		// Before the engine sizes its KV cache from what memory is left.
		if err := o.beforeLoad(); err != nil {
			return nil, err
		}
	}
	cfg, src, err := loadModel(o.model, o.weightSeed, o.quantization)
	if err != nil {
		return nil, err
	}
	factory, weights, release, err := d.executors(nil, 0, cfg, src, bp)
	if err != nil {
		return nil, err
	}
	defer release()
	e, err := engine.New(cfg, weights, factory, eo)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	req := engine.Request{ID: "generate", PromptIDs: o.promptIDs, MaxTokens: o.maxTokens, Sampling: o.params, IgnoreEOS: !o.stopAtEOS}
	if o.stopAtEOS {
		req.StopTokenIDs = cfg.EOSTokenIDs
	}
	res := &generateResult{Tokens: []int{}, Logprobs: []float64{}}
	if o.maxTokens == 0 {
		return res, nil
	}
	ch, err := e.Submit(context.Background(), req)
	if err != nil {
		return nil, err
	}
	for ev := range ch {
		if ev.Err != nil {
			return nil, ev.Err
		}
		res.Tokens = append(res.Tokens, ev.Token)
		res.Logprobs = append(res.Logprobs, ev.Logprob)
	}
	return res, nil
}

// decodeText is ids as text in tk, or a note saying why there is none.
func decodeText(tk *tokenizer.Tokenizer, ids []int) (text string, ok bool) {
	for _, id := range ids {
		if _, known := tk.Token(id); !known {
			return fmt.Sprintf("(no text: id %d is not in the tokenizer's vocabulary of %d)", id, tk.VocabSize()), false
		}
	}
	return tk.Decode(ids, false), true
}

func newGenerateCmd() *cobra.Command {
	var o generateOptions
	var ids, prompt, tokDir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Generate tokens for one prompt through the engine and print their ids and text",
		Long: "Generate --max-tokens tokens for one prompt (--prompt-ids, or --prompt text tokenized with\n" +
			"the model's tokenizer) and print the new token ids and their text. The built-in cpmla-tiny\n" +
			"(the default) is trained on arithmetic word problems, pass keys and copying, e.g.\n" +
			"--prompt $'Question: Ana has 12 apples. Ana buys 30 more apples. How many apples does Ana have now?\\nAnswer:'\n" +
			"--stop-at-eos; the presets have seeded random weights, so their text is noise.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The tokenizer loads first only when the prompt is text; ids are
			// checked before it loads, and it loads before the weights.
			var tk *tokenizer.Tokenizer
			load := func() (err error) {
				if tk == nil {
					if tk, err = loadTokenizer(tokDir, o.model); err != nil {
						return fmt.Errorf("load tokenizer: %w", err)
					}
				}
				return nil
			}
			var err error
			switch {
			case cmd.Flags().Changed("prompt") && cmd.Flags().Changed("prompt-ids"):
				return fmt.Errorf("give one of --prompt and --prompt-ids, not both")
			case cmd.Flags().Changed("prompt"):
				if prompt == "" {
					return fmt.Errorf("--prompt is empty; give some text, e.g. --prompt \"Hello\"")
				}
				if err := load(); err != nil {
					return err
				}
				o.promptIDs = tk.Encode(prompt, true)
			default:
				if o.promptIDs, err = parseIDList("--prompt-ids", ids); err != nil {
					return err
				}
			}
			o.beforeLoad = load
			res, err := generate(o)
			if err != nil {
				return err
			}
			res.Text, _ = decodeText(tk, res.Tokens)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				return enc.Encode(res)
			}
			parts := make([]string, len(res.Tokens))
			for i, t := range res.Tokens {
				parts[i] = strconv.Itoa(t)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ids:  %s\ntext: %q\n", strings.Join(parts, ","), res.Text)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", defaultModel, modelUsage)
	f.Uint64Var(&o.weightSeed, "weight-seed", model.DefaultWeightSeed, "seed of a preset's random weights")
	f.StringVar(&ids, "prompt-ids", "0,4,8,15,16,23,42", "comma-separated prompt token ids")
	f.StringVar(&prompt, "prompt", "", "prompt text, tokenized with the model's tokenizer (BOS added); instead of --prompt-ids")
	f.StringVar(&tokDir, "tokenizer", "", "directory with tokenizer.json (default: the checkpoint's, else the embedded DeepSeek-V3 tokenizer)")
	f.IntVar(&o.maxTokens, "max-tokens", 16, "tokens to generate")
	f.Float64Var(&o.params.Temperature, "temperature", 0, "sampling temperature (0 = greedy)")
	f.Float64Var(&o.params.TopP, "top-p", 1, "nucleus sampling probability")
	f.Uint64Var(&o.params.Seed, "seed", 0, "sampling seed")
	f.StringVar(&o.kvDType, "kv-cache-dtype", "f32", "KV cache dtype: f32, bf16, fp8_ds_mla")
	f.StringVar(&o.idxDType, "indexer-cache-dtype", "f32", "indexer key cache dtype: f32, fp8")
	f.IntVar(&o.blockSize, "block-size", 16, "KV cache block size in tokens")
	f.BoolVar(&o.stopAtEOS, "stop-at-eos", false, "stop at the model's end-of-sequence token")
	f.IntVar(&o.tp, "tensor-parallel-size", 1, "tensor parallel size (in-process ranks)")
	f.IntVar(&o.pcp, "prefill-context-parallel-size", 1, "prefill context parallel size")
	f.IntVar(&o.dcp, "decode-context-parallel-size", 1, "decode context parallel size")
	f.IntVar(&o.interleave, "cp-kv-cache-interleave-size", 1, "tokens per DCP rank before the KV moves to the next rank")
	f.StringVar(&o.backend, "attention-backend", "auto", "auto, sparse-gather (FLASHMLA_SPARSE) or sparse-sharded (FLASHINFER_MLA_SPARSE)")
	f.StringVar(&o.dcpComm, "dcp-comm-backend", "ag_rs", "DCP combine: ag_rs or a2a")
	addModelFlags(f, &o.expertParallel, &o.quantization)
	addSpeculativeFlag(f, &o.speculative)
	addThreadsFlag(cmd, &o.threads)
	f.StringVar(&o.memoryLimit, "memory-limit", "", "memory of one rank, e.g. 8GiB (default: this host's RAM)")
	f.StringVar(&o.kvCacheMemory, "kv-cache-memory", "", "KV cache bytes per rank, e.g. 8GiB (default: 4GiB, as vLLM's CPU backend; what --memory-limit leaves after weights and workspaces when that is less)")
	f.BoolVar(&asJSON, "json", false, "print tokens and logprobs as JSON")
	return cmd
}
