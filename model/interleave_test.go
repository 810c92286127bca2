package model

import (
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
)

// TestInterleavedWeightsChangeNoBit builds the same bf16 or fp8 model
// twice, once under AVX-512 (Build interleaves its weights) and once under
// AVX2 (they stay row-major), and runs the same prefill and decodes of both
// under AVX-512 on one and two threads: every logit has the same bits. It
// also checks which matrices Build interleaved: every product weight whose
// shape (and, for fp8, block offsets) allows it, never the untied
// embedding.
func TestInterleavedWeightsChangeNoBit(t *testing.T) {
	if kernels.Impl() != "avx512" {
		t.Skip("Build interleaves bf16 and fp8 weights under the AVX-512 implementation only; this machine runs " + kernels.Impl())
	}
	for _, dtype := range []string{WeightBF16, WeightFP8} {
		t.Run(dtype, func(t *testing.T) { testInterleavedWeights(t, dtype) })
	}
}

func testInterleavedWeights(t *testing.T, dtype string) {
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = WithWeightDType(cfg, dtype); err != nil {
		t.Fatal(err)
	}
	build := func(impl string) *Model {
		prev, err := kernels.SetImpl(impl)
		if err != nil {
			t.Fatal(err)
		}
		defer kernels.SetImpl(prev)
		m, err := Build(cfg, RandomTensors(cfg, 5), Shard{TPSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ilv, rm := build("avx512"), build("avx2")
	count := func(m *Model) (n int) {
		for _, w := range m.matrices()[1:] {
			if w.Interleaved() {
				n++
			}
		}
		return n
	}
	if n := count(rm); n != 0 {
		t.Errorf("the model built under AVX2 has %d interleaved matrices, want 0", n)
	}
	if n := count(ilv); n == 0 {
		t.Error("the model built under AVX-512 has no interleaved matrix")
	}
	for _, hs := range ilv.headLists() {
		for i := range hs {
			if hs[i].Interleaved() != hs[0].Interleaved() {
				t.Errorf("head %d of a list of %d is interleaved %v, head 0 %v: one walk over all heads needs one layout", i, len(hs), hs[i].Interleaved(), hs[0].Interleaved())
			}
			// Interleaved fp8 heads lie one after another in one
			// allocation, the one stream their walk reads.
			if i > 0 && hs[i].FP8 != nil && hs[i].Interleaved() &&
				unsafe.Pointer(unsafe.SliceData(hs[i].FP8)) != unsafe.Add(unsafe.Pointer(unsafe.SliceData(hs[i-1].FP8)), len(hs[i-1].FP8)) {
				t.Errorf("interleaved fp8 head %d of a list of %d does not follow head %d in memory", i, len(hs), i-1)
			}
		}
	}
	for _, w := range ilv.matrices()[1:] {
		if !w.Interleaved() && w.BF16 != nil && w.Rows%8 == 0 && w.Cols%32 == 0 {
			t.Errorf("a bf16 [%d, %d] product weight was left row-major", w.Rows, w.Cols)
		}
		// Heads included: GLM-5's odd W_UKᵀ heads start 64 columns into
		// kv_b's blocks.
		if !w.Interleaved() && w.FP8 != nil && w.Rows%8 == 0 && w.Cols%16 == 0 && w.FP8Checked() && w.Scales.RowOff%8 == 0 && w.Scales.ColOff%16 == 0 {
			t.Errorf("an fp8 [%d, %d] product weight at block offsets (%d, %d) was left row-major", w.Rows, w.Cols, w.Scales.RowOff, w.Scales.ColOff)
		}
	}
	if ilv.Embed != ilv.LMHead && ilv.Embed.Interleaved() {
		t.Error("the untied embedding was interleaved; it only lends rows")
	}
	toks := make([]int32, 21)
	for i := range toks {
		toks[i] = int32(7 + 53*i)
	}
	run := func(m *Model, threads int) [][]float32 {
		defer kernels.SetThreads(kernels.SetThreads(threads))
		r, err := NewRunner(m, RunnerOptions{MaxTokens: 32, MaxModelLen: 32, MaxLogitRows: 2, MaxSeqs: 1, BlockSize: 8, NumBlocks: 4, KVDType: "bf16"})
		if err != nil {
			t.Fatal(err)
		}
		tab := []int32{0, 1, 2, 3}
		var out [][]float32
		mustForward(t, r, Seq{Tokens: toks[:19], BlockTable: tab})
		for i := 19; ; i++ {
			_, l := r.Logits(0)
			out = append(out, append([]float32(nil), l...))
			if i == len(toks) {
				return out
			}
			mustForward(t, r, Seq{Tokens: toks[i : i+1], Start: i, BlockTable: tab})
		}
	}
	for _, threads := range []int{1, 2} {
		want, got := run(rm, threads), run(ilv, threads)
		for i := range want {
			if d := cmp.Diff(f32Bits(want[i]), f32Bits(got[i])); d != "" {
				t.Errorf("%d threads, step %d: interleaved weights change the logits (-row-major +interleaved):\n%s", threads, i, d)
			}
		}
	}
}
