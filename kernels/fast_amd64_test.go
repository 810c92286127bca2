package kernels

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTranspose16 checks the AVX-512 16×16 block transpose behind the
// transposed query against the index definition, with row strides wider
// than the block so that anything written outside it shows.
func TestTranspose16(t *testing.T) {
	if !supported(levelAVX512) {
		t.Skip("no AVX-512 on this CPU")
	}
	for _, tc := range []struct{ lds, ldd int }{{16, 16}, {576, 80}, {20, 33}} {
		t.Run(fmt.Sprintf("lds=%d ldd=%d", tc.lds, tc.ldd), func(t *testing.T) {
			src := randSlice(newRand(7), 16*tc.lds, 1)
			dst := make([]float32, 16*tc.ldd)
			want := make([]float32, len(dst))
			for i := range 16 {
				for k := range 16 {
					want[k*tc.ldd+i] = src[i*tc.lds+k]
				}
			}
			transpose16(&src[0], tc.lds, &dst[0], tc.ldd)
			if d := cmp.Diff(bitsOf(want), bitsOf(dst)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestScaleVec checks the vector scaling of the online softmax against one
// rounded product per value, on lengths with and without a tail.
func TestScaleVec(t *testing.T) {
	for _, n := range []int{0, 5, 16, 512, 519} {
		x := randSlice(newRand(uint64(n)), n, 3)
		want := make([]float32, n)
		for i, v := range x {
			want[i] = v * 0.3712
		}
		for _, l := range []level{levelRef, levelAVX2, levelAVX512} {
			if !supported(l) {
				continue
			}
			got := append([]float32(nil), x...)
			scaleVec(l, got, 0.3712)
			if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
				t.Errorf("n=%d %v (-want +got):\n%s", n, l, d)
			}
		}
	}
}

// BenchmarkAttendTiles runs the two AVX-512 tiles of one 128-row attention
// block at GLM-5 shapes (64 heads, 576/512) on rows that stay in L2, next to
// the FMA peak: the logit tiles from the transposed query (qkTileT) and the
// weighted-row tiles (axpyTile, 6 heads × 64 columns), and the transpose of
// the query the logit tiles read. GFLOP/s counts 2·heads·rows·576 and
// 2·heads·rows·512.
func BenchmarkAttendTiles(b *testing.B) {
	if !supported(levelAVX512) {
		b.Skip("no AVX-512 on this CPU")
	}
	const heads, dim, vdim, nr = 64, 576, 512, attendBlock
	r := newRand(33)
	rows := make([][]float32, nr)
	for j := range rows {
		rows[j] = randSlice(r, dim, 1)
	}
	t := &attendTask{q: randSlice(r, heads*dim, 0.05), heads: heads, dim: dim}
	defer SetThreads(SetThreads(1))
	t.transposeQuery()
	logits := make([]float32, heads*nr)
	b.Run("qkTileT", func(b *testing.B) {
		for b.Loop() {
			for j := 0; j < nr; j += 4 {
				qkTileT(&t.qT[0], t.ldqT, dim, &rows[j][0], &rows[j+1][0], &rows[j+2][0], &rows[j+3][0], &logits[j], nr, heads, 15, 0.0625)
			}
		}
		reportRate(b, 2*float64(heads*nr*dim), "GFLOP/s")
	})
	b.Run("transposeQuery", func(b *testing.B) {
		for b.Loop() {
			t.transposeQuery()
		}
	})
	out := make([]float32, heads*vdim)
	for i := range logits {
		logits[i] = 1.0 / nr
	}
	b.Run("axpyTile", func(b *testing.B) {
		for b.Loop() {
			for ht := 0; ht < heads; ht += 6 {
				for c0 := 0; c0 < vdim; c0 += 64 {
					axpyTile(levelAVX512, min(6, heads-ht), &out[ht*vdim+c0], vdim, &logits[ht*nr], nr, &rows[0], nr, c0)
				}
			}
		}
		reportRate(b, 2*float64(heads*nr*vdim), "GFLOP/s")
	})
}

// TestFP8ProbeCodes: the fp8 probes decode no subnormal code (whose denormal
// float32 costs a microcode assist on some cores), and every exponent of a
// normal code but the NaN codes' still occurs.
func TestFP8ProbeCodes(t *testing.T) {
	exps := map[uint8]bool{}
	for i, c := range fp8ProbeCodes() {
		if c&0x78 == 0 && c&0x07 != 0 {
			t.Errorf("code %d is %#x, subnormal", i, c)
		}
		exps[c>>3&0x0F] = true
	}
	for e := uint8(1); e < 16; e++ {
		if !exps[e] {
			t.Errorf("no code of exponent %d among %x", e, fp8ProbeCodes())
		}
	}
}
