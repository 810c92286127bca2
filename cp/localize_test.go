package cp_test

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
)

// TestLocalizeRowsAndEmptyRows pins the two localization layouts and the
// empty-shard rule on a 2-rank, interleave-1 layout with an identity block
// table of block size 2: rank 1 owns the odd positions, position p at local
// index p/2, i.e. slot p/2.
func TestLocalizeRowsAndEmptyRows(t *testing.T) {
	l := kvcache.Layout{N: 2, I: 1}
	bt := []int32{0, 1, 2, 3}
	positions := []int32{
		5, 2, -1, 1, // row 0: odd positions 5 and 1 are rank 1's
		0, 2, 4, -1, // row 1: all on rank 0
	}
	for _, tc := range []struct {
		compact   bool
		wantSlots []int32
	}{
		{true, []int32{2, 0, -1, -1, -1, -1, -1, -1}},
		{false, []int32{2, -1, -1, 0, -1, -1, -1, -1}},
	} {
		slots := make([]int32, len(positions))
		valid := make([]int32, 2)
		if err := cp.LocalizeRows(l, 1, slots, valid, positions, 2, 4, [][]int32{bt}, []int32{0, 0}, 2, tc.compact); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([][]int32{tc.wantSlots, {2, 0}}, [][]int32{slots, valid}); diff != "" {
			t.Errorf("compact=%v (-want +got):\n%s", tc.compact, diff)
		}
	}
	// A kernel left +Inf and garbage in row 1, which has no local key.
	out := []float32{1, 2, 3, 4, 9, 9, 9, 9}
	lse := []float32{0.5, 0.25, float32(math.Inf(1)), float32(math.NaN())}
	cp.NeutralizeEmptyRows(out, lse, []int32{2, 0}, 2, 2, 2)
	negInf := float32(math.Inf(-1))
	if diff := cmp.Diff([][]float32{{1, 2, 3, 4, 0, 0, 0, 0}, {0.5, 0.25, negInf, negInf}}, [][]float32{out, lse}); diff != "" {
		t.Errorf("neutralized (-want +got):\n%s", diff)
	}
	if err := cp.LocalizeRows(l, 1, make([]int32, 8), make([]int32, 2), positions, 2, 4, [][]int32{bt}, []int32{0, 3}, 2, true); err == nil {
		t.Error("a row naming a missing block table was accepted")
	}
}
