package model

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/safetensors"
)

// The glm5-moe-shape benchmarks build the preset's 8 GiB of fp8 weights
// (random, or the checkpoint directory CPMLA_MOE_SHAPE_DIR written by
// `cpmla model init --preset glm5-moe-shape --weight-dtype fp8`), so they
// take a minute to set up; `go test -bench MoEShape -benchtime 5x ./model`.

var moeShape struct {
	once sync.Once
	m    *Model
	err  error
}

func moeShapeModel(b *testing.B) *Model {
	moeShape.once.Do(func() {
		var cfg *config.Model
		var src TensorSource
		if dir := os.Getenv("CPMLA_MOE_SHAPE_DIR"); dir != "" {
			if cfg, moeShape.err = config.Load(dir); moeShape.err != nil {
				return
			}
			var ck *safetensors.Checkpoint
			if ck, moeShape.err = safetensors.OpenDir(dir); moeShape.err != nil {
				return
			}
			src = ck
		} else {
			if cfg, moeShape.err = config.Load("glm5-moe-shape"); moeShape.err != nil {
				return
			}
			if cfg, moeShape.err = WithWeightDType(cfg, WeightFP8); moeShape.err != nil {
				return
			}
			src = RandomTensors(cfg, 1)
		}
		moeShape.m, moeShape.err = Build(cfg, src, Shard{})
	})
	if moeShape.err != nil {
		b.Fatal(moeShape.err)
	}
	return moeShape.m
}

// activeBytes is what one decode token must read of a checkpoint of cfg:
// every tensor but the routed experts, num_experts_per_tok of every routed
// layer's experts, one embedding row; the MTP layer not at all.
func activeBytes(b *testing.B, cfg *config.Model) int64 {
	in, err := Inspect(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for part, c := range in.ByPart {
		switch part {
		case PartMTP:
		case PartExperts:
			n += c.Bytes * int64(cfg.NumExpertsPerTok) / int64(cfg.NRoutedExperts)
		case PartEmbedding:
			// The LM head is read whole; of the embedding only one row.
			head := int64(cfg.VocabSize) * int64(cfg.HiddenSize) * 2
			n += head + int64(cfg.HiddenSize)*2
		default:
			n += c.Bytes
		}
	}
	return n
}

// readBandwidth is this core's read bandwidth in bytes/s (the fastest of
// kernels.ReadProbes over 256 MiB, best of three each).
func readBandwidth() float64 {
	buf := make([]float32, 64<<20)
	for i := range buf {
		buf[i] = 1
	}
	best := 0.0
	for _, read := range kernels.ReadProbes {
		for range 3 {
			t := time.Now()
			read(buf)
			best = max(best, float64(len(buf)*4)/time.Since(t).Seconds())
		}
	}
	return best
}

// BenchmarkMoEShapeDecode times one decode step of glm5-moe-shape at batch
// 1 after a 512-token prompt and reports the weight bytes it read (the
// engine's own count, StepWeightBytes) against what the active parts weigh
// (attention, dense MLP, router, shared expert, the 8 selected experts of
// each routed layer, the LM head, one embedding row), and the bandwidth the
// step time implies against the read-bandwidth probe of the same run.
func BenchmarkMoEShapeDecode(b *testing.B) {
	m := moeShapeModel(b)
	cfg := m.Cfg
	const prompt = 512
	r, err := NewRunner(m, RunnerOptions{MaxTokens: prompt, MaxModelLen: 1024, MaxSeqs: 1, BlockSize: 64, NumBlocks: 16})
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int32, 16)
	for i := range table {
		table[i] = int32(i)
	}
	toks := make([]int32, prompt)
	for i := range toks {
		toks[i] = int32((i*7919 + 11) % cfg.VocabSize)
	}
	if err := r.Forward(&Batch{Seqs: []Seq{{Tokens: toks, BlockTable: table}}}); err != nil {
		b.Fatal(err)
	}
	want := activeBytes(b, cfg)
	bw := readBandwidth()
	pos := prompt
	var read int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok := int32((pos * 31) % cfg.VocabSize)
		if err := r.Forward(&Batch{Seqs: []Seq{{Tokens: []int32{tok}, Start: pos, BlockTable: table}}}); err != nil {
			b.Fatal(err)
		}
		read += r.StepWeightBytes()
		pos = min(pos+1, 1023)
	}
	b.StopTimer()
	perTok := float64(read) / float64(b.N)
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perTok/1e6, "MB-read/token")
	b.ReportMetric(float64(want)/1e6, "MB-active/token")
	b.ReportMetric(perTok/float64(want), "read/active")
	b.ReportMetric(perTok/sec/1e9, "GB/s")
	b.ReportMetric(perTok/sec/bw, "of-read-bandwidth")
}

// BenchmarkMoEShapePrefill times a 512-token prefill step of
// glm5-moe-shape and reports how many expert products it ran per routed
// layer (each active expert at most once) against the routed experts.
func BenchmarkMoEShapePrefill(b *testing.B) {
	m := moeShapeModel(b)
	cfg := m.Cfg
	const prompt = 512
	r, err := NewRunner(m, RunnerOptions{MaxTokens: prompt, MaxModelLen: 1024, MaxSeqs: 1, BlockSize: 64, NumBlocks: 16})
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int32, 16)
	for i := range table {
		table[i] = int32(i)
	}
	toks := make([]int32, prompt)
	for i := range toks {
		toks[i] = int32((i*7919 + 11) % cfg.VocabSize)
	}
	routed := 0
	for i := 0; i < cfg.NumLayers; i++ {
		if cfg.Routed(i) {
			routed++
		}
	}
	calls0 := r.moe.expertCalls
	var read int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := r.Forward(&Batch{Seqs: []Seq{{Tokens: toks, BlockTable: table}}}); err != nil {
			b.Fatal(err)
		}
		read += r.StepWeightBytes()
	}
	b.StopTimer()
	calls := float64(r.moe.expertCalls-calls0) / float64(b.N) / float64(routed)
	b.ReportMetric(calls, "expert-products/layer")
	b.ReportMetric(float64(cfg.NRoutedExperts), "experts/layer")
	b.ReportMetric(float64(read)/float64(b.N)/1e9, "GB-read/step")
	b.ReportMetric(prompt/(b.Elapsed().Seconds()/float64(b.N)), "tokens/s")
}
