package mla

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/cpmla/cpmla/kernels"
)

// BenchmarkSparseAttention runs the absorbed sparse form at GLM-5 shapes
// (64 heads per rank, top-k 2048), glm5-mini shapes (8 heads, top-k 16)
// and a prompt's 64 rows of glm5-dense-350m (16 heads, top-k 2048) over f32
// rows, bf16 rows read in place and rows a source decodes (bf16 widened
// into the kernel's scratch a block at a time, as a quantized cache's are).
// The rows are picked from a cache of four times top-k rows, which stays in
// L3 at these sizes, except in the cases named "from-memory": eight decode
// rows of glm5-dense-350m and of GLM-5 gathering their bf16 rows from a
// cache of 64 times top-k (151 MB), as a batch-8 decode step at long
// context does. FLOPs: 2·RowDim for the logit and 2·LatentDim for the value
// sum, per key, head and row. The kernels run on one thread unless the name
// says two.
func BenchmarkSparseAttention(b *testing.B) {
	type benchCase struct {
		name                       string
		rows, heads, topk, threads int
		rowsKind                   string
		cacheRows                  int // the cache's rows in units of topk
	}
	cases := []benchCase{
		{"glm5/rows=1", 1, 64, 2048, 1, "f32", 4},
		{"glm5/rows=16", 16, 64, 2048, 1, "f32", 4},
		{"glm5-mini/rows=1", 1, 8, 16, 1, "f32", 4},
		{"glm5-mini/rows=16", 16, 8, 16, 1, "f32", 4},
	}
	for _, keys := range []int{512, 2048} {
		for _, kind := range []string{"f32", "bf16", "decoded"} {
			for _, threads := range []int{1, 2} {
				cases = append(cases, benchCase{fmt.Sprintf("glm5-dense-350m/keys=%d/rows=64/%s/threads=%d", keys, kind, threads), 64, 16, keys, threads, kind, 4})
			}
		}
	}
	for _, cache := range []int{4, 64} {
		where := "in-cache"
		if cache > 4 {
			where = "from-memory"
		}
		cases = append(cases,
			benchCase{"glm5-dense-350m/keys=2048/rows=8/bf16/" + where, 8, 16, 2048, 1, "bf16", cache},
			benchCase{"glm5/keys=2048/rows=8/bf16/" + where, 8, 64, 2048, 1, "bf16", cache})
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			defer kernels.SetThreads(kernels.SetThreads(bc.threads))
			rng := rand.New(rand.NewPCG(8, 0))
			nkv := bc.cacheRows * bc.topk
			var kv KVSource = DenseKV(randVec(rng, nkv*RowDim))
			if bc.rowsKind != "f32" {
				rows := make(DenseKVBF16, nkv*RowDim)
				for i, v := range kv.(DenseKV) {
					rows[i] = uint16(math.Float32bits(v) >> 16)
				}
				kv = rows
				if bc.rowsKind == "decoded" {
					kv = widenedRows{rows}
				}
			}
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

// widenedRows is a DecodingKVSource whose DecodeRows widens bf16 rows with
// the kernels' WidenBF16 into the kernel's scratch, a block at a time, as a
// quantized cache decodes its rows (kernels' BenchmarkDecodeRecords times
// that decoding). It holds the rows by name, so that it is not a
// BF16KVSource.
type widenedRows struct{ rows DenseKVBF16 }

func (w widenedRows) Row(slot int32, scratch []float32) []float32 { return w.rows.Row(slot, scratch) }

func (w widenedRows) DecodesRows() bool { return true }

func (w widenedRows) DecodeRows(dst []float32, slots []int32, j0, j1 int) {
	for j := j0; j < j1; j++ {
		row := w.rows.RowBF16(slots[j])
		kernels.WidenBF16(dst[(j-j0)*RowDim:(j-j0+1)*RowDim], unsafe.Slice((*byte)(unsafe.Pointer(&row[0])), 2*len(row)))
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
