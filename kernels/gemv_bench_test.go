package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cpmla/cpmla/numfmt"
)

// glm5GEMVShapes are the [out, in] projections and experts of GLM-5 a decode
// step multiplies by one activation row.
var glm5GEMVShapes = []struct {
	name    string
	out, in int
}{
	{"q_a", 2048, 6144}, {"q_b", 16384, 2048}, {"kv_a_proj_with_mqa", 576, 6144}, {"o_proj", 6144, 16384},
	{"expert_gate_up", 2048, 6144}, {"expert_down", 6144, 2048}, {"indexer_wq_b", 4096, 2048},
}

// benchWeights returns copies of a [out, in] weight in dtype (enough
// copies to make 256 MiB, at least one, so that the calls stream them from
// memory): fp8 quantized from normal weights by QuantizeFP8,
// bf16 and f32 their rounding and values.
func benchWeights(r *rand.Rand, dtype string, out, in int) []*Matrix {
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
	}
	m := &Matrix{Rows: out, Cols: in}
	switch dtype {
	case "fp8":
		var err error
		if m, err = QuantizeFP8(out, in, w); err != nil {
			panic(err)
		}
	case "bf16":
		m.BF16 = make([]uint16, len(w))
		numfmt.F32sToBF16(m.BF16, w)
	default:
		m.F32 = w
	}
	ms := []*Matrix{m}
	for len(ms) < (256<<20)/(out*in*m.bytesPerWeight()) {
		c := *m
		c.F32, c.BF16, c.FP8 = slices.Clone(m.F32), slices.Clone(m.BF16), slices.Clone(m.FP8)
		ms = append(ms, &c)
	}
	return ms
}

// streamRate is the StreamSum read bandwidth of threads goroutines over
// disjoint parts of buf (GB/s, best of three passes).
func streamRate(buf []float32, threads int) float64 {
	best := 0.0
	per := len(buf) / threads
	for range 3 {
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range threads {
			wg.Go(func() { StreamSum(buf[i*per : (i+1)*per]) })
		}
		wg.Wait()
		best = max(best, float64(4*per*threads)/time.Since(t0).Seconds()/1e9)
	}
	return best
}

// BenchmarkGEMV times MatVecT at GLM-5's projection and expert shapes in
// fp8, bf16 and f32 on one and two threads. GB/s counts the weight bytes
// (one per fp8 weight); stream-% is that rate over the StreamSum read
// bandwidth measured on the same threads right after the calls.
func BenchmarkGEMV(b *testing.B) {
	buf := make([]float32, 64<<20)
	for i := range buf {
		buf[i] = float32(i & 1023)
	}
	for _, sh := range glm5GEMVShapes {
		for _, threads := range []int{1, 2} {
			for _, dtype := range []string{"fp8", "bf16", "f32"} {
				b.Run(fmt.Sprintf("%s/%dx%d/threads=%d/%s", sh.name, sh.out, sh.in, threads, dtype), func(b *testing.B) {
					r := newRand(80)
					ws := benchWeights(r, dtype, sh.out, sh.in)
					x := randSlice(r, sh.in, 1)
					dst := make([]float32, sh.out)
					defer SetThreads(SetThreads(threads))
					MatVecT(dst, x, ws[0])
					k := 0
					for b.Loop() {
						MatVecT(dst, x, ws[k])
						k = (k + 1) % len(ws)
					}
					bytes := float64(sh.out*sh.in) * float64(ws[0].bytesPerWeight())
					s := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(bytes/s/1e9, "GB/s")
					b.ReportMetric(100*bytes/s/1e9/streamRate(buf, threads), "stream-%")
				})
			}
		}
	}
}
