//go:build openblas && cgo

package openblas

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/kernels"
)

func randSlice(r *rand.Rand, n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = (2*r.Float32() - 1) * scale
	}
	return s
}

func gflops(b *testing.B, flops float64) {
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// TestSgemmMatchesMatMulT: the comparator computes the same Linear layer as
// kernels.MatMulT (within float32 rounding), so timing both compares like
// with like.
func TestSgemmMatchesMatMulT(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, sh := range []struct{ n, out, in int }{{1, 7, 33}, {5, 64, 576}, {16, 130, 1000}} {
		x := randSlice(r, sh.n*sh.in, 1)
		w := &kernels.Matrix{Rows: sh.out, Cols: sh.in, F32: randSlice(r, sh.out*sh.in, 1)}
		want := make([]float32, sh.n*sh.out)
		kernels.MatMulT(want, x, sh.n, w)
		got := make([]float32, sh.n*sh.out)
		Sgemm(true, sh.n, sh.out, sh.in, 1, x, sh.in, w.F32, sh.in, 0, got, sh.out)
		if d := cmp.Diff(want, got, cmpopts.EquateApprox(1e-4, 1e-4)); d != "" {
			t.Errorf("%v: MatMulT vs Sgemm (-want +got):\n%s", sh, d)
		}
	}
}

// BenchmarkPeak is the FMA-peak loop of package kernels, to read the two
// benchmarks below against in the same run.
func BenchmarkPeak(b *testing.B) {
	var f float64
	for b.Loop() {
		f = kernels.FMAPeakLoop(200_000)
	}
	gflops(b, f)
}

// BenchmarkLinear: y = x·Wᵀ at GLM-5 projection shapes, f32 weights, one
// thread each, cpmla's MatMulT next to OpenBLAS sgemm.
func BenchmarkLinear(b *testing.B) {
	SetThreads(1)
	b.Logf("OpenBLAS core: %s", CoreName())
	r := rand.New(rand.NewPCG(2, 2))
	for _, sh := range []struct{ n, out, in int }{{128, 2048, 6144}, {16, 2048, 6144}, {128, 576, 7168}} {
		x := randSlice(r, sh.n*sh.in, 1)
		w := &kernels.Matrix{Rows: sh.out, Cols: sh.in, F32: randSlice(r, sh.out*sh.in, 1)}
		dst := make([]float32, sh.n*sh.out)
		flops := 2 * float64(sh.n*sh.out*sh.in)
		name := fmt.Sprintf("rows=%d/%dx%d", sh.n, sh.out, sh.in)
		b.Run("cpmla/"+name, func(b *testing.B) {
			for b.Loop() {
				kernels.MatMulT(dst, x, sh.n, w)
			}
			gflops(b, flops)
		})
		b.Run("openblas/"+name, func(b *testing.B) {
			for b.Loop() {
				Sgemm(true, sh.n, sh.out, sh.in, 1, x, sh.in, w.F32, sh.in, 0, dst, sh.out)
			}
			gflops(b, flops)
		})
	}
}

// BenchmarkSparseAttention: one GLM-5 decode row (64 heads, top-k 2048 of
// 8192 f32 cache rows). cpmla runs kernels.AttendRows on the gathered row
// views; the comparator gathers the rows into a contiguous buffer and runs
// logits = scale·Q·Kᵀ and out = P·V as two sgemm calls. The comparator's
// softmax is left out, so its time is a lower bound.
func BenchmarkSparseAttention(b *testing.B) {
	SetThreads(1)
	const heads, topk, pool, dim, vdim = 64, 2048, 8192, 576, 512
	r := rand.New(rand.NewPCG(3, 3))
	kv := randSlice(r, pool*dim, 1)
	idx := r.Perm(pool)[:topk]
	q := randSlice(r, heads*dim, 0.05)
	out := make([]float32, heads*vdim)
	lse := make([]float32, heads)
	logits := make([]float32, heads*topk)
	rows := make([][]float32, topk)
	flops := 2 * float64(heads*topk*(dim+vdim))
	b.Run("cpmla", func(b *testing.B) {
		for b.Loop() {
			for j, p := range idx {
				rows[j] = kv[p*dim : (p+1)*dim]
			}
			kernels.AttendRows(out, lse, nil, q, heads, vdim, rows, 0.0625, logits)
		}
		gflops(b, flops)
	})
	gathered := make([]float32, topk*dim)
	b.Run("openblas-gather-gemm", func(b *testing.B) {
		for b.Loop() {
			for j, p := range idx {
				copy(gathered[j*dim:(j+1)*dim], kv[p*dim:(p+1)*dim])
			}
			Sgemm(true, heads, topk, dim, 0.0625, q, dim, gathered, dim, 0, logits, topk)
			Sgemm(false, heads, vdim, topk, 1, logits, topk, gathered, dim, 0, out, vdim)
		}
		gflops(b, flops)
	})
}
