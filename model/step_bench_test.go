package model

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
)

// BenchmarkStep times whole forward steps of the models docs/performance.md
// reports on — glm5-dense-350m and glm5-shape in bf16 and fp8 weights,
// glm5-moe-shape in fp8 — against the machine's rooflines measured on the
// same threads right before each case:
//
//	decode/ctx=C/batch=B  one decode step of B sequences holding C cached
//	                      tokens each (bf16 KV, f32 indexer keys);
//	prefill/len=L         a prompt of L tokens from position 0, in steps of
//	                      512 tokens (the engine's --max-num-batched-tokens).
//
// roofline is Σ max((weight + KV bytes) / read bandwidth, FLOPs / FMA peak)
// over the steps against their time, with the bytes and FLOPs of
// Runner.StepCost (routed experts only where selected); of-fma is the FLOPs
// over the time against the FMA peak. The models are built one at a time
// (glm5-moe-shape takes a minute and 8 GiB); select with -bench, e.g.
//
//	go test ./model -run XXX -bench 'Step/glm5-dense-350m/bf16/threads=1/decode' -benchtime 20x
func BenchmarkStep(b *testing.B) {
	for _, mc := range []struct{ name, weights string }{
		{"glm5-dense-350m", WeightBF16}, {"glm5-dense-350m", WeightFP8},
		{"glm5-shape", WeightBF16}, {"glm5-shape", WeightFP8},
		{"glm5-moe-shape", WeightFP8},
	} {
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

// stepModels holds the one model BenchmarkStep is on, and its runners by
// context and batch, so that repeated runs of a case decode on from where
// the previous one stopped instead of prefilling again.
var stepModels struct {
	key     string
	m       *Model
	runners map[[2]int]*stepRun
}

type stepRun struct {
	r      *Runner
	tables [][]int32
	pos    int // next position of every sequence
	ctx    int
}

// stepRoom is how many decode positions a runner has past its context
// before its sequences start over at the context.
const stepRoom = 256

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
	if cfg, err = WithWeightDType(cfg, weights); err != nil {
		b.Fatal(err)
	}
	m, err := Build(cfg, RandomTensors(cfg, 1), Shard{})
	if err != nil {
		b.Fatal(err)
	}
	stepModels.key, stepModels.m, stepModels.runners = key, m, map[[2]int]*stepRun{}
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

// decodeRunner returns the runner of batch sequences holding ctx tokens
// each: the first sequence prefilled in 512-token steps, its blocks copied
// to the others' (the same KV, computed once).
func decodeRunner(b *testing.B, m *Model, ctx, batch int) *stepRun {
	key := [2]int{ctx, batch}
	if d := stepModels.runners[key]; d != nil {
		return d
	}
	// A runner at most: free the others' caches first.
	clear(stepModels.runners)
	const bs, chunk = 64, 512
	seqBlocks := (ctx + stepRoom + bs - 1) / bs
	r, err := NewRunner(m, RunnerOptions{MaxTokens: max(chunk, batch), MaxModelLen: seqBlocks * bs, MaxLogitRows: batch,
		MaxSeqs: batch, BlockSize: bs, NumBlocks: batch * seqBlocks, KVDType: "bf16"})
	if err != nil {
		b.Fatal(err)
	}
	d := &stepRun{r: r, pos: ctx, ctx: ctx}
	for s := range batch {
		t := make([]int32, seqBlocks)
		for i := range t {
			t[i] = int32(s*seqBlocks + i)
		}
		d.tables = append(d.tables, t)
	}
	for start := 0; start < ctx; start += chunk {
		toks := stepTokens(m.Cfg.VocabSize, start, min(chunk, ctx-start))
		if err := r.Forward(&Batch{Seqs: []Seq{{Tokens: toks, Start: start, BlockTable: d.tables[0]}}}); err != nil {
			b.Fatal(err)
		}
	}
	for s := 1; s < batch; s++ {
		for i := 0; i < (ctx+bs-1)/bs; i++ {
			if err := r.Cache.CopyBlock(d.tables[s][i], d.tables[0][i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	stepModels.runners[key] = d
	return d
}

// machinePeaks measures the FMA peak (FLOP/s) and the read bandwidth
// (bytes/s) of threads threads running at once, as cpmla bench latency
// does: the best of five FMA runs and of three passes over 256 MiB.
func machinePeaks(threads int) (fma, bw float64) {
	var wg sync.WaitGroup
	for range 5 {
		flops := make([]float64, threads)
		t0 := time.Now()
		for i := range threads {
			wg.Go(func() { flops[i] = kernels.FMAPeakLoop(400_000) })
		}
		wg.Wait()
		var total float64
		for _, f := range flops {
			total += f
		}
		fma = max(fma, total/time.Since(t0).Seconds())
	}
	buf := stepProbeBuf()
	per := len(buf) / threads
	for range 3 {
		t0 := time.Now()
		for i := range threads {
			wg.Go(func() { kernels.StreamSum(buf[i*per : (i+1)*per]) })
		}
		wg.Wait()
		bw = max(bw, float64(4*per*threads)/time.Since(t0).Seconds())
	}
	return fma, bw
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

// benchDecode times decode steps of batch sequences at context ctx.
func benchDecode(b *testing.B, m *Model, ctx, batch, threads int) {
	d := decodeRunner(b, m, ctx, batch)
	vocab := m.Cfg.VocabSize
	seqs := make([]Seq, batch)
	toks := make([]int32, batch)
	fma, bw := machinePeaks(threads)
	var roof, memT, compT float64
	var cost StepCost
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for s := range seqs {
			toks[s] = int32((d.pos*31 + s) % vocab)
			seqs[s] = Seq{Tokens: toks[s : s+1], Start: d.pos, BlockTable: d.tables[s]}
		}
		if err := d.r.Forward(&Batch{Seqs: seqs}); err != nil {
			b.Fatal(err)
		}
		c := d.r.StepCost()
		mt, ct := float64(c.WeightBytes+c.KVBytes)/bw, float64(c.FLOPs)/fma
		roof, memT, compT = roof+max(mt, ct), memT+mt, compT+ct
		cost = c
		if d.pos++; d.pos == d.ctx+stepRoom {
			d.pos = d.ctx
		}
	}
	b.StopTimer()
	el := b.Elapsed().Seconds()
	b.ReportMetric(float64(batch*b.N)/el, "tokens/s")
	b.ReportMetric(roof/el, "roofline")
	b.ReportMetric(memT/el, "of-bw")
	b.ReportMetric(compT/el, "of-fma")
	b.ReportMetric(float64(cost.WeightBytes+cost.KVBytes)/1e6, "MB/step")
	b.ReportMetric(float64(cost.FLOPs)/1e9, "GFLOP/step")
	b.ReportMetric(bw/1e9, "bw-GB/s")
	b.ReportMetric(fma/1e9, "fma-GFLOP/s")
}

// benchPrefill times prompts of n tokens, each from position 0 of one
// sequence in 512-token steps.
func benchPrefill(b *testing.B, m *Model, n, threads int) {
	const bs, chunk = 64, 512
	clear(stepModels.runners)
	r, err := NewRunner(m, RunnerOptions{MaxTokens: chunk, MaxModelLen: n, MaxSeqs: 1, BlockSize: bs, NumBlocks: (n + bs - 1) / bs, KVDType: "bf16"})
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int32, (n+bs-1)/bs)
	for i := range table {
		table[i] = int32(i)
	}
	toks := stepTokens(m.Cfg.VocabSize, 0, n)
	fma, _ := machinePeaks(threads)
	var flops float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for start := 0; start < n; start += chunk {
			if err := r.Forward(&Batch{Seqs: []Seq{{Tokens: toks[start:min(n, start+chunk)], Start: start, BlockTable: table}}}); err != nil {
				b.Fatal(err)
			}
			flops += float64(r.StepCost().FLOPs)
		}
	}
	b.StopTimer()
	el := b.Elapsed().Seconds()
	b.ReportMetric(float64(n*b.N)/el, "tokens/s")
	b.ReportMetric(flops/el/fma, "of-fma")
	b.ReportMetric(fma/1e9, "fma-GFLOP/s")
}
