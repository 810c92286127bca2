package comm_test

import (
	"fmt"
	"testing"

	"github.com/cpmla/cpmla/comm"
)

// BenchmarkSumRankOrder measures the reduction kernel the transports use:
// GB/s counts the bytes read from the sources.
func BenchmarkSumRankOrder(b *testing.B) {
	const n = 64 * 512
	for _, p := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("f32/n=%d/sources=%d", n, p), func(b *testing.B) {
			dst := make([]float32, n)
			srcs := make([][]byte, p)
			for j := range srcs {
				s := make([]float32, n)
				for i := range s {
					s[i] = float32(i + j)
				}
				srcs[j] = comm.Bytes(s)
			}
			d := comm.Bytes(dst)
			for b.Loop() {
				if err := comm.SumRankOrder(comm.F32, d, srcs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p*n*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
