package kernels

import (
	"fmt"
	"testing"
)

// reportRate adds a throughput metric: units per iteration over the measured
// time, scaled by 1e9 (GFLOP/s or GB/s).
func reportRate(b *testing.B, perOp float64, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(perOp*float64(b.N)/s/1e9, unit)
	}
}

// benchShapes are Linear shapes (out, in) of the target models: the MLA
// down-projection of the cache row from the glm5-mini hidden size, GLM-5's
// q_a_proj (2048×6144) and GLM-5's o_proj transposed (6144×16384).
var benchShapes = []struct{ out, in int }{{576, 256}, {2048, 6144}, {6144, 16384}}

func BenchmarkMatMulT(b *testing.B) {
	for _, dtype := range []string{"f32", "bf16"} {
		for _, sh := range benchShapes {
			b.Run(fmt.Sprintf("%s/%dx%d", dtype, sh.out, sh.in), func(b *testing.B) {
				r := newRand(20)
				w := &Matrix{Rows: sh.out, Cols: sh.in}
				wf := randSlice(r, sh.out*sh.in, 1)
				bytesPerWeight := 4
				if dtype == "f32" {
					w.F32 = wf
				} else {
					w.BF16 = make([]uint16, len(wf))
					for i, v := range wf {
						w.BF16[i] = toBF16(v)
					}
					bytesPerWeight = 2
				}
				for _, n := range []int{1, 16, 128} {
					b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
						x := randSlice(r, n*sh.in, 1)
						dst := make([]float32, n*sh.out)
						for b.Loop() {
							MatMulT(dst, x, n, w)
						}
						reportRate(b, 2*float64(n*sh.out*sh.in), "GFLOP/s")
						if n == 1 {
							reportRate(b, float64(sh.out*sh.in*bytesPerWeight), "GB/s")
						}
					})
				}
			})
		}
	}
}

func BenchmarkRMSNorm(b *testing.B) {
	for _, n := range []int{512, 7168} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			r := newRand(21)
			x := randSlice(r, n, 1)
			w := randSlice(r, n, 1)
			dst := make([]float32, n)
			for b.Loop() {
				RMSNorm(dst, x, w, 1e-6)
			}
			reportRate(b, float64(3*4*n), "GB/s") // read x and w, write dst
		})
	}
}

func BenchmarkSoftmax(b *testing.B) {
	for _, n := range []int{2048, 65536} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			x := randSlice(newRand(22), n, 10)
			work := make([]float32, n)
			for b.Loop() {
				copy(work, x)
				Softmax(work)
			}
			reportRate(b, float64(2*4*n), "GB/s") // read and write the row once
		})
	}
}

func BenchmarkRopeApply(b *testing.B) {
	// One position applied to the q_pe of 64 heads (GLM-5 per-token work).
	const heads, dim = 64, 64
	m := NewRope(dim, 1e6, nil)
	q := randSlice(newRand(23), heads*dim, 1)
	for _, interleaved := range []bool{true, false} {
		b.Run(fmt.Sprintf("heads=%d/interleaved=%v", heads, interleaved), func(b *testing.B) {
			for b.Loop() {
				for h := range heads {
					m.Apply(q[h*dim:(h+1)*dim], 100000, interleaved)
				}
			}
			reportRate(b, float64(2*4*heads*dim), "GB/s")
		})
	}
}

// BenchmarkTopK selects an indexer's 2,048 keys on one thread from rows of
// ReLU-like scores (a third exact zeros, the rest exponential), through
// TopK and through each of its long-row paths: the radix select and the
// sampled threshold's single pass.
func BenchmarkTopK(b *testing.B) {
	defer SetThreads(SetThreads(1))
	const k = 2048
	// 2,048 and 4,096 scores: the rows of a prompt's later tokens, all
	// selected (TopK sorts them) or half of them (radix select, then sort).
	for _, n := range []int{2048, 4096, 8192, 32768, 131072} {
		r := newRand(uint64(n))
		scores := make([]float32, n)
		for i := range scores {
			if r.IntN(3) != 0 {
				scores[i] = float32(r.ExpFloat64())
			}
		}
		dst := make([]int32, k)
		paths := []struct {
			name string
			run  func()
		}{
			{"TopK", func() { TopK(dst, scores) }},
			{"radix", func() { topKRadix(dst, scores) }},
			{"sampled", func() {
				if _, ok := topKSampled(dst, scores); !ok {
					b.Fatal("the sampled threshold refused an indexer row")
				}
			}},
		}
		if n < topkSampleMin {
			paths = paths[:1] // TopK is the radix select, or sorts the whole row
		}
		for _, p := range paths {
			b.Run(fmt.Sprintf("n=%d/k=%d/%s", n, k, p.name), func(b *testing.B) {
				for b.Loop() {
					p.run()
				}
				reportRate(b, float64(4*n), "GB/s")
			})
		}
	}
}
