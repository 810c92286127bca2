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
