package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
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
// memory): fp8 quantized from normal weights by QuantizeFP8 (fp8-checked
// the same codes not marked as checked at construction, so that every
// product checks them for NaN codes; fp8-ue8m0 quantized with power-of-two
// scales, as DeepSeek's checkpoints are), bf16 and f32 their rounding and
// values, bf16-ilv the bf16 values interleaved by InterleaveBF16, fp8-ilv
// the fp8 codes interleaved by InterleaveFP8.
func benchWeights(r *rand.Rand, dtype string, out, in int) []*Matrix {
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
	}
	m := &Matrix{Rows: out, Cols: in}
	switch dtype {
	case "fp8-ue8m0":
		var err error
		if m, err = quantizeFP8(out, in, w, numfmt.QuantizeE4M3BlocksUE8M0); err != nil {
			panic(err)
		}
	case "fp8", "fp8-checked", "fp8-ilv":
		var err error
		if m, err = QuantizeFP8(out, in, w); err != nil {
			panic(err)
		}
		if dtype == "fp8-checked" {
			m.finite = false
		}
		if dtype == "fp8-ilv" && !m.InterleaveFP8() {
			panic("fp8-ilv weights need the AVX-512 implementation")
		}
	case "bf16", "bf16-ilv":
		m.BF16 = make([]uint16, len(w))
		numfmt.F32sToBF16(m.BF16, w)
		if dtype == "bf16-ilv" && !m.InterleaveBF16() {
			panic("bf16-ilv weights need the AVX-512 implementation")
		}
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

// benchDtypes is dtypes without bf16-ilv and fp8-ilv (weights interleaved
// by InterleaveBF16 and InterleaveFP8) where the AVX-512 implementation is
// not the active one.
func benchDtypes(dtypes ...string) []string {
	if activeLevel() == levelAVX512 {
		return dtypes
	}
	return slices.DeleteFunc(dtypes, func(d string) bool { return d == "bf16-ilv" || d == "fp8-ilv" })
}

// streamRate is the read bandwidth of threads goroutines over disjoint
// parts of buf (GB/s, best of three passes of each of ReadProbes).
func streamRate(buf []float32, threads int) float64 {
	best := 0.0
	per := len(buf) / threads
	for _, read := range ReadProbes {
		for range 3 {
			var wg sync.WaitGroup
			t0 := time.Now()
			for i := range threads {
				wg.Go(func() { read(buf[i*per : (i+1)*per]) })
			}
			wg.Wait()
			best = max(best, float64(4*per*threads)/time.Since(t0).Seconds()/1e9)
		}
	}
	return best
}

// BenchmarkGEMV times MatVecT at GLM-5's projection and expert shapes in
// fp8, bf16 and f32 on one and two threads. GB/s counts the weight bytes
// (one per fp8 weight); stream-% is that rate over the read bandwidth
// (streamRate) measured on the same threads right after the calls. On one
// thread cpu-ms is the calling thread's CPU time per call (Linux), the
// steadier time on a shared machine (see BenchmarkSkinnyGEMM).
func BenchmarkGEMV(b *testing.B) {
	buf := make([]float32, 64<<20)
	for i := range buf {
		buf[i] = float32(i & 1023)
	}
	for _, sh := range glm5GEMVShapes {
		for _, threads := range []int{1, 2} {
			for _, dtype := range benchDtypes("fp8", "fp8-ilv", "fp8-ue8m0", "fp8-checked", "bf16", "bf16-ilv", "f32") {
				b.Run(fmt.Sprintf("%s/%dx%d/threads=%d/%s", sh.name, sh.out, sh.in, threads, dtype), func(b *testing.B) {
					r := newRand(80)
					ws := benchWeights(r, dtype, sh.out, sh.in)
					x := randSlice(r, sh.in, 1)
					dst := make([]float32, sh.out)
					defer SetThreads(SetThreads(threads))
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					MatVecT(dst, x, ws[0])
					k := 0
					cpu0, cpuOK := threadCPU()
					for b.Loop() {
						MatVecT(dst, x, ws[k])
						k = (k + 1) % len(ws)
					}
					bytes := float64(sh.out*sh.in) * float64(ws[0].bytesPerWeight())
					if cpu1, _ := threadCPU(); cpuOK && threads == 1 {
						b.ReportMetric((cpu1-cpu0)*1e3/float64(b.N), "cpu-ms")
					}
					s := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(bytes/s/1e9, "GB/s")
					b.ReportMetric(100*bytes/s/1e9/streamRate(buf, threads), "stream-%")
				})
			}
		}
	}
}

// skinnyRows are the activation row counts of decode-shaped products: one
// row, the 1 + K rows a speculative round verifies per sequence (K ≤ 5),
// batch-8 decode and a batch of 16.
var skinnyRows = []int{1, 2, 3, 4, 6, 8, 16}

// loopProducts runs dst = x·wᵀ over the weights ws in turn (so that they
// stream from memory) on one thread locked to its OS thread, after one
// warm-up call, and reports the thread's CPU time per call as cpu-ms where
// the OS gives it (Linux).
func loopProducts(b *testing.B, dst, x []float32, n int, ws []*Matrix) {
	defer SetThreads(SetThreads(1))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	MatMulT(dst, x, n, ws[0])
	runtime.GC() // the weights' construction garbage, not during the calls
	k := 0
	cpu0, cpuOK := threadCPU()
	for b.Loop() {
		MatMulT(dst, x, n, ws[k])
		k = (k + 1) % len(ws)
	}
	if cpu1, _ := threadCPU(); cpuOK {
		b.ReportMetric((cpu1-cpu0)*1e3/float64(b.N), "cpu-ms")
	}
}

// BenchmarkSkinnyGEMM times MatMulT with few activation rows on GLM-5's
// q_a_proj shape (2048×6144) in fp8 and bf16 on one thread, the weights
// streamed from memory. GB/s counts the weight bytes once per call;
// roofline-% is the time the product needs at best, the larger of the
// weight bytes over the read bandwidth (streamRate) and the FLOPs over the FMA
// peak, both measured in the same run right after the calls, over the time
// it took. cpu-ms is the CPU time of the calling thread per call (Linux):
// on a machine shared with other work it leaves out the time spent waiting
// for a core, so it is the steadier of the two times to compare.
func BenchmarkSkinnyGEMM(b *testing.B) {
	const out, in = 2048, 6144
	buf := make([]float32, 64<<20)
	for i := range buf {
		buf[i] = float32(i & 1023)
	}
	for _, dtype := range benchDtypes("fp8", "fp8-ilv", "bf16", "bf16-ilv") {
		ws := benchWeights(newRand(81), dtype, out, in)
		for _, n := range skinnyRows {
			b.Run(fmt.Sprintf("%s/%dx%d/rows=%d", dtype, out, in, n), func(b *testing.B) {
				x := randSlice(newRand(82), n*in, 1)
				dst := make([]float32, n*out)
				loopProducts(b, dst, x, n, ws)
				s := b.Elapsed().Seconds() / float64(b.N)
				bytes := float64(out*in) * float64(ws[0].bytesPerWeight())
				flops := 2 * float64(n*out*in)
				t0 := time.Now()
				peak := FMAPeakLoop(2_000_000) / time.Since(t0).Seconds()
				best := max(bytes/(streamRate(buf, 1)*1e9), flops/peak)
				b.ReportMetric(bytes/s/1e9, "GB/s")
				b.ReportMetric(100*best/s, "roofline-%")
			})
		}
	}
}

// BenchmarkProductPanels times the two walks of a decode-sized product's
// tiles over its weight rows (productPanel) on GLM-5's o_proj, q_a and q_b
// shapes, one thread, weights streamed from memory: walk=tiles, every tile
// over all its reduction blocks before the next (what products with small
// activation rows do), and walk=panels, every reduction block over a panel
// of panelOut rows before the next block (what products with activation
// rows above panelXBytes do). The two run one after the other in each
// round, so their ratio is measured in one run; cpu-ms is the calling
// thread's CPU time per call (Linux), the steadier of the two times on a
// shared machine. fp8 also runs 43 and 64 rows, the decoded path's, whose
// limit is decodedPanelXBytes (an expert's share of a 512-token prompt of
// glm5-moe-shape is about 43 rows).
func BenchmarkProductPanels(b *testing.B) {
	for _, sh := range []struct{ out, in int }{{6144, 16384}, {2048, 6144}, {16384, 2048}} {
		for _, dtype := range benchDtypes("fp8", "bf16-ilv") {
			ws := benchWeights(newRand(83), dtype, sh.out, sh.in)
			rows := []int{2, 3, 4, 6, 8, 16}
			if dtype == "fp8" {
				rows = append(rows, 43, fp8DecodedMaxRows)
			}
			for _, n := range rows {
				x := randSlice(newRand(84), n*sh.in, 1)
				dst := make([]float32, n*sh.out)
				for _, walk := range []string{"tiles", "panels"} {
					b.Run(fmt.Sprintf("%dx%d/%s/rows=%d/walk=%s", sh.out, sh.in, dtype, n, walk), func(b *testing.B) {
						defer func(v, d, g int) { panelXBytes, decodedPanelXBytes, groupPanelMinRows = v, d, g }(panelXBytes, decodedPanelXBytes, groupPanelMinRows)
						panelXBytes, decodedPanelXBytes, groupPanelMinRows = math.MaxInt, math.MaxInt, math.MaxInt
						if walk == "panels" {
							panelXBytes, decodedPanelXBytes, groupPanelMinRows = 0, 0, 0
						}
						loopProducts(b, dst, x, n, ws)
						b.ReportMetric(2*float64(n*sh.out*sh.in)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
					})
				}
			}
		}
	}
}

// BenchmarkPromptProduct times MatMulT with a prompt step's rows (512, the
// engine's --max-num-batched-tokens) on glm5-dense-350m's MLP shapes and
// GLM-5's q_b on one thread, the weights streamed from memory (copies
// cycled through 256 MiB): the products of a prefill, bound by the FMAs.
// fp8 and interleaved bf16 go through groups of eight weight rows decoded
// or widened into L1 (gemmFP8Groups, gemmIlvGroups); row-major bf16 and
// f32 through the six-by-four strips reading two and four bytes a weight
// from L2. fma-% is the FLOPs over the FMA peak measured right after the
// calls; cpu-ms is the calling thread's CPU time per call (Linux).
func BenchmarkPromptProduct(b *testing.B) {
	const n = 512
	for _, sh := range []struct{ out, in int }{{6144, 2048}, {2048, 6144}, {16384, 2048}} {
		for _, dtype := range benchDtypes("fp8", "bf16-ilv", "bf16", "f32") {
			ws := benchWeights(newRand(87), dtype, sh.out, sh.in)
			b.Run(fmt.Sprintf("%dx%d/%s/rows=%d", sh.out, sh.in, dtype, n), func(b *testing.B) {
				x := randSlice(newRand(88), n*sh.in, 1)
				dst := make([]float32, n*sh.out)
				loopProducts(b, dst, x, n, ws)
				s := b.Elapsed().Seconds() / float64(b.N)
				t0 := time.Now()
				peak := FMAPeakLoop(2_000_000) / time.Since(t0).Seconds()
				b.ReportMetric(100*2*float64(n*sh.out*sh.in)/s/peak, "fma-%")
			})
		}
	}
}

// BenchmarkIlvPromptWalks times a prompt's product (512 rows) of
// interleaved bf16 weights streamed from memory (copies cycled through
// 256 MiB) through gemmIlvGroups and through the four-row strips, in turns
// within each iteration, each call followed by an FMA probe: groups-% and
// strips-% are the medians over the iterations of the call's FLOPs over the
// probe's rate. On a shared host whose speed drifts over seconds, turns
// within one run compare the walks where sub-benchmarks run one after the
// other would not. One thread.
func BenchmarkIlvPromptWalks(b *testing.B) {
	if activeLevel() != levelAVX512 {
		b.Skip("the interleaved layout needs the AVX-512 implementation")
	}
	const n = 512
	for _, sh := range []struct{ out, in int }{{6144, 2048}, {2048, 6144}, {16384, 2048}} {
		ws := benchWeights(newRand(87), "bf16-ilv", sh.out, sh.in)
		b.Run(fmt.Sprintf("%dx%d/rows=%d", sh.out, sh.in, n), func(b *testing.B) {
			x := randSlice(newRand(88), n*sh.in, 1)
			dst := make([]float32, n*sh.out)
			defer SetThreads(SetThreads(1))
			groups := promptGroupsMinRows
			defer func() { promptGroupsMinRows = groups }()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			runtime.GC() // the weights' construction garbage, not during the calls
			flops := 2 * float64(n*sh.out*sh.in)
			var fr [2][]float64
			i := 0
			for b.Loop() {
				for walk, minRows := range []int{groups, math.MaxInt} {
					promptGroupsMinRows = minRows
					i++
					t0 := time.Now()
					MatMulT(dst, x, n, ws[i%len(ws)])
					s := time.Since(t0).Seconds()
					t1 := time.Now()
					peak := FMAPeakLoop(500_000) / time.Since(t1).Seconds()
					fr[walk] = append(fr[walk], flops/s/peak)
				}
			}
			for walk, name := range []string{"groups-%", "strips-%"} {
				slices.Sort(fr[walk])
				b.ReportMetric(100*fr[walk][len(fr[walk])/2], name)
			}
		})
	}
}

// BenchmarkIlvDecodeWalks times a decode batch's product (eight rows) of
// interleaved bf16 weights streamed from memory (copies cycled through
// 256 MiB) through pairsIlv and through the group tiles' passes, in turns
// within each iteration as BenchmarkIlvPromptWalks does: pairs-GB/s and
// passes-GB/s are the medians over the iterations of the weight bytes over
// the call's time. The in-L2 case reads one [64, 4096] matrix (512 KiB)
// again every call, so it measures what the tiles compute rather than what
// memory delivers. One thread.
func BenchmarkIlvDecodeWalks(b *testing.B) {
	if activeLevel() != levelAVX512 {
		b.Skip("the interleaved layout needs the AVX-512 implementation")
	}
	const n = 8
	for _, sh := range []struct {
		out, in int
		inL2    bool
	}{{6144, 2048, false}, {2048, 6144, false}, {4096, 2048, false}, {64, 4096, true}} {
		ws := benchWeights(newRand(89), "bf16-ilv", sh.out, sh.in)
		where := "streamed"
		if sh.inL2 {
			ws, where = ws[:1], "in-L2"
		}
		b.Run(fmt.Sprintf("%dx%d/rows=%d/%s", sh.out, sh.in, n, where), func(b *testing.B) {
			x := randSlice(newRand(90), n*sh.in, 1)
			dst := make([]float32, n*sh.out)
			defer SetThreads(SetThreads(1))
			pairs := pairIlvRows
			defer func() { pairIlvRows = pairs }()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			runtime.GC() // the weights' construction garbage, not during the calls
			var gbs [2][]float64
			i := 0
			for b.Loop() {
				for walk, rows := range []int{pairWalkRows("GenuineIntel"), 0} {
					pairIlvRows = rows
					i++
					t0 := time.Now()
					MatMulT(dst, x, n, ws[i%len(ws)])
					gbs[walk] = append(gbs[walk], float64(2*sh.out*sh.in)/time.Since(t0).Seconds()/1e9)
				}
			}
			for walk, name := range []string{"pairs-GB/s", "passes-GB/s"} {
				slices.Sort(gbs[walk])
				b.ReportMetric(gbs[walk][len(gbs[walk])/2], name)
			}
		})
	}
}

// BenchmarkProductInCache times MatMulT with its weights resident in L2
// (64 rows of 4,096 columns: 256 KiB in fp8, 512 KiB in bf16, 1 MiB in f32,
// read again every call) on one thread, so that it measures what the tiles
// compute, not what memory delivers: the ceiling of the same kernels on
// streamed weights (BenchmarkGEMV, BenchmarkSkinnyGEMM). GB/s counts the
// weight bytes per call; fma-% is the FLOPs over the FMA peak measured
// right after.
func BenchmarkProductInCache(b *testing.B) {
	const out, in = 64, 4096
	for _, dtype := range benchDtypes("fp8", "fp8-checked", "bf16", "bf16-ilv", "f32") {
		w := benchWeights(newRand(83), dtype, out, in)[0]
		for _, n := range []int{1, 2, 3, 4, 8, 16} {
			b.Run(fmt.Sprintf("%s/rows=%d", dtype, n), func(b *testing.B) {
				x := randSlice(newRand(84), n*in, 1)
				dst := make([]float32, n*out)
				defer SetThreads(SetThreads(1))
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				MatMulT(dst, x, n, w)
				for b.Loop() {
					MatMulT(dst, x, n, w)
				}
				s := b.Elapsed().Seconds() / float64(b.N)
				t0 := time.Now()
				peak := FMAPeakLoop(2_000_000) / time.Since(t0).Seconds()
				b.ReportMetric(float64(out*in*w.bytesPerWeight())/s/1e9, "GB/s")
				b.ReportMetric(100*2*float64(n*out*in)/s/peak, "fma-%")
			})
		}
	}
}

// BenchmarkFP8SubnormalCodes times the fp8 products of one and eight
// activation rows on the same weights as quantized (codes=quantized) and
// with every subnormal code made a zero of its sign (codes=no-subnormals),
// on GLM-5's q_b and o_proj shapes streamed from memory and on a 64×4096
// weight that stays in L2, the two in turns for three rounds. The tiles
// decode a subnormal code to a float32 denormal before its scale's
// multiply, which costs an Intel core a microcode assist per vector holding
// one; the difference between the two is what those assists cost. GB/s
// counts the code bytes per call; subnormal-vectors-% is the share of the
// quantized weight's 16-code vectors that hold a subnormal code.
func BenchmarkFP8SubnormalCodes(b *testing.B) {
	shapes := []struct {
		name    string
		out, in int
	}{{"in-L2", 64, 4096}, {"q_b", 16384, 2048}, {"o_proj", 6144, 16384}}
	for _, sh := range shapes {
		quantized := benchWeights(newRand(85), "fp8", sh.out, sh.in)
		if sh.name == "in-L2" {
			quantized = quantized[:1]
		}
		var zeroed []*Matrix
		for _, w := range quantized {
			c := *w
			c.FP8 = slices.Clone(w.FP8)
			for i, v := range c.FP8 {
				if v&0x78 == 0 {
					c.FP8[i] = v & 0x80
				}
			}
			zeroed = append(zeroed, &c)
		}
		sub := subnormalShare(quantized[0].FP8, 16)
		for _, n := range []int{1, 8} {
			x := randSlice(newRand(86), n*sh.in, 1)
			dst := make([]float32, n*sh.out)
			for r := range 3 {
				for _, codes := range []string{"quantized", "no-subnormals"} {
					b.Run(fmt.Sprintf("%s/rows=%d/round=%d/codes=%s", sh.name, n, r, codes), func(b *testing.B) {
						ws := quantized
						if codes == "no-subnormals" {
							ws = zeroed
						}
						loopProducts(b, dst, x, n, ws)
						b.ReportMetric(float64(sh.out*sh.in)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GB/s")
						b.ReportMetric(100*sub, "subnormal-vectors-%")
					})
				}
			}
		}
	}
}

// BenchmarkFP8AliasedRows times the one-row fp8 product of matrices whose
// rows are a multiple of fp8AliasBytes long through gemvPairsFP8's two
// walks, the b groups a reduction block behind the a groups (walk=lagged)
// and both at the same columns (walk=in-step), in turns for five rounds: in
// L2 (128 rows of 4,096 codes and 32 of 16,384, and for comparison rows of
// 3,968 and 16,256, which do not alias and take the walk in step under
// both names) and streamed from memory
// (GLM-5's o_proj, 6144×16384, and the 350M preset's 2048×4096). On
// AVX-512 only, where the pair walk runs. GB/s counts the code bytes per
// call.
func BenchmarkFP8AliasedRows(b *testing.B) {
	if activeLevel() != levelAVX512 {
		b.Skip("the pair walk runs on AVX-512 only")
	}
	shapes := []struct {
		name    string
		out, in int
	}{{"in-L2", 128, 4096}, {"in-L2", 32, 16384}, {"in-L2", 128, 3968}, {"in-L2", 32, 16256}, {"o_proj", 6144, 16384}, {"dense-o_proj", 2048, 4096}}
	for _, sh := range shapes {
		ws := benchWeights(newRand(87), "fp8", sh.out, sh.in)
		if sh.name == "in-L2" {
			ws = ws[:1]
		}
		x := randSlice(newRand(88), sh.in, 1)
		dst := make([]float32, sh.out)
		for r := range 5 {
			for _, walk := range []string{"lagged", "in-step"} {
				b.Run(fmt.Sprintf("%s/%dx%d/round=%d/walk=%s", sh.name, sh.out, sh.in, r, walk), func(b *testing.B) {
					defer func(lag bool) { lagAliasedPairs = lag }(lagAliasedPairs)
					lagAliasedPairs = walk == "lagged"
					loopProducts(b, dst, x, 1, ws)
					b.ReportMetric(float64(sh.out*sh.in)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkAMXProducts compares the interleaved bf16 products of avx512
// and avx512-amx on the same weights, the two implementations in turns
// call by call, with the read probe between rounds: one and eight
// activation rows streamed from memory (fresh weight copies, 256 MiB in
// all) and in L2, and prompts: 512 rows by 2,048 and 6,144 columns and 128
// rows by 16,384 (GLM-5's widest reduction), one thread each, and the
// 2048×6144 prompt on two threads. It reports GB/s of weights (a prompt's:
// its FLOPs per second as GFLOP/s), medians.
func BenchmarkAMXProducts(b *testing.B) {
	if enableAMX() != nil || activeLevel() != levelAVX512 {
		b.Skip("needs AVX-512 and AMX tiles")
	}
	for _, sh := range []struct {
		out, in, n int
		inL2       bool
		threads    int
	}{
		{6144, 2048, 1, false, 1}, {2048, 6144, 1, false, 1},
		{6144, 2048, 8, false, 1}, {2048, 6144, 8, false, 1}, {64, 4096, 8, true, 1},
		{6144, 2048, 512, true, 1}, {2048, 6144, 512, true, 1}, {6144, 16384, 128, true, 1},
		{2048, 6144, 512, true, 2},
	} {
		ws := benchWeights(newRand(89), "bf16-ilv", sh.out, sh.in)
		where := "streamed"
		if sh.inL2 {
			ws, where = ws[:1], "in-L2"
		}
		if sh.n > amxSlabRows {
			where = "prompt"
		}
		b.Run(fmt.Sprintf("%dx%d/rows=%d/%s/threads=%d", sh.out, sh.in, sh.n, where, sh.threads), func(b *testing.B) {
			x := randSlice(newRand(90), sh.n*sh.in, 1)
			dst := make([]float32, sh.n*sh.out)
			defer SetThreads(SetThreads(sh.threads))
			prev := Impl()
			defer SetImpl(prev)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			probe := make([]float32, 64<<20)
			for i := range probe {
				probe[i] = 1 // its own pages, not the zero page
			}
			runtime.GC()
			impls := []string{"avx512", "avx512-amx"}
			var rate [3][]float64
			work := float64(2 * sh.out * sh.in) // bytes of weights
			if sh.n > amxSlabRows {
				work = 2 * float64(sh.n*sh.out*sh.in) // FLOPs
			}
			i := 0
			for b.Loop() {
				t0 := time.Now()
				StreamSum(probe)
				rate[2] = append(rate[2], float64(4*len(probe))/time.Since(t0).Seconds()/1e9)
				for k, name := range impls {
					SetImpl(name)
					i++
					t0 := time.Now()
					MatMulT(dst, x, sh.n, ws[i%len(ws)])
					rate[k] = append(rate[k], work/time.Since(t0).Seconds()/1e9)
				}
			}
			unit := "GB/s"
			if sh.n > amxSlabRows {
				unit = "GFLOP/s"
			}
			for k, name := range []string{"avx512-" + unit, "amx-" + unit, "read-GB/s"} {
				slices.Sort(rate[k])
				b.ReportMetric(rate[k][len(rate[k])/2], name)
			}
		})
	}
}
