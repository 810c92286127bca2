package kernels

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

func BenchmarkTmpRows8S(b *testing.B) {
	for _, sh := range [][2]int{{16384, 2048}, {2048, 6144}, {6144, 16384}} {
		b.Run(fmt.Sprintf("%dx%d", sh[0], sh[1]), func(b *testing.B) {
			const n = 8
			ws := benchWeights(newRand(83), "fp8", sh[0], sh[1])
			x := randSlice(newRand(84), n*sh[1], 1)
			dst := make([]float32, n*sh[0])
			defer SetThreads(SetThreads(1))
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			MatMulT(dst, x, n, ws[0])
			k := 0
			for b.Loop() {
				MatMulT(dst, x, n, ws[k])
				k = (k + 1) % len(ws)
			}
			s := b.Elapsed().Seconds() / float64(b.N)
			t0 := time.Now()
			peak := FMAPeakLoop(2_000_000) / time.Since(t0).Seconds()
			b.ReportMetric(100*2*float64(n*sh[0]*sh[1])/s/peak, "fma-%")
		})
	}
}
