package mla

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSparseAttention runs the absorbed sparse form at GLM-5 shapes
// (64 heads per rank, top-k 2048) and glm5-mini shapes (8 heads, top-k 16).
// FLOPs: 2·RowDim for the logit and 2·LatentDim for the value sum, per key,
// head and row.
func BenchmarkSparseAttention(b *testing.B) {
	for _, bc := range []struct {
		name              string
		rows, heads, topk int
	}{
		{"glm5/rows=1", 1, 64, 2048},
		{"glm5/rows=16", 16, 64, 2048},
		{"glm5-mini/rows=1", 1, 8, 16},
		{"glm5-mini/rows=16", 16, 8, 16},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(8, 0))
			nkv := 4 * bc.topk
			var kv KVSource = DenseKV(randVec(rng, nkv*RowDim))
			q := randVec(rng, bc.rows*bc.heads*RowDim)
			indices := make([]int32, bc.rows*bc.topk)
			for r := range bc.rows {
				for j, p := range rng.Perm(nkv)[:bc.topk] {
					indices[r*bc.topk+j] = int32(p)
				}
			}
			out := make([]float32, bc.rows*bc.heads*LatentDim)
			lse := make([]float32, bc.rows*bc.heads)
			ws := NewWorkspace(bc.topk, bc.heads)
			for b.Loop() {
				SparseAttention(out, lse, nil, q, bc.rows, bc.heads, kv, indices, bc.topk, nil, 0.0625, ws)
			}
			flops := float64(bc.rows*bc.heads*bc.topk) * (2*RowDim + 2*LatentDim)
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkIndexerScores scores queries against 8192 f32 keys of 128 values
// (GLM-5: 32 indexer heads). GB/s counts the key bytes read.
func BenchmarkIndexerScores(b *testing.B) {
	const nkeys, dim, heads = 8192, 128, 32
	for _, tq := range []int{1, 4} {
		b.Run(fmt.Sprintf("keys=%d/queries=%d", nkeys, tq), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(9, 0))
			var keys KeySource = DenseKeys{Dim: dim, Data: randVec(rng, nkeys*dim)}
			q := randVec(rng, tq*heads*dim)
			w := randVec(rng, tq*heads)
			slots := make([]int32, nkeys)
			ends := make([]int32, tq)
			for j := range slots {
				slots[j] = int32(j)
			}
			for i := range ends {
				ends[i] = nkeys - int32(tq) + int32(i) + 1
			}
			scores := make([]float32, tq*nkeys)
			for b.Loop() {
				IndexerScores(scores, q, w, tq, heads, dim, keys, slots, ends)
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(nkeys*dim*4)*float64(b.N)/sec/1e9, "GB/s")
			b.ReportMetric(float64(tq*heads*nkeys*2*dim)*float64(b.N)/sec/1e9, "GFLOP/s")
		})
	}
}
