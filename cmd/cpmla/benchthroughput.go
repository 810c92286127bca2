package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/sampler"
)

func init() { register(newBenchThroughputCmd) }

type throughputOptions struct {
	engineFlags

	numPrompts, inputLen, outLen int
	seed                         uint64
	temperature                  float64
	asJSON, quiet                bool
}

// throughputResult is what `bench throughput --json` prints.
type throughputResult struct {
	Model            string  `json:"model"`
	NumPrompts       int     `json:"num_prompts"`
	InputLen         int     `json:"input_len"`
	OutputLen        int     `json:"output_len"`
	ElapsedS         float64 `json:"elapsed_s"`
	RequestsPerS     float64 `json:"requests_per_s"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	TotalTokensPerS  float64 `json:"total_tokens_per_s"`
	PromptTokens     int64   `json:"prompt_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	Steps            int64   `json:"steps"`
	DecodeSteps      int64   `json:"decode_steps"`
	// AllocsPerDecodeStep is the heap allocations the engine's own code
	// made per decode-only step (see engine.AllocCounter: every allocation
	// profiled, those of the engine's step, in-process ranks and kernel
	// workers counted, the Go runtime's bookkeeping not);
	// ProcessAllocsPerDecodeStep is every allocation of the process
	// between the start and end of each decode-only step
	// (runtime.MemStats), which includes the benchmark's goroutines and the
	// runtime's own objects.
	AllocsPerDecodeStep         float64 `json:"allocs_per_decode_step"`
	ProcessAllocsPerDecodeStep  float64 `json:"process_allocs_per_decode_step"`
	KernelPlansBuiltAfterWarmup int64   `json:"kernel_plans_built_after_warmup"`
	Preemptions                 int64   `json:"preemptions"`
	KVUsagePeak                 float64 `json:"kv_usage_peak"`
	PrefixCacheHitRate          float64 `json:"prefix_cache_hit_rate"`
	KVBlocks                    int     `json:"kv_blocks"`
	KVTokensPerRank             int64   `json:"kv_tokens_per_rank"`
	Failed                      int     `json:"failed_requests"`
	// Speculative decoding (--speculative-config), as vLLM's bench reports
	// it: absent without speculation.
	Spec *specResult `json:"spec_decode,omitempty"`
}

// engineOptions turns the flags into engine options, refusing impossible
// values before anything loads.
func (o *throughputOptions) engineOptions(cfg *config.Model) (engine.Options, error) {
	eo, err := o.engineFlags.engineOptions()
	if err != nil {
		return eo, err
	}
	eo.MaxQueue = max(o.numPrompts, 1)
	eo.MeasureAllocs = true
	eo = eo.WithDefaults(cfg)
	switch {
	case o.numPrompts < 1:
		return eo, fmt.Errorf("--num-prompts must be ≥ 1, got %d", o.numPrompts)
	case o.inputLen < 1:
		return eo, fmt.Errorf("--input-len must be ≥ 1, got %d", o.inputLen)
	case o.outLen < 1:
		return eo, fmt.Errorf("--output-len must be ≥ 1, got %d", o.outLen)
	case o.inputLen > eo.MaxModelLen:
		return eo, fmt.Errorf("--input-len %d is longer than --max-model-len %d; set --input-len to at most %d", o.inputLen, eo.MaxModelLen, eo.MaxModelLen)
	case o.outLen > eo.MaxModelLen:
		return eo, fmt.Errorf("--output-len %d is longer than --max-model-len %d; set --output-len to at most %d", o.outLen, eo.MaxModelLen, eo.MaxModelLen)
	case !(o.temperature >= 0) || math.IsInf(o.temperature, 0):
		return eo, fmt.Errorf("--temperature must be a finite number ≥ 0 (0 = greedy), got %v", o.temperature)
	}
	return eo, eo.Validate(cfg)
}

// preflight checks the flags and the memory of the run (the engine's
// start-up and the prompts with their requests) before anything loads.
func (o *throughputOptions) preflight() (*config.Model, engine.Options, error) {
	cfg, eo, err := o.engineFlags.preflight(o.engineOptions)
	if err != nil {
		return nil, eo, err
	}
	// Each request: its prompt (kept here and in the engine), its output
	// and its goroutine.
	perRequest := plan.AddSat(plan.MulSat(int64(o.inputLen), 8+4), plan.MulSat(int64(o.outLen), 16), 8<<10)
	if err := checkProcessFits("the requests of bench throughput", []namedBytes{{fmt.Sprintf("%d requests", o.numPrompts), plan.MulSat(int64(o.numPrompts), perRequest)}},
		fmt.Sprintf("lower --num-prompts to at most %d", maxCount(perRequest))); err != nil {
		return nil, eo, err
	}
	return cfg, eo, nil
}

// progress draws a bar of finished requests on stderr without allocating,
// so that it cannot disturb the engine's per-step allocation count.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	total int
	done  int
	buf   []byte
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, buf: make([]byte, 0, 128)}
}

func (p *progress) add() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	const width = 40
	filled := p.done * width / p.total
	b := append(p.buf[:0], "\rbench throughput ["...)
	for i := range width {
		if i < filled {
			b = append(b, '#')
		} else {
			b = append(b, '.')
		}
	}
	b = append(b, "] "...)
	b = strconv.AppendInt(b, int64(p.done), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(p.total), 10)
	b = append(b, " requests"...)
	if p.done == p.total {
		b = append(b, '\n')
	}
	p.buf = b
	p.w.Write(b)
}

func benchThroughput(o throughputOptions, stderr io.Writer) (*throughputResult, error) {
	_, eo, err := o.preflight()
	if err != nil {
		return nil, err
	}
	if o.inputLen+o.outLen > eo.MaxModelLen {
		fmt.Fprintf(stderr, "note: --input-len %d + --output-len %d exceeds --max-model-len %d; requests stop at the length limit\n", o.inputLen, o.outLen, eo.MaxModelLen)
	}
	built, err := o.buildRanks(eo.BlockSize)
	if err != nil {
		return nil, err
	}
	defer built.release()
	cfg, factory, weights := built.cfg, built.factory, built.weights
	var rec *stepRecorder
	counting := func(opt model.RunnerOptions) (engine.Executor, error) {
		x, err := factory(opt)
		if err != nil {
			return nil, err
		}
		rec = &stepRecorder{Executor: x}
		return rec, nil
	}
	e, err := engine.New(cfg, weights, counting, eo)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := e.Memory().WriteTable(stderr); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.seed, 0x7468726f))
	prompts := make([][]int, o.numPrompts)
	for i := range prompts {
		p := make([]int, o.inputLen)
		for j := range p {
			p[j] = 2 + rng.IntN(cfg.VocabSize-2)
		}
		prompts[i] = p
	}
	var bar *progress
	if !o.quiet {
		bar = newProgress(stderr, o.numPrompts)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
		first  error
	)
	allocs := engine.StartAllocCounter()
	e.CountAllocs(allocs)
	start := time.Now()
	for i, p := range prompts {
		req := engine.Request{ID: strconv.Itoa(i), PromptIDs: p, MaxTokens: o.outLen, IgnoreEOS: true,
			Sampling: sampler.Params{Temperature: o.temperature, TopP: 1, Seed: o.seed + uint64(i)}}
		ch, err := e.Submit(context.Background(), req)
		if err != nil {
			return nil, fmt.Errorf("submit request %d: %w", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last engine.Event
			for ev := range ch {
				last = ev
			}
			if last.Err != nil {
				mu.Lock()
				failed++
				if first == nil {
					first = last.Err
				}
				mu.Unlock()
			}
			bar.add()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	engineAllocCount, decodeSteps := allocs.Finish()
	if first != nil {
		return nil, fmt.Errorf("%d of %d requests failed, the first with: %w", failed, o.numPrompts, first)
	}
	st := e.Stats()
	mem := e.Memory()
	promptTokens := int64(o.numPrompts * o.inputLen)
	return &throughputResult{
		Model: o.model, NumPrompts: o.numPrompts, InputLen: o.inputLen, OutputLen: o.outLen,
		ElapsedS:                    elapsed,
		RequestsPerS:                float64(o.numPrompts) / elapsed,
		OutputTokensPerS:            float64(st.OutputTokens) / elapsed,
		TotalTokensPerS:             float64(promptTokens+st.OutputTokens) / elapsed,
		PromptTokens:                promptTokens,
		OutputTokens:                st.OutputTokens,
		Steps:                       st.Steps,
		DecodeSteps:                 st.DecodeSteps,
		AllocsPerDecodeStep:         float64(engineAllocCount) / float64(max(decodeSteps, 1)),
		ProcessAllocsPerDecodeStep:  st.AllocsPerDecodeStep(),
		KernelPlansBuiltAfterWarmup: st.KernelPlansBuiltAfterWarmup,
		Preemptions:                 st.Preemptions,
		Spec:                        newSpecResult(e.Options().Speculative, st.Spec),
		KVUsagePeak:                 st.KVUsagePeak(),
		PrefixCacheHitRate:          st.PrefixHitRate(),
		KVBlocks:                    mem.NumBlocks,
		KVTokensPerRank:             int64(mem.NumBlocks) * int64(mem.LocalBlock),
		Failed:                      failed,
	}, nil
}

func newBenchThroughputCmd() *cobra.Command {
	bench := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks of the engine",
	}
	var o throughputOptions
	cmd := &cobra.Command{
		Use:   "throughput",
		Short: "Offline throughput: run --num-prompts random prompts through the engine (no HTTP)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, _, err := o.preflight(); err != nil {
				return err
			}
			return runRanks(o.threadsPerRank, o.deployment(), cmd.ErrOrStderr(),
				func(procs *engine.Procs, procWeights int64) error {
					o.procs, o.procWeights = procs, procWeights
					res, err := benchThroughput(o, cmd.ErrOrStderr())
					if err != nil {
						return err
					}
					return printThroughput(cmd.OutOrStdout(), res, o.asJSON)
				})
		},
	}
	f := cmd.Flags()
	o.addEngineFlags(cmd, config.DefaultPreset)
	addSpeculativeFlag(f, &o.speculative)
	f.IntVar(&o.numPrompts, "num-prompts", 64, "requests to run")
	f.IntVar(&o.inputLen, "input-len", 128, "prompt tokens per request")
	f.IntVar(&o.outLen, "output-len", 32, "generated tokens per request (end-of-sequence is ignored)")
	f.Uint64Var(&o.seed, "seed", 0, "seed of the random prompts and of sampling")
	f.Float64Var(&o.temperature, "temperature", 0, "sampling temperature (0 = greedy)")
	f.IntVar(&o.engine.MaxNumSeqs, "max-num-seqs", engine.DefaultMaxNumSeqs, "sequences per step")
	f.IntVar(&o.engine.MaxModelLen, "max-model-len", 0, "longest request in tokens (0: the model's max_position_embeddings)")
	f.BoolVar(&o.engine.DisablePrefixCaching, "no-prefix-caching", false, "do not reuse cached full blocks")
	f.BoolVar(&o.asJSON, "json", false, "print the results as JSON")
	f.BoolVar(&o.quiet, "quiet", false, "no progress bar on stderr")
	bench.AddCommand(cmd)
	return bench
}

// printThroughput writes a bench throughput result as JSON or as the
// human-readable summary.
func printThroughput(out io.Writer, res *throughputResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(out, "requests:               %d in %.2f s (%.2f requests/s)\n", res.NumPrompts, res.ElapsedS, res.RequestsPerS)
	fmt.Fprintf(out, "output tokens/s:        %.1f\n", res.OutputTokensPerS)
	fmt.Fprintf(out, "total tokens/s:         %.1f (prompt %d + output %d tokens)\n", res.TotalTokensPerS, res.PromptTokens, res.OutputTokens)
	fmt.Fprintf(out, "steps:                  %d (%d decode-only)\n", res.Steps, res.DecodeSteps)
	fmt.Fprintf(out, "peak KV usage:          %.1f%% of %d blocks\n", 100*res.KVUsagePeak, res.KVBlocks)
	fmt.Fprintf(out, "preemptions:            %d\n", res.Preemptions)
	fmt.Fprintf(out, "prefix-cache hit rate:  %.1f%%\n", 100*res.PrefixCacheHitRate)
	fmt.Fprintf(out, "allocs per decode step: %.2f by the engine (%.2f in the whole process)\n", res.AllocsPerDecodeStep, res.ProcessAllocsPerDecodeStep)
	fmt.Fprintf(out, "kernel plans built after warm-up: %d\n", res.KernelPlansBuiltAfterWarmup)
	if s := res.Spec; s != nil {
		fmt.Fprintf(out, "spec decode (K %d):     %d drafts, %d draft tokens, %d accepted (%.1f%%), mean acceptance length %.3f\n",
			s.K, s.Drafts, s.DraftTokens, s.AcceptedTokens, 100*s.AcceptanceRate, s.MeanAcceptanceLength)
		fmt.Fprintf(out, "acceptance per position: %s\n", formatRates(s.AcceptanceRatePerPos))
	}
	return nil
}
