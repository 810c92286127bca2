package model

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
)

// stepCases are the models and weight dtypes of the step benchmarks.
var stepCases = []struct{ name, weights string }{
	{"glm5-dense-350m", WeightBF16}, {"glm5-dense-350m", WeightFP8},
	{"glm5-shape", WeightBF16}, {"glm5-shape", WeightFP8},
	{"glm5-moe-shape", WeightFP8},
}

// stepFP8UE8M0 is fp8 weights with DeepSeek's power-of-two block scales
// (quantization_config scale_fmt ue8m0) in place of GLM-5-FP8's float32
// ones, on which the one-row products take the activations prescaled by
// the scales (kernels.NewFP8Matrix). The step profiles run glm5-dense-350m
// so as well as the step benchmarks' cases (profileCases); their fp8
// columns still count the fp8 probe's rate with a multiply per code.
const stepFP8UE8M0 = "e4m3-ue8m0"

// BenchmarkStep times whole forward steps of the models docs/performance.md
// reports on — glm5-dense-350m and glm5-shape in bf16 and fp8 weights,
// glm5-moe-shape in fp8 — against the machine's rooflines measured on the
// same threads right before each case:
//
//	decode/ctx=C/batch=B  one decode step of B sequences holding C cached
//	                      tokens each (bf16 KV, f32 indexer keys; the KV
//	                      of one prompt, copied to every sequence);
//	prefill/len=L         a prompt of L tokens from position 0, in steps of
//	                      512 tokens (the engine's --max-num-batched-tokens).
//
// roofline is Σ max((weight + KV bytes) / read bandwidth, FLOPs / FMA peak)
// over the steps against their time, with the bytes and FLOPs of
// Runner.StepCost (routed experts only where selected); of-bw and of-fma
// are the two terms alone; of-parts is Runner.StepBound, the roofline taken
// part by part (each product, attention and indexer at its own limit, one
// after another), against the same time; for a model with fp8 weights,
// of-fp8-parts is the same with the fp8 product rates of
// kernels.FP8ProductLoop as a third limit of the fp8 products of up to
// eight rows (Limits.FP8), since on a CPU decoding the weights takes the
// same ports as the FMAs; fp8-roofline is the whole-step roofline with that
// third limit (Runner.StepRoofline): max(bytes / read bandwidth, compute),
// the compute term counting each such product at the larger of its FLOPs
// at the FMA peak and its weights at the fp8 rate. A case runs its steps
// in stepRounds rounds (a prefill case one prompt per round), each against the probes
// taken right before it, and reports the medians of the rounds. On a machine
// shared with other jobs the step gets only part of its cores while the
// short FMA probe sees them whole: of-fma-of-cpu is the FLOPs against the
// CPU time the process got per thread instead of the wall time (workers
// polling for their next part count as busy). The bandwidth probe, 256 MiB a
// pass, shares the memory system with the other jobs as the step does. The
// models are built one at a time (glm5-moe-shape takes a minute and 8 GiB);
// select with -bench, e.g.
//
//	go test ./model -run XXX -bench 'Step/glm5-dense-350m/bf16/threads=1/decode' -benchtime 20x
func BenchmarkStep(b *testing.B) {
	for _, mc := range stepCases {
		b.Run(mc.name+"/"+mc.weights, func(b *testing.B) {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
					defer kernels.SetThreads(kernels.SetThreads(threads))
					for _, ctx := range []int{512, 8192} {
						for _, batch := range []int{1, 8} {
							b.Run(fmt.Sprintf("decode/ctx=%d/batch=%d", ctx, batch), func(b *testing.B) {
								benchDecode(b, stepModel(b, mc.name, mc.weights), ctx, batch, threads)
							})
						}
					}
					for _, n := range []int{512, 4096} {
						b.Run(fmt.Sprintf("prefill/len=%d", n), func(b *testing.B) {
							benchPrefill(b, stepModel(b, mc.name, mc.weights), n, threads)
						})
					}
				})
			}
		})
	}
}

// stepModels holds the one model BenchmarkStep is on, and its decode
// runners by context, so that repeated runs of a case, other batch sizes
// and other thread counts decode on from where the previous one stopped
// instead of prefilling again.
var stepModels struct {
	key     string
	m       *Model
	runners map[int]*stepRun
}

type stepRun struct {
	r      *Runner
	tables [][]int32
	pos    int // next position of every sequence
	ctx    int
}

const (
	// stepRoom is how many decode positions a runner has past its context
	// before its sequences start over at the context.
	stepRoom = 256
	// stepBatch is the most sequences a decode case runs.
	stepBatch = 8
)

func stepModel(b *testing.B, name, weights string) *Model {
	key := name + "/" + weights
	if stepModels.key == key {
		return stepModels.m
	}
	if stepModels.m != nil {
		stepModels.m.Close()
		stepModels.m, stepModels.runners, stepModels.key = nil, nil, ""
	}
	cfg, err := config.Load(name)
	if err != nil {
		b.Fatal(err)
	}
	dtype := weights
	if weights == stepFP8UE8M0 {
		dtype = WeightFP8
	}
	if cfg, err = WithWeightDType(cfg, dtype); err != nil {
		b.Fatal(err)
	}
	if weights == stepFP8UE8M0 {
		cfg.Quantization.ScaleFmt = "ue8m0"
	}
	m, err := Build(cfg, RandomTensors(cfg, 1), Shard{})
	if err != nil {
		b.Fatal(err)
	}
	stepModels.key, stepModels.m, stepModels.runners = key, m, map[int]*stepRun{}
	return m
}

// stepTokens are the prompt tokens of the step benchmarks.
func stepTokens(vocab, start, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(((start+i)*7919 + 11) % vocab)
	}
	return t
}

// step runs one decode step of len(seqs) sequences at d.pos (toks holds
// their tokens) and moves d.pos on, back to d.ctx after stepRoom steps.
func (d *stepRun) step(b *testing.B, seqs []Seq, toks []int32) {
	vocab := d.r.M.Cfg.VocabSize
	for s := range seqs {
		toks[s] = int32((d.pos*31 + s) % vocab)
		seqs[s] = Seq{Tokens: toks[s : s+1], Start: d.pos, BlockTable: d.tables[s]}
	}
	if err := d.r.Forward(&Batch{Seqs: seqs}); err != nil {
		b.Fatal(err)
	}
	if d.pos++; d.pos == d.ctx+stepRoom {
		d.pos = d.ctx
	}
}

// decodeRunner returns the runner of stepBatch sequences holding ctx tokens
// each: the first sequence prefilled in 512-token steps (on every core, as
// set-up), its blocks copied to the others' (the same KV, computed once).
func decodeRunner(b *testing.B, m *Model, ctx int) *stepRun {
	if d := stepModels.runners[ctx]; d != nil {
		return d
	}
	const bs, chunk = 64, 512
	seqBlocks := (ctx + stepRoom + bs - 1) / bs
	r, err := NewRunner(m, RunnerOptions{MaxTokens: max(chunk, stepBatch), MaxModelLen: seqBlocks * bs, MaxLogitRows: stepBatch,
		MaxSeqs: stepBatch, BlockSize: bs, NumBlocks: stepBatch * seqBlocks, KVDType: "bf16"})
	if err != nil {
		b.Fatal(err)
	}
	d := &stepRun{r: r, pos: ctx, ctx: ctx}
	for s := range stepBatch {
		t := make([]int32, seqBlocks)
		for i := range t {
			t[i] = int32(s*seqBlocks + i)
		}
		d.tables = append(d.tables, t)
	}
	defer kernels.SetThreads(kernels.SetThreads(runtime.NumCPU()))
	for start := 0; start < ctx; start += chunk {
		toks := stepTokens(m.Cfg.VocabSize, start, min(chunk, ctx-start))
		if err := r.Forward(&Batch{Seqs: []Seq{{Tokens: toks, Start: start, BlockTable: d.tables[0]}}}); err != nil {
			b.Fatal(err)
		}
	}
	for s := 1; s < stepBatch; s++ {
		for i := 0; i < (ctx+bs-1)/bs; i++ {
			if err := r.Cache.CopyBlock(d.tables[s][i], d.tables[0][i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	stepModels.runners[ctx] = d
	return d
}

// machinePeaks measures the FMA peak (FLOP/s) and the read bandwidth
// (bytes/s) of threads threads running at once, as cpmla bench latency
// does: the best of five FMA runs and of three passes over 256 MiB.
func machinePeaks(threads int) (fma, bw float64) {
	fma = bestRate(threads, 5, func(int) float64 { return kernels.FMAPeakLoop(400_000) })
	buf := stepProbeBuf()
	per := len(buf) / threads
	for _, read := range kernels.ReadProbes {
		bw = max(bw, bestRate(threads, 3, func(i int) float64 {
			read(buf[i*per : (i+1)*per])
			return float64(4 * per)
		}))
	}
	return fma, bw
}

// bestRate runs probe on threads threads at once (thread i calls probe(i),
// which returns the work it did), runs times, and returns the most work per
// second of wall time of all threads together.
func bestRate(threads, runs int, probe func(thread int) float64) (best float64) {
	var wg sync.WaitGroup
	for range runs {
		work := make([]float64, threads)
		t0 := time.Now()
		for i := range threads {
			wg.Go(func() { work[i] = probe(i) })
		}
		wg.Wait()
		var total float64
		for _, w := range work {
			total += w
		}
		best = max(best, total/time.Since(t0).Seconds())
	}
	return best
}

// machineFP8 measures the fp8 product rates of threads threads running at
// once (kernels.FP8ProductLoop for each of kernels.FP8ProductRows, the best
// of three runs each), or none without the assembly probes.
func machineFP8(threads int) []FP8Rate {
	var rates []FP8Rate
	for _, rows := range kernels.FP8ProductRows {
		best := bestRate(threads, 3, func(int) float64 { return kernels.FP8ProductLoop(rows, 100_000) })
		if best == 0 {
			return nil
		}
		rates = append(rates, FP8Rate{Rows: rows, Codes: best})
	}
	return rates
}

var stepProbe struct {
	once sync.Once
	buf  []float32
}

func stepProbeBuf() []float32 {
	stepProbe.once.Do(func() {
		stepProbe.buf = make([]float32, 64<<20)
		for i := range stepProbe.buf {
			stepProbe.buf[i] = float32(i & 1023)
		}
	})
	return stepProbe.buf
}

// stepRounds is how many rounds a case's b.N steps are measured in, each
// against probes taken right before it; the reported numbers are the
// medians of the rounds.
const stepRounds = 5

// benchDecode times decode steps of batch sequences at context ctx, in
// stepRounds rounds.
func benchDecode(b *testing.B, m *Model, ctx, batch, threads int) {
	d := decodeRunner(b, m, ctx)
	seqs := make([]Seq, batch)
	toks := make([]int32, batch)
	var rate, roof, partsF, fp8F, fp8Roof, memF, compF, cpuFMA, bws, fmas []float64
	var cost StepCost
	hasFP8 := m.Cfg.Quantization != nil
	b.ResetTimer()
	for round := range stepRounds {
		steps := b.N/stepRounds + min(1, max(0, b.N%stepRounds-round))
		if steps == 0 {
			continue
		}
		b.StopTimer()
		runtime.GC() // finish a cycle the set-up's garbage started, not during the steps
		fma, bw := machinePeaks(threads)
		var fp8 []FP8Rate
		if hasFP8 {
			fp8 = machineFP8(threads)
		}
		l, lf := Limits{ReadBW: bw, FMAPeak: fma}, Limits{ReadBW: bw, FMAPeak: fma, FP8: fp8}
		b.StartTimer()
		var rt, pt, ft, frt, mt, ct float64
		t0, cpu0 := time.Now(), processCPUSeconds()
		for range steps {
			d.step(b, seqs, toks)
			c := d.r.StepCost()
			m, f := float64(c.WeightBytes+c.KVBytes)/bw, float64(c.FLOPs)/fma
			rt, mt, ct = rt+max(m, f), mt+m, ct+f
			pt, ft, frt = pt+d.r.StepBound(l), ft+d.r.StepBound(lf), frt+d.r.StepRoofline(lf)
			cost = c
		}
		el, cpu := time.Since(t0).Seconds(), processCPUSeconds()-cpu0
		rate, roof, memF, compF = append(rate, float64(batch*steps)/el), append(roof, rt/el), append(memF, mt/el), append(compF, ct/el)
		partsF, fp8F, fp8Roof = append(partsF, pt/el), append(fp8F, ft/el), append(fp8Roof, frt/el)
		if cpu > 0 {
			cpuFMA = append(cpuFMA, ct/(cpu/float64(threads)))
		}
		bws, fmas = append(bws, bw), append(fmas, fma)
	}
	b.StopTimer()
	b.ReportMetric(medianOf(rate), "tokens/s")
	b.ReportMetric(medianOf(roof), "roofline")
	b.ReportMetric(medianOf(partsF), "of-parts")
	if hasFP8 {
		b.ReportMetric(medianOf(fp8F), "of-fp8-parts")
		b.ReportMetric(medianOf(fp8Roof), "fp8-roofline")
	}
	b.ReportMetric(medianOf(memF), "of-bw")
	b.ReportMetric(medianOf(compF), "of-fma")
	if len(cpuFMA) > 0 {
		b.ReportMetric(medianOf(cpuFMA), "of-fma-of-cpu")
	}
	b.ReportMetric(float64(cost.WeightBytes+cost.KVBytes)/1e6, "MB/step")
	b.ReportMetric(float64(cost.FLOPs)/1e9, "GFLOP/step")
	b.ReportMetric(medianOf(bws)/1e9, "bw-GB/s")
	b.ReportMetric(medianOf(fmas)/1e9, "fma-GFLOP/s")
}

// prefillChunk is the tokens of one step of a benchmark's prompt (the
// engine's --max-num-batched-tokens).
const prefillChunk = 512

// promptRun is a prefill benchmark's runner for a prompt of n tokens from
// position 0 of one sequence (bf16 KV in blocks of 64), the sequence's
// block table and the prompt.
type promptRun struct {
	r           *Runner
	table, toks []int32
}

func newPromptRun(b *testing.B, m *Model, n int) *promptRun {
	const bs = 64
	r, err := NewRunner(m, RunnerOptions{MaxTokens: prefillChunk, MaxModelLen: n, MaxSeqs: 1, BlockSize: bs, NumBlocks: (n + bs - 1) / bs, KVDType: "bf16"})
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int32, (n+bs-1)/bs)
	for i := range table {
		table[i] = int32(i)
	}
	return &promptRun{r: r, table: table, toks: stepTokens(m.Cfg.VocabSize, 0, n)}
}

// prefill runs the prompt in steps of prefillChunk tokens, calling after
// each step (nil for none).
func (p *promptRun) prefill(b *testing.B, after func()) {
	n := len(p.toks)
	for start := 0; start < n; start += prefillChunk {
		if err := p.r.Forward(&Batch{Seqs: []Seq{{Tokens: p.toks[start:min(n, start+prefillChunk)], Start: start, BlockTable: p.table}}}); err != nil {
			b.Fatal(err)
		}
		if after != nil {
			after()
		}
	}
}

// benchPrefill times prompts of n tokens, each from position 0 of one
// sequence in 512-token steps, each prompt a round against the FMA peak
// measured right before it.
func benchPrefill(b *testing.B, m *Model, n, threads int) {
	p := newPromptRun(b, m, n)
	var rate, frac, cpuFrac, fmas []float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		runtime.GC() // finish a cycle the set-up's garbage started, not during the prompt
		fma, _ := machinePeaks(threads)
		b.StartTimer()
		var flops float64
		t0, cpu0 := time.Now(), processCPUSeconds()
		p.prefill(b, func() { flops += float64(p.r.StepCost().FLOPs) })
		el, cpu := time.Since(t0).Seconds(), processCPUSeconds()-cpu0
		rate, frac, fmas = append(rate, float64(n)/el), append(frac, flops/el/fma), append(fmas, fma)
		if cpu > 0 {
			cpuFrac = append(cpuFrac, flops/(cpu/float64(threads))/fma)
		}
	}
	b.StopTimer()
	b.ReportMetric(medianOf(rate), "tokens/s")
	b.ReportMetric(medianOf(frac), "of-fma")
	if len(cpuFrac) > 0 {
		b.ReportMetric(medianOf(cpuFrac), "of-fma-of-cpu")
	}
	b.ReportMetric(medianOf(fmas)/1e9, "fma-GFLOP/s")
}

func medianOf(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkLongContextDecode times one-sequence decode steps of glm5-shape
// (bf16 weights, one thread) at 2 Ki, 8 Ki and 32 Ki tokens of context,
// where the indexer scores every cached key but attention reads only its
// top-k (2048) rows, so the step's growth past 2 Ki is the indexer's alone.
// The split of a step between weights, indexer and attention is read from
// a CPU profile of one case (docs/performance.md), e.g.
//
//	go test ./model -run XXX -bench 'LongContextDecode/ctx=32768' -benchtime 20x -cpuprofile /tmp/long.pprof
func BenchmarkLongContextDecode(b *testing.B) {
	defer kernels.SetThreads(kernels.SetThreads(1))
	for _, ctx := range []int{2048, 8192, 32768} {
		b.Run(fmt.Sprintf("ctx=%d", ctx), func(b *testing.B) {
			benchDecode(b, stepModel(b, "glm5-shape", WeightBF16), ctx, 1, 1)
		})
	}
}
