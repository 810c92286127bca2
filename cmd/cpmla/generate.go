package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
)

func init() { register(newGenerateCmd) }

type generateOptions struct {
	model       string
	weightSeed  uint64
	promptIDs   []int
	maxTokens   int
	params      sampler.Params
	kvDType     string
	idxDType    string
	blockSize   int
	stopAtEOS   bool
	printLogprb bool
}

type generateResult struct {
	Tokens   []int     `json:"tokens"`
	Logprobs []float64 `json:"logprobs"`
}

// generate runs one request to completion on a single rank.
func generate(o generateOptions) (*generateResult, error) {
	if len(o.promptIDs) == 0 {
		return nil, fmt.Errorf("--prompt-ids is empty: give at least one token id")
	}
	if err := o.params.Validate(); err != nil {
		return nil, err
	}
	if o.maxTokens < 0 {
		return nil, fmt.Errorf("--max-tokens must be ≥ 0, got %d", o.maxTokens)
	}
	cfg, src, err := model.Source(o.model, o.weightSeed)
	if err != nil {
		return nil, err
	}
	m, err := model.Build(cfg, src, model.Shard{TPSize: 1})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	total := len(o.promptIDs) + o.maxTokens
	if total > cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("prompt (%d) + max tokens (%d) = %d exceeds max_position_embeddings %d", len(o.promptIDs), o.maxTokens, total, cfg.MaxPositionEmbeddings)
	}
	kvd, err := kvcache.ParseKVDType(o.kvDType)
	if err != nil {
		return nil, err
	}
	idd, err := kvcache.ParseIndexerDType(o.idxDType)
	if err != nil {
		return nil, err
	}
	B := o.blockSize
	blocks := (total + B - 1) / B
	r, err := model.NewRunner(m, model.RunnerOptions{
		MaxTokens: len(o.promptIDs), MaxModelLen: blocks * B, MaxLogitRows: 1, MaxSeqs: 1,
		BlockSize: B, NumBlocks: blocks, KVDType: kvd, IndexerDType: idd,
	})
	if err != nil {
		return nil, err
	}
	pool := kvcache.NewPool(blocks)
	table, err := pool.Alloc(blocks, nil)
	if err != nil {
		return nil, err
	}
	s, err := sampler.New(o.params, cfg.VocabSize)
	if err != nil {
		return nil, err
	}
	eos := map[int]bool{}
	for _, id := range cfg.EOSTokenIDs {
		eos[id] = true
	}
	res := &generateResult{}
	seq := model.Seq{Start: 0, BlockTable: table}
	seq.Tokens = make([]int32, len(o.promptIDs))
	for i, id := range o.promptIDs {
		seq.Tokens[i] = int32(id)
	}
	step := make([]int32, 1)
	for len(res.Tokens) < o.maxTokens {
		if err := r.Forward(&model.Batch{Seqs: []model.Seq{seq}}); err != nil {
			return nil, err
		}
		_, logits := r.Logits(0)
		tok, lp := s.Sample(logits)
		res.Tokens = append(res.Tokens, tok)
		res.Logprobs = append(res.Logprobs, lp)
		if o.stopAtEOS && eos[tok] {
			break
		}
		seq.Start += len(seq.Tokens)
		step[0] = int32(tok)
		seq.Tokens = step
	}
	return res, nil
}

func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("token id %q is not an integer", f)
		}
		ids = append(ids, v)
	}
	return ids, nil
}

func newGenerateCmd() *cobra.Command {
	var o generateOptions
	var ids string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Generate tokens for one prompt on a single rank",
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.promptIDs, err = parseIDs(ids); err != nil {
				return err
			}
			res, err := generate(o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				return enc.Encode(res)
			}
			parts := make([]string, len(res.Tokens))
			for i, t := range res.Tokens {
				parts[i] = strconv.Itoa(t)
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.Join(parts, ","))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", config.DefaultPreset, "preset name or checkpoint directory")
	f.Uint64Var(&o.weightSeed, "weight-seed", model.DefaultWeightSeed, "seed of a preset's random weights")
	f.StringVar(&ids, "prompt-ids", "0,4,8,15,16,23,42", "comma-separated prompt token ids")
	f.IntVar(&o.maxTokens, "max-tokens", 16, "tokens to generate")
	f.Float64Var(&o.params.Temperature, "temperature", 0, "sampling temperature (0 = greedy)")
	f.Float64Var(&o.params.TopP, "top-p", 1, "nucleus sampling probability")
	f.Uint64Var(&o.params.Seed, "seed", 0, "sampling seed")
	f.StringVar(&o.kvDType, "kv-cache-dtype", "f32", "KV cache dtype: f32, bf16, fp8_ds_mla")
	f.StringVar(&o.idxDType, "indexer-cache-dtype", "f32", "indexer key cache dtype: f32, fp8")
	f.IntVar(&o.blockSize, "block-size", 16, "KV cache block size in tokens")
	f.BoolVar(&o.stopAtEOS, "stop-at-eos", false, "stop at the model's end-of-sequence token")
	f.BoolVar(&asJSON, "json", false, "print tokens and logprobs as JSON")
	return cmd
}
