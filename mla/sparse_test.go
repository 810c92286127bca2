package mla

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSparseEqualsDense: when every key is selected (in any order) sparse
// attention is dense softmax attention over all keys.
func TestSparseEqualsDense(t *testing.T) {
	tests := []struct {
		name             string
		rows, heads, nkv int
		scale            float32
	}{
		{"glm5 scale one row", 1, 4, 37, 0.0625},
		{"v32 scale", 3, 8, 64, 0.1352337789},
		{"flashmla scale", 2, 64, 128, 0.5},
		{"single key", 2, 3, 1, 0.0625},
	}
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(k)))
			kv := DenseKV(randVec(rng, tc.nkv*RowDim))
			q := randVec(rng, tc.rows*tc.heads*RowDim)
			indices := make([]int32, tc.rows*tc.nkv)
			for r := range tc.rows {
				for j, p := range rng.Perm(tc.nkv) {
					indices[r*tc.nkv+j] = int32(p)
				}
			}
			all := make([]int32, tc.nkv)
			for i := range all {
				all[i] = int32(i)
			}
			var wantOut, wantLSE, wantMax []float64
			for r := range tc.rows {
				o, l, m := refSparseRow(q[r*tc.heads*RowDim:], tc.heads, kv, all, tc.scale)
				wantOut, wantLSE, wantMax = append(wantOut, o...), append(wantLSE, l...), append(wantMax, m...)
			}
			out := filled(tc.rows*tc.heads*LatentDim, float32(math.NaN()))
			lse := make([]float32, tc.rows*tc.heads)
			maxL := make([]float32, tc.rows*tc.heads)
			SparseAttention(out, lse, maxL, q, tc.rows, tc.heads, kv, indices, tc.nkv, nil, tc.scale, NewWorkspace(tc.nkv, tc.heads))
			diffF32(t, "out", toF32(wantOut), out, approx(1e-4, 1e-6))
			diffF32(t, "lse", toF32(wantLSE), lse, approx(1e-6, 1e-6))
			diffF32(t, "maxLogits", toF32(wantMax), maxL, approx(1e-6, 1e-6))
		})
	}
}

// TestSparseInvalidEntries: negative indices anywhere, topkLen cut-offs and
// rows without any key. Every slot that no valid entry names holds NaN, and
// the source counts reads, so touching an invalid entry fails twice over.
func TestSparseInvalidEntries(t *testing.T) {
	const heads, topk, nkv = 4, 8, 24
	negInf := float32(math.Inf(-1))
	tests := []struct {
		name    string
		indices [][]int32 // per row, topk entries
		topkLen []int32   // nil = all count
	}{
		{"minus one anywhere", [][]int32{
			{-1, 3, 7, -1, 2, 11, -1, 5},
			{4, 9, 1, 0, 6, 8, 10, -1},
			{-1, -1, -1, -1, -1, -1, -1, 12},
		}, nil},
		{"any negative is invalid", [][]int32{
			{math.MinInt32, 3, -123456, 7, -2, 1, -1, 5},
		}, nil},
		{"topkLen", [][]int32{
			{3, 7, 2, 11, 13, 14, 15, 16},  // only 4 count
			{-1, 4, -1, 9, 17, 18, 19, 20}, // 4 count, 2 of them valid
			{5, 6, 21, 22, 23, 0, 1, 2},    // none count
			{8, -1, 10, 12, -1, 1, -1, 0},  // topkLen > topk: all count
		}, []int32{4, 4, 0, 99}},
		{"all invalid", [][]int32{
			{-1, -1, -1, -1, -1, -1, -1, -1},
			{1, 2, 3, 4, 5, 6, 7, 8},
		}, []int32{8, -3}},
	}
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2, uint64(k)))
			rows := len(tc.indices)
			kv := DenseKV(filled(nkv*RowDim, float32(math.NaN())))
			src := &countingKV{kv: kv, reads: map[int32]int{}}
			var indices []int32
			valid := make([][]int32, rows)
			for r, row := range tc.indices {
				indices = append(indices, row...)
				lim := topk
				if tc.topkLen != nil {
					lim = max(0, min(topk, int(tc.topkLen[r])))
				}
				for _, s := range row[:lim] {
					if s >= 0 {
						valid[r] = append(valid[r], s)
						copy(kv[int(s)*RowDim:(int(s)+1)*RowDim], randVec(rng, RowDim))
					}
				}
			}
			q := randVec(rng, rows*heads*RowDim)
			var wantOut, wantLSE, wantMax []float64
			for r := range rows {
				o, l, m := refSparseRow(q[r*heads*RowDim:], heads, kv, valid[r], 0.0625)
				wantOut, wantLSE, wantMax = append(wantOut, o...), append(wantLSE, l...), append(wantMax, m...)
			}
			out := filled(rows*heads*LatentDim, float32(math.NaN()))
			lse := filled(rows*heads, float32(math.NaN()))
			maxL := filled(rows*heads, float32(math.NaN()))
			SparseAttention(out, lse, maxL, q, rows, heads, src, indices, topk, tc.topkLen, 0.0625, NewWorkspace(topk, heads))
			diffF32(t, "out", toF32(wantOut), out, approx(1e-4, 1e-6))
			diffF32(t, "lse", toF32(wantLSE), lse, approx(1e-6, 1e-6))
			diffF32(t, "maxLogits", toF32(wantMax), maxL, approx(1e-6, 1e-6))
			wantReads := map[int32]int{}
			for _, vs := range valid {
				for _, s := range vs {
					wantReads[s]++ // once per query row, not per head
				}
			}
			for s, n := range src.reads {
				if n != wantReads[s] {
					t.Errorf("slot %d read %d times, want %d", s, n, wantReads[s])
				}
			}
			for r := range rows {
				if len(valid[r]) == 0 && (lse[r*heads] != negInf || maxL[r*heads] != negInf) {
					t.Errorf("row %d without keys: lse %v, maxLogits %v, want −Inf", r, lse[r*heads], maxL[r*heads])
				}
			}
		})
	}
}

// TestSparseWorkspaceTooSmall: a workspace is never grown; an undersized one
// is refused with the sizes.
func TestSparseWorkspaceTooSmall(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("SparseAttention accepted a workspace for topk 4 with topk 8")
		}
	}()
	kv := DenseKV(make([]float32, 8*RowDim))
	SparseAttention(make([]float32, LatentDim), make([]float32, 1), nil, make([]float32, RowDim), 1, 1, kv,
		make([]int32, 8), 8, nil, 1, NewWorkspace(4, 1))
}
