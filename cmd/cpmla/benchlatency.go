package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/tokenizer"
)

func init() { registerBench(newBenchLatencyCmd) }

// latencyOptions are the flags of `cpmla bench latency`: vLLM's (`vllm bench
// latency`) and the engine flags every engine command shares.
type latencyOptions struct {
	engineFlags

	inputLen, outputLen, batchSize, n int
	useBeamSearch                     bool
	warmup, iters                     int
	profile                           bool
	profileFile                       string
	outputJSON                        string
	disableDetokenize                 bool
	enablePrefixCaching               bool
	seed                              uint64
	asJSON                            bool
}

// latencyResult is what `bench latency` reports: vLLM's keys first
// (avg_latency, std_latency, latencies, percentiles — the whole batch's
// generation, in seconds), then what the engine measured in the same run.
// Times per token and rates are medians over the iterations; every
// iteration's roofline terms are taken against the FMA peak and read
// bandwidth measured right before it, on the threads the ranks use.
type latencyResult struct {
	AvgLatency  float64            `json:"avg_latency"`
	StdLatency  float64            `json:"std_latency"`
	Latencies   []float64          `json:"latencies"`
	Percentiles map[string]float64 `json:"percentiles"`

	Model     string `json:"model"`
	InputLen  int    `json:"input_len"`
	OutputLen int    `json:"output_len"`
	BatchSize int    `json:"batch_size"`
	N         int    `json:"n"`
	Threads   int    `json:"threads"` // kernel threads of all ranks of this host
	Impl      string `json:"impl"`

	// MeanTTFT is the mean time to first token of the iteration's requests
	// (from the batch's submission); MeanTPOT the mean time per output
	// token after the first of its sequences.
	MeanTTFT float64 `json:"mean_ttft_s"`
	MeanTPOT float64 `json:"mean_tpot_s"`
	// PrefillTokensPerS and DecodeTokensPerS are prompt tokens over the
	// time of the steps that held prompt tokens, and sampled tokens over
	// the time of the decode-only steps (a step lasting until the next one
	// starts, so the engine's own work between forward passes counts).
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	DecodeTokensPerS  float64 `json:"decode_tokens_per_s"`
	DecodeStepS       float64 `json:"decode_step_s"`
	// DecodeForwardS is the part of a decode step spent in the forward
	// pass; the rest is the engine's own work (sampling, scheduling, the
	// delivery of tokens).
	DecodeForwardS float64 `json:"decode_forward_s"`
	// DecodeCollectiveS is the part of a decode step's forward pass a rank
	// spends inside its TP, DCP and PCP collectives (waiting for the other
	// ranks included), the mean over this process's ranks: rank 0's alone
	// under --comm mpi, 0 on one rank.
	DecodeCollectiveS float64 `json:"decode_collective_s"`
	DecodeSteps       int     `json:"decode_steps_per_iter"`
	PrefillSteps      int     `json:"prefill_steps_per_iter"`

	FMAPeakGFLOPS     float64 `json:"fma_peak_gflops"`
	ReadBandwidthGBPS float64 `json:"read_bandwidth_gbps"`
	// DecodeRooflineFraction is Σ max(bytes / bandwidth, FLOPs / peak) over
	// the decode steps against their time: bytes are the weights the step
	// read (routed experts only where selected) and the cache rows and
	// indexer keys; DecodeMemoryFraction and DecodeComputeFraction are the
	// two terms alone.
	DecodeRooflineFraction float64 `json:"decode_roofline_fraction"`
	DecodeMemoryFraction   float64 `json:"decode_memory_fraction"`
	DecodeComputeFraction  float64 `json:"decode_compute_fraction"`
	// DecodeFP8RooflineFraction is the same roofline with the cores' fp8
	// product rates (kernels.FP8ProductLoop on the same threads, right
	// before each iteration) as the compute ceiling of the fp8 products of
	// up to eight rows (model.Runner.StepRoofline): an exact fp8 product
	// multiplies every decoded weight by its block's scale on the FMA
	// pipes, which neither the read bandwidth nor the FMA peak counts. For
	// a model without fp8 weights it is DecodeRooflineFraction.
	// DecodeFP8ComputeFraction is its compute term alone (its memory term
	// is DecodeMemoryFraction).
	DecodeFP8RooflineFraction float64 `json:"decode_fp8_roofline_fraction"`
	DecodeFP8ComputeFraction  float64 `json:"decode_fp8_compute_fraction"`
	// PrefillFMAFraction is the prefill steps' FLOPs (projections, experts,
	// attention, indexer) over their time against the FMA peak.
	PrefillFMAFraction float64 `json:"prefill_fma_fraction"`
	// Per decode step and per iteration's prefill, as the ranks counted
	// them (model.StepCost). Under --comm mpi they are rank 0's own count,
	// and the probes run on rank 0's threads alone (the other ranks are in
	// their own step loops on their own cores), so the fractions are rank
	// 0's: ranks sharing a host's memory stream at the same time, and what
	// that sharing costs is in them.
	DecodeWeightBytes float64 `json:"decode_weight_bytes_per_step"`
	DecodeKVBytes     float64 `json:"decode_kv_bytes_per_step"`
	DecodeFLOPs       float64 `json:"decode_flops_per_step"`
	PrefillFLOPs      float64 `json:"prefill_flops_per_iter"`
	// LoadAverage is the host's one-minute load average before and after
	// the measured iterations (other jobs sharing the cores).
	LoadAverage [2]float64 `json:"load_average"`
	// fp8Weights is set for a model with fp8 weights, whose fraction at the
	// fp8 rates the text output prints.
	fp8Weights bool
}

// stepRecord is one forward pass of the engine.
type stepRecord struct {
	start          time.Time
	tokens, seqs   int
	prefill        bool // some sequence ran more than one token
	cost           model.StepCost
	costAvailable  bool
	forwardSeconds float64
	// roofMemory and roofCompute are the step's roofline terms at the
	// recorder's limits (engine.RooflineTermer), set when roofAvailable.
	roofMemory, roofCompute float64
	roofAvailable           bool
	// collectiveSeconds is the mean time the recorder's ranks spent inside
	// collectives during the forward pass.
	collectiveSeconds float64
}

// stepRecorder is the engine's executor wrapped so that every step is
// recorded while on is set. The optional interfaces the engine looks for
// are passed through.
type stepRecorder struct {
	engine.Executor
	// ranks is how many ranks' collective time CollectiveSeconds sums:
	// the in-process ranks, or 1 for rank 0 of an MPI job.
	ranks int
	mu    sync.Mutex
	on    bool
	steps []stepRecord
	// limits are the rates the steps' roofline terms are taken at (the
	// probes right before the iteration); none before setLimits.
	limits model.Limits
}

// setLimits sets the rates the next steps' roofline terms are taken at.
func (s *stepRecorder) setLimits(l model.Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = l
}

// decodeOnly reports whether every sequence of b decodes one token.
func decodeOnly(b *model.Batch) bool {
	for _, q := range b.Seqs {
		if len(q.Tokens) != 1 || q.Start == 0 {
			return false
		}
	}
	return len(b.Seqs) > 0
}

func (s *stepRecorder) Forward(b *model.Batch) error {
	c0 := s.CollectiveSeconds()
	t0 := time.Now()
	err := s.Executor.Forward(b)
	d := time.Since(t0)
	coll := (s.CollectiveSeconds() - c0) / float64(max(s.ranks, 1))
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on || err != nil {
		return err
	}
	rec := stepRecord{start: t0, seqs: len(b.Seqs), forwardSeconds: d.Seconds(), collectiveSeconds: coll}
	rec.prefill = !decodeOnly(b)
	for _, q := range b.Seqs {
		rec.tokens += len(q.Tokens)
	}
	if c, ok := s.Executor.(engine.StepCoster); ok {
		rec.cost, rec.costAvailable = c.StepCost(), true
	}
	if t, ok := s.Executor.(engine.RooflineTermer); ok && s.limits.ReadBW > 0 && s.limits.FMAPeak > 0 {
		rec.roofMemory, rec.roofCompute = t.StepRooflineTerms(s.limits)
		rec.roofAvailable = true
	}
	s.steps = append(s.steps, rec)
	return nil
}

// record starts (on) or stops recording and returns the steps recorded
// since the last start.
func (s *stepRecorder) record(on bool) []stepRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	steps := s.steps
	if on {
		s.steps = s.steps[:0]
	}
	s.on = on
	return steps
}

func (s *stepRecorder) Close() error {
	if c, ok := s.Executor.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (s *stepRecorder) KernelPlansBuilt() int64 {
	if pc, ok := s.Executor.(engine.PlanCounter); ok {
		return pc.KernelPlansBuilt()
	}
	return 0
}

func (s *stepRecorder) CollectiveSeconds() float64 {
	if ct, ok := s.Executor.(engine.CollectiveTimer); ok {
		return ct.CollectiveSeconds()
	}
	return 0
}

// Broken and BrokenErr pass an MPI executor's heartbeat through (a nil
// channel, which never fires, for executors without one).
func (s *stepRecorder) Broken() <-chan struct{} {
	if b, ok := s.Executor.(interface{ Broken() <-chan struct{} }); ok {
		return b.Broken()
	}
	return nil
}

func (s *stepRecorder) BrokenErr() error {
	if b, ok := s.Executor.(interface{ BrokenErr() error }); ok {
		return b.BrokenErr()
	}
	return nil
}

// engineOptions turns the flags into engine options, refusing impossible
// values before anything loads.
func (o *latencyOptions) engineOptions(cfg *config.Model) (engine.Options, error) {
	switch {
	case o.useBeamSearch:
		return o.engine, fmt.Errorf("--use-beam-search: beam search is not implemented by this engine; leave it off to sample --n sequences per prompt")
	case o.inputLen < 1:
		return o.engine, fmt.Errorf("--input-len must be ≥ 1, got %d", o.inputLen)
	case o.outputLen < 1:
		return o.engine, fmt.Errorf("--output-len must be ≥ 1, got %d", o.outputLen)
	case o.batchSize < 1 || o.batchSize > maxLatencyBatch:
		return o.engine, fmt.Errorf("--batch-size must be in [1, %d], got %d", maxLatencyBatch, o.batchSize)
	case o.n < 1 || o.n > maxLatencyBatch:
		return o.engine, fmt.Errorf("--n must be in [1, %d], got %d", maxLatencyBatch, o.n)
	case o.warmup < 0 || o.warmup > maxLatencyIters:
		return o.engine, fmt.Errorf("--num-iters-warmup must be in [0, %d], got %d", maxLatencyIters, o.warmup)
	case o.iters < 1 || o.iters > maxLatencyIters:
		return o.engine, fmt.Errorf("--num-iters must be in [1, %d], got %d", maxLatencyIters, o.iters)
	case o.inputLen > cfg.MaxPositionEmbeddings || o.outputLen > cfg.MaxPositionEmbeddings-o.inputLen:
		return o.engine, fmt.Errorf("--input-len %d + --output-len %d exceeds the model's max_position_embeddings %d", o.inputLen, o.outputLen, cfg.MaxPositionEmbeddings)
	case o.profile && o.profileFile == "":
		return o.engine, fmt.Errorf("--profile needs --profile-file, the file the CPU profile is written to")
	}
	eo, err := o.engineFlags.engineOptions()
	if err != nil {
		return eo, err
	}
	seqs := o.batchSize * o.n
	if eo.MaxNumSeqs == 0 {
		eo.MaxNumSeqs = max(engine.DefaultMaxNumSeqs, seqs)
	}
	if eo.MaxModelLen == 0 {
		// The shortest length that holds a request, rounded up to a block.
		bs := max(eo.BlockSize, 1)
		eo.MaxModelLen = min(cfg.MaxPositionEmbeddings, (o.inputLen+o.outputLen+bs-1)/bs*bs)
	}
	eo.MaxQueue = max(o.batchSize, 1)
	eo.DisablePrefixCaching = !o.enablePrefixCaching
	eo = eo.WithDefaults(cfg)
	switch {
	case o.inputLen+o.outputLen > eo.MaxModelLen:
		return eo, fmt.Errorf("--input-len %d + --output-len %d = %d exceeds --max-model-len %d; raise --max-model-len to at least %d (the model allows %d)",
			o.inputLen, o.outputLen, o.inputLen+o.outputLen, eo.MaxModelLen, o.inputLen+o.outputLen, cfg.MaxPositionEmbeddings)
	case seqs > eo.MaxNumSeqs:
		return eo, fmt.Errorf("--batch-size %d × --n %d = %d sequences exceed --max-num-seqs %d; raise --max-num-seqs to %d", o.batchSize, o.n, seqs, eo.MaxNumSeqs, seqs)
	}
	return eo, eo.Validate(cfg)
}

// maxLatencyBatch bounds --batch-size and --n, maxLatencyIters the
// iteration counts.
const (
	maxLatencyBatch = 1024
	maxLatencyIters = 1000
)

// preflight checks the flags and the memory of the run before anything
// loads.
func (o *latencyOptions) preflight() (*config.Model, engine.Options, error) {
	return o.engineFlags.preflight(o.engineOptions)
}

// iteration is what one generation of the batch measured.
type iteration struct {
	latency    float64
	ttft, tpot []float64 // per request, per sequence
	steps      []stepRecord
	end        time.Time
	fma, bw    float64 // probes right before (GFLOP/s, GB/s)
}

func benchLatency(o latencyOptions, stderr io.Writer) (*latencyResult, error) {
	_, eo, err := o.preflight()
	if err != nil {
		return nil, err
	}
	built, err := o.buildRanks(eo.BlockSize)
	if err != nil {
		return nil, err
	}
	defer built.release()
	cfg, factory, weights := built.cfg, built.factory, built.weights
	ranks := o.tp * o.pcp
	if o.procs != nil {
		ranks = 1
	}
	var rec *stepRecorder
	recording := func(opt model.RunnerOptions) (engine.Executor, error) {
		x, err := factory(opt)
		if err != nil {
			return nil, err
		}
		rec = &stepRecorder{Executor: x, ranks: ranks}
		return rec, nil
	}
	e, err := engine.New(cfg, weights, recording, eo)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := e.Memory().WriteTable(stderr); err != nil {
		return nil, err
	}
	var tk *tokenizer.Tokenizer
	if !o.disableDetokenize {
		if tk, err = loadTokenizer("", o.model); err != nil {
			return nil, fmt.Errorf("load tokenizer (--disable-detokenize skips detokenizing): %w", err)
		}
	}
	// vLLM's dummy prompts: ids below 10000, the same every iteration.
	rng := rand.New(rand.NewPCG(o.seed, 0x6c6174))
	prompts := make([][]int, o.batchSize)
	for i := range prompts {
		p := make([]int, o.inputLen)
		for j := range p {
			p[j] = rng.IntN(min(10000, cfg.VocabSize))
		}
		prompts[i] = p
	}
	threads := kernels.Threads() * localRanks(ranks)
	if o.procs != nil {
		// Rank 0's own threads: the other ranks run their own step loops
		// on the other cores, and rank 0 counts its own step's cost.
		threads = kernels.Threads()
	}
	run := func(iter int) (iteration, error) {
		return runLatencyIteration(e, rec, tk, prompts, o, iter)
	}
	fmt.Fprintf(stderr, "bench latency: %d warm-up iterations\n", o.warmup)
	for i := range o.warmup {
		if _, err := run(i); err != nil {
			return nil, err
		}
	}
	if o.profile {
		f, err := os.Create(o.profileFile)
		if err != nil {
			return nil, fmt.Errorf("--profile-file: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		_, err = run(o.warmup)
		pprof.StopCPUProfile()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "bench latency: CPU profile of one iteration written to %s (go tool pprof %s)\n", o.profileFile, o.profileFile)
		return nil, nil
	}
	probe := newPeakProbe(threads)
	res := &latencyResult{Model: o.model, InputLen: o.inputLen, OutputLen: o.outputLen, BatchSize: o.batchSize, N: o.n,
		Threads: threads, Impl: kernels.Impl(), fp8Weights: cfg.Quantization != nil}
	res.LoadAverage[0] = loadAverage()
	iters := make([]iteration, o.iters)
	for i := range iters {
		fma, bw := probe.fmaPeak(), probe.readBandwidth()
		l := model.Limits{ReadBW: bw * 1e9, FMAPeak: fma * 1e9}
		if res.fp8Weights {
			l.FP8 = probe.fp8Rates()
		}
		rec.setLimits(l)
		it, err := run(o.warmup + i)
		if err != nil {
			return nil, err
		}
		it.fma, it.bw = fma, bw
		iters[i] = it
		fmt.Fprintf(stderr, "bench latency: iteration %d of %d: %.3f s\n", i+1, o.iters, it.latency)
	}
	res.LoadAverage[1] = loadAverage()
	summarizeLatency(res, iters)
	return res, nil
}

// runLatencyIteration submits the batch, waits for every sequence and
// detokenizes the outputs (unless --disable-detokenize), recording the
// engine's steps.
func runLatencyIteration(e *engine.Engine, rec *stepRecorder, tk *tokenizer.Tokenizer, prompts [][]int, o latencyOptions, iter int) (iteration, error) {
	type stream struct {
		ch     <-chan engine.Event
		first  time.Time
		finish []time.Time // per sequence
		tokens [][]int
		err    error
	}
	streams := make([]stream, len(prompts))
	rec.record(true)
	start := time.Now()
	for i, p := range prompts {
		req := engine.Request{ID: fmt.Sprintf("latency-%d-%d", iter, i), PromptIDs: p, MaxTokens: o.outputLen, N: o.n, IgnoreEOS: true,
			Sampling: sampler.Params{Temperature: 1, TopP: 1, Seed: o.seed + uint64(iter*len(prompts)+i)*uint64(o.n)}}
		ch, err := e.Submit(context.Background(), req)
		if err != nil {
			rec.record(false)
			return iteration{}, fmt.Errorf("submit request %d: %w", i, err)
		}
		streams[i] = stream{ch: ch, finish: make([]time.Time, o.n), tokens: make([][]int, o.n)}
	}
	var wg sync.WaitGroup
	for i := range streams {
		s := &streams[i]
		wg.Go(func() {
			for ev := range s.ch {
				now := time.Now()
				if ev.Err != nil {
					s.err = ev.Err
					continue
				}
				if s.first.IsZero() {
					s.first = now
				}
				if ev.Finish != "" {
					s.finish[ev.Index] = now
					continue
				}
				s.tokens[ev.Index] = append(s.tokens[ev.Index], ev.Token)
			}
		})
	}
	wg.Wait()
	end := time.Now()
	steps := rec.record(false)
	it := iteration{steps: slices.Clone(steps), end: end}
	for i := range streams {
		s := &streams[i]
		if s.err != nil {
			return it, fmt.Errorf("request %d: %w", i, s.err)
		}
		it.ttft = append(it.ttft, s.first.Sub(start).Seconds())
		for k, f := range s.finish {
			if n := len(s.tokens[k]); n > 1 {
				it.tpot = append(it.tpot, f.Sub(s.first).Seconds()/float64(n-1))
			}
		}
		if tk != nil {
			for _, ids := range s.tokens {
				decodeText(tk, ids)
			}
		}
	}
	it.latency = time.Since(start).Seconds()
	return it, nil
}

// summarizeLatency fills res from the measured iterations.
func summarizeLatency(res *latencyResult, iters []iteration) {
	var ttft, tpot, pre, dec, decStep, decFwd, decColl, roof, mem, comp, fp8Roof, fp8Comp, preFMA, fma, bw []float64
	var wB, kvB, fl, preFl []float64
	var decSteps, preSteps []float64
	for _, it := range iters {
		res.Latencies = append(res.Latencies, it.latency)
		ttft = append(ttft, mean(it.ttft))
		if len(it.tpot) > 0 {
			tpot = append(tpot, mean(it.tpot))
		}
		fma, bw = append(fma, it.fma), append(bw, it.bw)
		var preT, preTok, preF, decT, decFwdT, decCollT, decTok, roofT, memT, compT, fp8T, fp8C float64
		fp8OK := true
		var nDec, nPre int
		var sumW, sumKV, sumF float64
		for i, s := range it.steps {
			next := it.end
			if i+1 < len(it.steps) {
				next = it.steps[i+1].start
			}
			d := next.Sub(s.start).Seconds()
			if s.prefill {
				nPre++
				preT += d
				preTok += float64(s.tokens)
				preF += float64(s.cost.FLOPs)
				continue
			}
			nDec++
			decT += d
			decFwdT += s.forwardSeconds
			decCollT += s.collectiveSeconds
			decTok += float64(s.seqs)
			m := float64(s.cost.WeightBytes+s.cost.KVBytes) / (it.bw * 1e9)
			c := float64(s.cost.FLOPs) / (it.fma * 1e9)
			memT, compT, roofT = memT+m, compT+c, roofT+max(m, c)
			fp8T, fp8C = fp8T+max(s.roofMemory, s.roofCompute), fp8C+s.roofCompute
			fp8OK = fp8OK && s.roofAvailable
			sumW, sumKV, sumF = sumW+float64(s.cost.WeightBytes), sumKV+float64(s.cost.KVBytes), sumF+float64(s.cost.FLOPs)
		}
		decSteps, preSteps = append(decSteps, float64(nDec)), append(preSteps, float64(nPre))
		if preT > 0 {
			pre = append(pre, preTok/preT)
			preFMA = append(preFMA, preF/preT/(it.fma*1e9))
			preFl = append(preFl, preF)
		}
		if decT > 0 {
			dec = append(dec, decTok/decT)
			decStep = append(decStep, decT/float64(nDec))
			decFwd = append(decFwd, decFwdT/float64(nDec))
			decColl = append(decColl, decCollT/float64(nDec))
			roof, mem, comp = append(roof, roofT/decT), append(mem, memT/decT), append(comp, compT/decT)
			if fp8OK {
				fp8Roof, fp8Comp = append(fp8Roof, fp8T/decT), append(fp8Comp, fp8C/decT)
			}
			wB, kvB, fl = append(wB, sumW/float64(nDec)), append(kvB, sumKV/float64(nDec)), append(fl, sumF/float64(nDec))
		}
	}
	res.AvgLatency = mean(res.Latencies)
	var v float64
	for _, l := range res.Latencies {
		v += (l - res.AvgLatency) * (l - res.AvgLatency)
	}
	res.StdLatency = math.Sqrt(v / float64(len(res.Latencies)))
	res.Percentiles = map[string]float64{}
	for _, p := range []int{10, 25, 50, 75, 90, 99} {
		res.Percentiles[strconv.Itoa(p)] = percentile(res.Latencies, float64(p))
	}
	res.MeanTTFT, res.MeanTPOT = median(ttft), median(tpot)
	res.PrefillTokensPerS, res.DecodeTokensPerS, res.DecodeStepS, res.DecodeForwardS = median(pre), median(dec), median(decStep), median(decFwd)
	res.DecodeCollectiveS = median(decColl)
	res.DecodeSteps, res.PrefillSteps = int(median(decSteps)), int(median(preSteps))
	res.FMAPeakGFLOPS, res.ReadBandwidthGBPS = median(fma), median(bw)
	res.DecodeRooflineFraction, res.DecodeMemoryFraction, res.DecodeComputeFraction = median(roof), median(mem), median(comp)
	res.DecodeFP8RooflineFraction, res.DecodeFP8ComputeFraction = median(fp8Roof), median(fp8Comp)
	res.PrefillFMAFraction = median(preFMA)
	res.DecodeWeightBytes, res.DecodeKVBytes, res.DecodeFLOPs, res.PrefillFLOPs = median(wB), median(kvB), median(fl), median(preFl)
}

func mean(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// percentile is numpy.percentile's default (linear interpolation between
// the two nearest ranks).
func percentile(x []float64, p float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	r := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(r))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (r-float64(lo))*(s[hi]-s[lo])
}

// loadAverage is the host's one-minute load average (0 where /proc/loadavg
// cannot be read).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscanf(string(b), "%g", &l)
	return l
}

func newBenchLatencyCmd() *cobra.Command {
	var o latencyOptions
	cmd := &cobra.Command{
		Use:   "latency",
		Short: "Latency of one batch of requests through the engine, with vLLM's flags and result keys, and its roofline fractions",
		Long: `Generates --output-len tokens for --batch-size random prompts of --input-len tokens (ids
below 10000, the same prompts every iteration; temperature 1, end-of-sequence ignored, prefix
caching off unless --enable-prefix-caching) --num-iters times after --num-iters-warmup
iterations, and reports the batch's latency as vllm bench latency does (--output-json writes
avg_latency, std_latency, latencies and percentiles). It also reports time to first token, time
per output token, prefill and decode tokens/s, and for every iteration the decode steps'
roofline fraction — max(bytes read / read bandwidth, FLOPs / FMA peak) against their time —
and the prefill steps' fraction of the FMA peak, with the peak and the bandwidth measured right
before the iteration on the threads the ranks use (medians over the iterations). For a model
with fp8 weights it also reports the decode steps' fraction of the same roofline with the
cores' fp8 product rates, measured there too, as the fp8 products' compute ceiling: an exact
fp8 product multiplies every decoded weight by its block's scale on the FMA pipes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := o.preflight(); err != nil {
				return err
			}
			return runRanks(o.threadsPerRank, o.deployment(), cmd.ErrOrStderr(),
				func(procs *engine.Procs, procWeights int64) error {
					o.procs, o.procWeights = procs, procWeights
					res, err := benchLatency(o, cmd.ErrOrStderr())
					if err != nil || res == nil {
						return err
					}
					if o.outputJSON != "" {
						b, err := json.MarshalIndent(res, "", "    ")
						if err != nil {
							return err
						}
						if err := os.WriteFile(o.outputJSON, append(b, '\n'), 0o644); err != nil {
							return fmt.Errorf("--output-json: %w", err)
						}
					}
					return printLatency(cmd.OutOrStdout(), res, o.asJSON)
				})
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.inputLen, "input-len", 32, "prompt tokens per request")
	f.IntVar(&o.outputLen, "output-len", 128, "generated tokens per sequence (end-of-sequence is ignored)")
	f.IntVar(&o.batchSize, "batch-size", 8, "requests submitted together")
	f.IntVar(&o.n, "n", 1, "sequences generated per prompt")
	f.BoolVar(&o.useBeamSearch, "use-beam-search", false, "beam search (refused: not implemented)")
	f.IntVar(&o.warmup, "num-iters-warmup", 10, "iterations run before measuring")
	f.IntVar(&o.iters, "num-iters", 30, "iterations measured")
	f.BoolVar(&o.profile, "profile", false, "write a Go CPU profile of one iteration to --profile-file instead of measuring")
	f.StringVar(&o.profileFile, "profile-file", "latency.pprof", "file of the --profile CPU profile")
	f.StringVar(&o.outputJSON, "output-json", "", "write the results (vLLM's keys and the engine's) to this JSON file")
	f.BoolVar(&o.disableDetokenize, "disable-detokenize", false, "do not detokenize the outputs inside the measured time")
	f.BoolVar(&o.enablePrefixCaching, "enable-prefix-caching", false, "reuse cached prompt blocks across iterations (off, as in vLLM's latency benchmark)")
	f.Uint64Var(&o.seed, "seed", 0, "seed of the prompts and of sampling")
	f.BoolVar(&o.asJSON, "json", false, "print the results as JSON")

	o.addEngineFlags(cmd, config.DefaultPreset)
	f.IntVar(&o.engine.MaxNumSeqs, "max-num-seqs", 0, "sequences per step (0: the larger of 16 and --batch-size × --n)")
	f.IntVar(&o.engine.MaxModelLen, "max-model-len", 0, "longest request in tokens (0: --input-len + --output-len, rounded up to a block)")
	return cmd
}

// printLatency writes the results as vLLM prints them, then the engine's
// numbers (or everything as JSON).
func printLatency(out io.Writer, r *latencyResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(out, "Avg latency: %v seconds\n", r.AvgLatency)
	fmt.Fprintf(out, "Std latency: %v seconds\n", r.StdLatency)
	for _, p := range []string{"10", "25", "50", "75", "90", "99"} {
		fmt.Fprintf(out, "%s%% percentile latency: %v seconds\n", p, r.Percentiles[p])
	}
	fmt.Fprintf(out, "time to first token:    %.4f s (mean over requests, median over iterations)\n", r.MeanTTFT)
	fmt.Fprintf(out, "time per output token:  %.4f s\n", r.MeanTPOT)
	fmt.Fprintf(out, "prefill:                %.1f tokens/s, %.1f%% of the FMA peak\n", r.PrefillTokensPerS, 100*r.PrefillFMAFraction)
	fmt.Fprintf(out, "decode:                 %.1f tokens/s, %.4f s per step (forward %.4f s, collectives %.4f s), roofline %.1f%% (memory %.1f%%, compute %.1f%%)\n",
		r.DecodeTokensPerS, r.DecodeStepS, r.DecodeForwardS, r.DecodeCollectiveS, 100*r.DecodeRooflineFraction, 100*r.DecodeMemoryFraction, 100*r.DecodeComputeFraction)
	if r.fp8Weights {
		fmt.Fprintf(out, "decode, fp8 weights:    %.1f%% of the roofline at the cores' fp8 product rates (compute %.1f%%)\n", 100*r.DecodeFP8RooflineFraction, 100*r.DecodeFP8ComputeFraction)
	}
	fmt.Fprintf(out, "per decode step:        %s of weights, %s of KV and indexer keys, %.3g FLOPs\n",
		plan.FormatBytes(int64(r.DecodeWeightBytes)), plan.FormatBytes(int64(r.DecodeKVBytes)), r.DecodeFLOPs)
	fmt.Fprintf(out, "machine:                FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s on %d thread(s), %s kernels, load average %.1f → %.1f\n",
		r.FMAPeakGFLOPS, r.ReadBandwidthGBPS, r.Threads, r.Impl, r.LoadAverage[0], r.LoadAverage[1])
	return nil
}
