package model

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// publishedAL is the mean acceptance length (tokens a verification
// yields, the target's own token included) published for GLM-5-class MTP at
// K drafts: K = 1 GLM-5-FP8 after its lm_head fix (vllm#34385), K = 3
// GLM-5 MTP3 (vllm-ascend#9803), K = 5 GLM-5.2 MTP5 (sglang#39215).
var publishedAL = map[int]float64{1: 1.95, 3: 3.28, 5: 3.61}

// BenchmarkMoEShapeSpec times the parts of an MTP speculative round on
// glm5-moe-shape at batch 1 after a 512-token prompt — a plain decode step,
// a verification over 1 + K rows for K = 1, 3, 5, and draft steps over 1 to
// 6 rows — interleaved within every iteration, and reports medians of the
// iterations (so the ratios come from one run on a noisy machine):
//
//   - verifyK/decode: the time of a verification against a decode step
//     (with each active expert's weights read once per step, far below
//     1 + K), and the weight bytes each read;
//   - tok/s-K: the tokens per second a round of K drafts gives at the
//     published acceptance length AL(K): AL / (verify(K) + draft pass over
//     AL rows + (K − 1) chained draft steps), against plain decoding's
//     1/decode (tok/s-plain).
//
// `CPMLA_MOE_SHAPE_DIR=DIR go test ./model -run XXX -bench MoEShapeSpec -benchtime 7x`
// (DIR from `cpmla model init --preset glm5-moe-shape --weight-dtype fp8`;
// without it the weights are generated, which takes longer).
func BenchmarkMoEShapeSpec(b *testing.B) {
	m := moeShapeModel(b)
	cfg := m.Cfg
	const prompt, maxK, maxDraft = 512, 5, 6
	r, err := NewRunner(m, RunnerOptions{MaxTokens: prompt, MaxModelLen: 1024, MaxSeqs: 1, MaxLogitRows: 1 + maxK,
		BlockSize: 64, NumBlocks: 16, MTP: true})
	if err != nil {
		b.Fatal(err)
	}
	table := make([]int32, 16)
	for i := range table {
		table[i] = int32(i)
	}
	toks := make([]int32, prompt+maxDraft+1)
	for i := range toks {
		toks[i] = int32((i*7919 + 11) % cfg.VocabSize)
	}
	if err := r.Forward(&Batch{Seqs: []Seq{{Tokens: toks[:prompt], BlockTable: table}}}); err != nil {
		b.Fatal(err)
	}
	hidden := []int32{0, 1, 2, 3, 4, 5}
	// Each op times its own step.
	type op struct {
		name string
		run  func() (time.Duration, error)
	}
	timed := func(f func() error) (time.Duration, error) {
		start := time.Now()
		err := f()
		return time.Since(start), err
	}
	ops := []op{{"decode", func() (time.Duration, error) {
		return timed(func() error {
			return r.Forward(&Batch{Seqs: []Seq{{Tokens: toks[prompt : prompt+1], Start: prompt, BlockTable: table}}})
		})
	}}}
	for _, k := range []int{1, 3, 5} {
		ops = append(ops, op{fmt.Sprintf("verify%d", k), func() (time.Duration, error) {
			return timed(func() error {
				return r.Forward(&Batch{Seqs: []Seq{{Tokens: toks[prompt : prompt+1+k], Start: prompt, BlockTable: table, LogitsAll: true}}})
			})
		}})
	}
	for n := 1; n <= maxDraft; n++ {
		// A draft step reads the hidden states of the verification before
		// it (rows 0 … n−1 of the 1 + 5 rows of verify5, run just before).
		ops = append(ops, op{fmt.Sprintf("draft%d", n), func() (time.Duration, error) {
			if err := r.Forward(&Batch{Seqs: []Seq{{Tokens: toks[prompt : prompt+1+maxK], Start: prompt, BlockTable: table, LogitsAll: true}}}); err != nil {
				return 0, err
			}
			return timed(func() error {
				return r.Draft(0, &Batch{Seqs: []Seq{{Tokens: toks[prompt+1 : prompt+1+n], Start: prompt, BlockTable: table, Hidden: hidden[:n]}}}, TargetBank)
			})
		}})
	}
	times := make(map[string][]float64, len(ops))
	bytes := make(map[string]int64, len(ops))
	for _, o := range ops { // warm-up: every shape once
		if _, err := o.run(); err != nil {
			b.Fatalf("%s: %v", o.name, err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, o := range ops {
			d, err := o.run()
			if err != nil {
				b.Fatalf("%s: %v", o.name, err)
			}
			times[o.name] = append(times[o.name], d.Seconds())
			bytes[o.name] = r.StepWeightBytes()
		}
	}
	b.StopTimer()
	med := func(name string) float64 {
		v := slices.Clone(times[name])
		slices.Sort(v)
		return v[len(v)/2]
	}
	decode := med("decode")
	b.ReportMetric(decode*1e3, "decode-ms")
	b.ReportMetric(1/decode, "tok/s-plain")
	b.ReportMetric(med("draft1")/decode, "draft1/decode")
	for _, k := range []int{1, 3, 5} {
		v := fmt.Sprintf("verify%d", k)
		b.ReportMetric(med(v)/decode, v+"/decode")
		b.ReportMetric(float64(bytes[v])/float64(bytes["decode"]), v+"-bytes/decode")
		al := publishedAL[k]
		pass := med(fmt.Sprintf("draft%d", min(int(al+0.5), maxDraft)))
		round := med(v) + pass + float64(k-1)*med("draft1")
		b.ReportMetric(al/round, fmt.Sprintf("tok/s-K%d", k))
	}
}
