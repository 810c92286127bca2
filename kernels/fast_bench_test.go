package kernels

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// BenchmarkFMAPeak measures the fp32 FMA peak of one core with the active
// implementation's widest vectors: the yardstick of the compute-bound
// kernels, to be read next to them from the same run.
func BenchmarkFMAPeak(b *testing.B) {
	var flops float64
	for b.Loop() {
		flops = FMAPeakLoop(100_000)
	}
	reportRate(b, flops, "GFLOP/s")
}

// BenchmarkFP8DecodePeak measures how many fp8 weights per second one core
// decodes to float32 with the fp8 tiles' arithmetic and nothing else: the
// yardstick of the fp8 products beside the FMA peak and the read bandwidth.
func BenchmarkFP8DecodePeak(b *testing.B) {
	var codes float64
	for b.Loop() {
		codes = FP8DecodeLoop(100_000)
	}
	reportRate(b, codes, "Gcodes/s")
}

// BenchmarkFP8ProductPeak measures, per activation-row count, how many fp8
// weights per second one core decodes and multiplies into that many rows
// in the fp8 tiles' order with everything in L1 (Gcodes/s, and GFLOP/s
// against BenchmarkFMAPeak): the ceiling of an fp8 product of that many
// rows on this core.
func BenchmarkFP8ProductPeak(b *testing.B) {
	for _, rows := range FP8ProductRows {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			var codes float64
			for b.Loop() {
				codes = FP8ProductLoop(rows, 100_000)
			}
			reportRate(b, codes, "Gcodes/s")
			reportRate(b, 2*float64(rows)*codes, "GFLOP/s")
		})
	}
}

// BenchmarkFP8OneRowCached times the one-row product of an interleaved
// fp8 weight small enough to stay in the core's L2 ([128, 2048], 256 KiB)
// on one thread: the tile's own decoding rate without the memory's, in
// Gcodes/s and as of-probe-% of the one-row rate FP8ProductLoop measures
// right after in the same run (the fastest of 20 calls), the ceiling the
// rooflines at the fp8 rates take. A streamed product cannot beat this
// rate.
func BenchmarkFP8OneRowCached(b *testing.B) {
	const out, in = 128, 2048
	r := newRand(31)
	w, err := QuantizeFP8(out, in, randSlice(r, out*in, 0.05))
	if err != nil {
		b.Fatal(err)
	}
	if !w.InterleaveFP8() {
		b.Skip("interleaved fp8 weights need the AVX-512 implementation")
	}
	x, dst := randSlice(r, in, 1), make([]float32, out)
	defer SetThreads(SetThreads(1))
	MatVecT(dst, x, w)
	for b.Loop() {
		MatVecT(dst, x, w)
	}
	s := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(out*in/s/1e9, "Gcodes/s")
	probe := 0.0 // the fastest of 20 calls, codes a second
	for range 20 {
		t := time.Now()
		codes := FP8ProductLoop(1, 100_000)
		probe = max(probe, codes/time.Since(t).Seconds())
	}
	b.ReportMetric(100*out*in/s/probe, "of-probe-%")
}

// BenchmarkStreamSum measures the read bandwidth of one core over buffers
// of 16 MiB to 1 GiB: the yardstick of the GEMV and indexer kernels is the
// rate over buffers far larger than the last-level cache, and the smaller
// ones show how large that cache is in effect (on a host whose L3 is
// shared with other machines, much less than lscpu says). The steps'
// probes read 256 MiB.
func BenchmarkStreamSum(b *testing.B) {
	for _, mib := range []int{16, 64, 256, 1024} {
		b.Run(fmt.Sprintf("MiB=%d", mib), func(b *testing.B) {
			x := randSlice(newRand(30), mib<<18, 1)
			for b.Loop() {
				StreamSum(x)
			}
			reportRate(b, float64(4*len(x)), "GB/s")
		})
	}
}

// BenchmarkStreamSumPaired is BenchmarkStreamSum reading each buffer as
// one, two and four pairs of parts side by side (StreamSumPaired), the read
// probes' other walks (ReadProbes).
func BenchmarkStreamSumPaired(b *testing.B) {
	for _, mib := range []int{16, 64, 256, 1024} {
		for _, pairs := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("MiB=%d/pairs=%d", mib, pairs), func(b *testing.B) {
				x := randSlice(newRand(30), mib<<18, 1)
				for b.Loop() {
					StreamSumPaired(x, pairs)
				}
				reportRate(b, float64(4*len(x)), "GB/s")
			})
		}
	}
}

// BenchmarkStreamFMA measures, per FMA count a line, how close one core
// comes to the larger of its read time and its FMA time when a stream of
// 256 MiB must be read and multiplied at once (StreamFMA): GB/s and
// GFLOP/s, and of-max-% the larger of the two times at the StreamSum
// bandwidth and the FMA peak, both measured right after in the same run,
// over the time taken. It is the ceiling of a product streaming its
// weights from memory on this core, which BenchmarkSkinnyGEMM and
// BenchmarkGEMV are read against.
func BenchmarkStreamFMA(b *testing.B) {
	buf := make([]float32, 64<<20)
	for i := range buf {
		buf[i] = float32(i & 1023)
	}
	if _, ok := StreamFMA(buf[:128], 2); !ok {
		b.Skip("StreamFMA runs on AVX-512 only")
	}
	for _, f := range StreamFMAPerLine {
		b.Run(fmt.Sprintf("fmas=%d", f), func(b *testing.B) {
			for b.Loop() {
				StreamFMA(buf, f)
			}
			s := b.Elapsed().Seconds() / float64(b.N)
			bytes := float64(4 * len(buf))
			flops := bytes / 64 * float64(f) * 32
			t0 := time.Now()
			peak := FMAPeakLoop(2_000_000) / time.Since(t0).Seconds()
			best := max(bytes/(streamRate(buf, 1)*1e9), flops/peak)
			b.ReportMetric(bytes/s/1e9, "GB/s")
			b.ReportMetric(flops/s/1e9, "GFLOP/s")
			b.ReportMetric(100*best/s, "of-max-%")
		})
	}
}

// BenchmarkAttendRows runs the absorbed sparse-MLA decode core at GLM-5
// shapes: 64 heads, 576-wide rows (512 values), 2048 selected rows drawn
// from a pool of 8192. FLOPs: 2·(576 + 512) per head and row.
func BenchmarkAttendRows(b *testing.B) {
	const dim, vdim, pool = 576, 512, 8192
	for _, bc := range []struct{ heads, n, threads int }{{64, 2048, 1}, {64, 2048, 2}, {16, 2048, 1}} {
		b.Run(fmt.Sprintf("heads=%d/rows=%d/threads=%d", bc.heads, bc.n, bc.threads), func(b *testing.B) {
			r := newRand(31)
			kv := randSlice(r, pool*dim, 1)
			rows := make([][]float32, bc.n)
			for j, p := range r.Perm(pool)[:bc.n] {
				rows[j] = kv[p*dim : (p+1)*dim]
			}
			q := randSlice(r, bc.heads*dim, 0.05)
			out := make([]float32, bc.heads*vdim)
			lse := make([]float32, bc.heads)
			logits := make([]float32, AttendScratchLen(bc.heads, bc.n, vdim))
			defer SetThreads(SetThreads(bc.threads))
			for b.Loop() {
				AttendRows(out, lse, nil, q, bc.heads, vdim, rows, 0.0625, logits)
			}
			reportRate(b, 2*float64(bc.heads*bc.n*(dim+vdim)), "GFLOP/s")
		})
	}
}

// BenchmarkAxpy: y += alpha·x (the residual add of every layer); GB/s counts
// reading x and y and writing y.
func BenchmarkAxpy(b *testing.B) {
	for _, n := range []int{7168, 1 << 20} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			r := newRand(32)
			x := randSlice(r, n, 1)
			y := randSlice(r, n, 1)
			for b.Loop() {
				Axpy(0.5, x, y)
			}
			reportRate(b, float64(12*n), "GB/s")
		})
	}
}

// BenchmarkScoreKeys scores 1024 f32 keys that stay in L2 against one
// prepared GLM-5 indexer query (32 heads × 128): the score tile without
// the memory traffic of a long context, next to the FMA peak. GFLOP/s
// counts 2·heads·128 per key.
func BenchmarkScoreKeys(b *testing.B) {
	const heads, dim, nk = 32, 128, 1024
	r := newRand(34)
	keys := make([][]float32, nk)
	for j := range keys {
		keys[j] = randSlice(r, dim, 1)
	}
	var sq ScoreQuery
	sq.Prepare(randSlice(r, heads*dim, 1), randSlice(r, heads, 1), heads)
	dst := make([]float32, nk)
	for b.Loop() {
		ScoreKeys(dst, &sq, keys)
	}
	reportRate(b, 2*float64(heads*dim*nk), "GFLOP/s")
}

// BenchmarkAttendRowsBF16 runs the decode core on bf16 rows (the cache's
// storage) at GLM-5 shapes (64 heads) over a decode step's row counts at
// 512, 1,024 and 8,192 of context (the context and the new token), on one
// thread and two: the calls whose splits the threads share.
func BenchmarkAttendRowsBF16(b *testing.B) {
	const dim, vdim, pool, heads = 576, 512, 16384, 64
	r := newRand(32)
	kv := make([]uint16, pool*dim)
	for i := range kv {
		kv[i] = uint16(0x3c00 + r.IntN(512)) // bf16 values in [1, 4)
	}
	q := randSlice(r, heads*dim, 0.05)
	for _, n := range []int{513, 1025, 8193} {
		rows := make([][]uint16, n)
		for j, p := range r.Perm(pool)[:n] {
			rows[j] = kv[p*dim : (p+1)*dim]
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("rows=%d/threads=%d", n, threads), func(b *testing.B) {
				out := make([]float32, heads*vdim)
				lse := make([]float32, heads)
				logits := make([]float32, AttendScratchLen(heads, n, vdim))
				defer SetThreads(SetThreads(threads))
				for b.Loop() {
					AttendRowsBF16(out, lse, nil, q, heads, vdim, rows, 0.0625, logits)
				}
				reportRate(b, 2*float64(heads*n*(dim+vdim)), "GFLOP/s")
			})
		}
	}
}

// BenchmarkAttendQueriesBF16 runs a batch-8 decode step's sparse attention
// at glm5-dense-350m's shape: eight queries of 16 heads, each over 512 or
// 2,048 bf16 rows drawn from a pool of its own (8,192 rows, a sequence's
// cache), one thread. With cold=true, 256 MiB are read between calls (the
// timer stopped), so that the rows come from memory as they do in a step,
// after its weights streamed past; cold=false leaves them in the caches.
// FLOPs: 2·(576 + 512) per head and row.
func BenchmarkAttendQueriesBF16(b *testing.B) {
	const dim, vdim, pool, heads, nq = 576, 512, 8192, 16, 8
	r := newRand(36)
	src := &listRows{}
	for range nq {
		kv := make([]uint16, pool*dim)
		for i := range kv {
			kv[i] = uint16(0x3c00 + r.IntN(512)) // bf16 values in [1, 4)
		}
		for p := range pool {
			src.pool = append(src.pool, kv[p*dim:(p+1)*dim])
		}
	}
	flush := make([]float32, 64<<20)
	for i := range flush {
		flush[i] = 1
	}
	q := randSlice(r, nq*heads*dim, 0.05)
	for _, n := range []int{512, 2048} {
		src.sel = make([][]int, nq)
		for i := range nq {
			for _, p := range r.Perm(pool)[:n] {
				src.sel[i] = append(src.sel[i], i*pool+p)
			}
		}
		for _, cold := range []bool{false, true} {
			b.Run(fmt.Sprintf("rows=%d/cold=%v", n, cold), func(b *testing.B) {
				out := make([]float32, nq*heads*vdim)
				lse := make([]float32, nq*heads)
				logits := make([]float32, AttendScratchLen(heads, n, vdim))
				rows := make([][]uint16, n)
				defer SetThreads(SetThreads(1))
				var sink float32
				for b.Loop() {
					if cold {
						b.StopTimer()
						var s float32
						for _, v := range flush {
							s += v
						}
						sink += s
						b.StartTimer()
					}
					AttendQueriesBF16(out, lse, nil, q, nq, heads, vdim, src, 0.0625, rows, logits)
				}
				if sink < 0 {
					b.Log(sink)
				}
				reportRate(b, 2*float64(nq*heads*n*(dim+vdim)), "GFLOP/s")
			})
		}
	}
}

// BenchmarkScoreKeysExactBF16 scores 1,024 keys exact in bf16 (fp8 indexer
// keys decoded, as a BF16KeyGatherer vouches), in L2, against one GLM-5
// indexer query (32 heads × 128) through ScoreGatheredKeys on one thread:
// avx512 and avx512-amx in turns, ten calls each per round. It reports each
// implementation's median GFLOP/s (2·32·128 a key).
func BenchmarkScoreKeysExactBF16(b *testing.B) {
	if enableAMX() != nil || activeLevel() != levelAVX512 {
		b.Skip("needs AVX-512 and AMX tiles")
	}
	const heads, dim, nk = 32, 128, 1024
	r := newRand(34)
	keys := make([][]float32, nk)
	for j := range keys {
		keys[j] = randSlice(r, dim, 1)
		for c, v := range keys[j] {
			keys[j][c] = math.Float32frombits(math.Float32bits(v) &^ 0xffff)
		}
	}
	defer SetThreads(SetThreads(1))
	prev := Impl()
	defer SetImpl(prev)
	q, w := randSlice(r, heads*dim, 1), randSlice(r, heads, 1)
	dst := make([]float32, nk)
	space, scratch := make([][]float32, nk), make([]float32, nk*dim)
	qs := make([]ScoreQuery, 1)
	impls := []string{"avx512", "avx512-amx"}
	rates := make([][]float64, len(impls))
	for b.Loop() {
		for k, name := range impls {
			SetImpl(name)
			qs[0].Prepare(q, w, heads)
			t0 := time.Now()
			for range 10 {
				ScoreGatheredKeys(dst, nk, qs, []int32{nk}, &exactGatherer{keys}, space, scratch)
			}
			rates[k] = append(rates[k], 10*2*float64(heads*dim*nk)/time.Since(t0).Seconds()/1e9)
		}
	}
	for k, name := range impls {
		slices.Sort(rates[k])
		b.ReportMetric(rates[k][len(rates[k])/2], name+"-GFLOP/s")
	}
}
