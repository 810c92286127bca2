package model

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
)

// TestMixedBatchEqualsSeparateRuns runs a prefill chunk of one request and a
// decode of another in one step and compares each with the same request run
// alone: batching must not change any logit.
func TestMixedBatchEqualsSeparateRuns(t *testing.T) {
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Build(cfg, RandomTensors(cfg, 3), Shard{TPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	const B = 8
	newRunner := func() *Runner {
		r, err := NewRunner(m, RunnerOptions{MaxTokens: 40, MaxModelLen: 64, MaxLogitRows: 4, MaxSeqs: 2, BlockSize: B, NumBlocks: 16, KVDType: "bf16", IndexerDType: "fp8"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := make([]int32, 21) // request A: 21-token prompt, then one decode
	for i := range a {
		a[i] = int32(100 + 37*i)
	}
	bp := make([]int32, 30) // request B: prefill of 30 tokens in chunks 18 + 12
	for i := range bp {
		bp[i] = int32(5000 + 11*i)
	}
	tabA, tabB := []int32{0, 1, 2, 3}, []int32{7, 6, 5, 4}
	logitsOf := func(r *Runner, i int) []float32 {
		_, l := r.Logits(i)
		return append([]float32(nil), l...)
	}
	// Alone.
	ra := newRunner()
	mustForward(t, ra, Seq{Tokens: a[:20], BlockTable: tabA})
	mustForward(t, ra, Seq{Tokens: a[20:], Start: 20, BlockTable: tabA})
	wantA := logitsOf(ra, 0)
	rb := newRunner()
	mustForward(t, rb, Seq{Tokens: bp[:18], BlockTable: tabB})
	mustForward(t, rb, Seq{Tokens: bp[18:], Start: 18, BlockTable: tabB})
	wantB := logitsOf(rb, 0)
	// Together: step 1 prefills A and the first chunk of B; step 2 decodes A
	// and finishes B's prefill.
	r := newRunner()
	mustForward(t, r, Seq{Tokens: a[:20], BlockTable: tabA}, Seq{Tokens: bp[:18], BlockTable: tabB})
	mustForward(t, r, Seq{Tokens: a[20:], Start: 20, BlockTable: tabA}, Seq{Tokens: bp[18:], Start: 18, BlockTable: tabB})
	if r.NumLogitRows() != 2 {
		t.Fatalf("%d logit rows, want 2", r.NumLogitRows())
	}
	for i, want := range [][]float32{wantA, wantB} {
		got := logitsOf(r, i)
		maxd := 0.0
		for j := range got {
			maxd = math.Max(maxd, math.Abs(float64(got[j]-want[j])))
		}
		if maxd != 0 {
			t.Errorf("request %d: batched logits differ from the request run alone by up to %g", i, maxd)
		}
	}
}

func mustForward(t *testing.T, r *Runner, seqs ...Seq) {
	t.Helper()
	if err := r.Forward(&Batch{Seqs: seqs}); err != nil {
		t.Fatal(err)
	}
}

func TestForwardRefusesOversizedSteps(t *testing.T) {
	cfg, _ := config.Load("glm5-mini")
	m, err := Build(cfg, RandomTensors(cfg, 3), Shard{TPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(m, RunnerOptions{MaxTokens: 4, MaxModelLen: 16, MaxSeqs: 1, BlockSize: 4, NumBlocks: 4})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*Batch{
		"too many tokens":    {Seqs: []Seq{{Tokens: make([]int32, 5), BlockTable: []int32{0, 1}}}},
		"too many sequences": {Seqs: []Seq{{Tokens: []int32{1}, BlockTable: []int32{0}}, {Tokens: []int32{1}, BlockTable: []int32{1}}}},
		"beyond max len":     {Seqs: []Seq{{Tokens: []int32{1}, Start: 16, BlockTable: []int32{0, 1, 2, 3, 0}}}},
		"short block table":  {Seqs: []Seq{{Tokens: []int32{1, 2, 3}, Start: 3, BlockTable: []int32{0}}}},
		"token out of vocab": {Seqs: []Seq{{Tokens: []int32{int32(cfg.VocabSize)}, BlockTable: []int32{0}}}},
	} {
		if err := r.Forward(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestBuffersAccountEveryAllocation(t *testing.T) {
	cfg, _ := config.Load("glm5-mini")
	m, err := Build(cfg, RandomTensors(cfg, 3), Shard{TPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	small, err := NewRunner(m, RunnerOptions{MaxTokens: 8, MaxModelLen: 64, MaxSeqs: 2, MaxLogitRows: 2, BlockSize: 8, NumBlocks: 16})
	if err != nil {
		t.Fatal(err)
	}
	big, err := NewRunner(m, RunnerOptions{MaxTokens: 16, MaxModelLen: 64, MaxSeqs: 2, MaxLogitRows: 2, BlockSize: 8, NumBlocks: 16})
	if err != nil {
		t.Fatal(err)
	}
	// Logits dominate at glm5-mini's vocabulary: 2 rows × 129280 × 4 B.
	var logits int64
	for _, b := range small.Buffers() {
		if b.Name == "logits" {
			logits = b.Bytes
		}
	}
	if want := int64(2 * cfg.VocabSize * 4); logits != want {
		t.Errorf("logits buffer %d B, want %d", logits, want)
	}
	if big.BufferBytes() <= small.BufferBytes() {
		t.Errorf("doubling max tokens did not grow the buffers: %d vs %d B", big.BufferBytes(), small.BufferBytes())
	}
}

// TestForwardSameOnEveryThreadCount runs prefills, a decode of one sequence
// and a decode of two on one, two and three kernel threads: every logit has
// the same bits, and a sequence decoded alone equals it decoded next to
// another (on bf16 and fp8 weights).
func TestForwardSameOnEveryThreadCount(t *testing.T) {
	for _, weights := range []string{WeightBF16, WeightFP8} {
		t.Run(weights, func(t *testing.T) {
			cfg, err := config.Load("glm5-mini")
			if err != nil {
				t.Fatal(err)
			}
			if cfg, err = WithWeightDType(cfg, weights); err != nil {
				t.Fatal(err)
			}
			m, err := Build(cfg, RandomTensors(cfg, 5), Shard{TPSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			a, b := make([]int32, 19), make([]int32, 23)
			for i := range a {
				a[i] = int32(30 + 41*i)
			}
			for i := range b {
				b[i] = int32(900 + 13*i)
			}
			tabA, tabB := []int32{0, 1, 2, 3}, []int32{4, 5, 6, 7}
			// run returns the logits of: A's prefill, A decoded alone, then A
			// and B decoded together (B prefilled in between).
			run := func(threads int) [][]float32 {
				defer kernels.SetThreads(kernels.SetThreads(threads))
				r, err := NewRunner(m, RunnerOptions{MaxTokens: 32, MaxModelLen: 32, MaxLogitRows: 2, MaxSeqs: 2, BlockSize: 8, NumBlocks: 8, KVDType: "bf16"})
				if err != nil {
					t.Fatal(err)
				}
				var out [][]float32
				keep := func() {
					for i := range r.NumLogitRows() {
						_, l := r.Logits(i)
						out = append(out, append([]float32(nil), l...))
					}
				}
				mustForward(t, r, Seq{Tokens: a[:17], BlockTable: tabA})
				keep()
				mustForward(t, r, Seq{Tokens: a[17:18], Start: 17, BlockTable: tabA})
				keep()
				mustForward(t, r, Seq{Tokens: b[:22], BlockTable: tabB})
				mustForward(t, r, Seq{Tokens: a[18:19], Start: 18, BlockTable: tabA}, Seq{Tokens: b[22:23], Start: 22, BlockTable: tabB})
				keep()
				return out
			}
			want := run(1)
			if len(want) != 4 {
				t.Fatalf("%d logit rows, want 4", len(want))
			}
			for _, threads := range []int{2, 3} {
				got := run(threads)
				for i := range want {
					if d := cmp.Diff(f32Bits(want[i]), f32Bits(got[i])); d != "" {
						t.Errorf("logit row %d on %d threads differs from one thread (-1 +%d):\n%s", i, threads, threads, d)
					}
				}
			}
			// A's decode at position 18 alone, on a runner that saw the same steps.
			r, err := NewRunner(m, RunnerOptions{MaxTokens: 32, MaxModelLen: 32, MaxLogitRows: 2, MaxSeqs: 2, BlockSize: 8, NumBlocks: 8, KVDType: "bf16"})
			if err != nil {
				t.Fatal(err)
			}
			mustForward(t, r, Seq{Tokens: a[:18], BlockTable: tabA})
			mustForward(t, r, Seq{Tokens: a[18:19], Start: 18, BlockTable: tabA})
			_, alone := r.Logits(0)
			if d := cmp.Diff(f32Bits(want[2]), f32Bits(alone)); d != "" {
				t.Errorf("A's decode next to B differs from A decoded alone (-batch +alone):\n%s", d)
			}
		})
	}
}

func f32Bits(x []float32) []uint32 {
	b := make([]uint32, len(x))
	for i, v := range x {
		b[i] = math.Float32bits(v)
	}
	return b
}
