package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/numfmt"
)

func init() { register(newBenchCmd) }

// benchCommands are the subcommands of `cpmla bench`; a benchmark file adds
// its own with registerBench in an init function.
var benchCommands []func() *cobra.Command

func registerBench(newCmd func() *cobra.Command) { benchCommands = append(benchCommands, newCmd) }

func init() { registerBench(newBenchKernelsCmd) }

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Measure the engine on this machine"}
	for _, c := range benchCommands {
		cmd.AddCommand(c())
	}
	return cmd
}

// kernelResult is one line of `cpmla bench kernels`. Rates and the peak
// fraction are medians over rounds; in every round the machine's peak (FMA
// loop for compute-bound kernels, streamed read for memory-bound ones) is
// measured right before the kernel, on the same threads, and the fraction is
// taken within the round.
type kernelResult struct {
	Kernel         string  `json:"kernel"`
	Shape          string  `json:"shape"`
	Threads        int     `json:"threads"`
	SecondsPerCall float64 `json:"seconds_per_call"`
	GFLOPS         float64 `json:"gflops"`
	GBPS           float64 `json:"gbps"`
	PeakFraction   float64 `json:"peak_fraction"`
	// Bound is what the fraction is taken of: "fma_peak" or "read_bandwidth".
	Bound             string  `json:"bound"`
	FMAPeakGFLOPS     float64 `json:"fma_peak_gflops"`
	ReadBandwidthGBPS float64 `json:"read_bandwidth_gbps"`
	// RooflineFraction is the kernel's time against the roofline bound of
	// the same round, max(FLOPs / FMA peak, bytes / read bandwidth) — the
	// least time either resource allows; it tells a memory-bound kernel
	// that is in fact compute-bound at its shape (the indexer) from a slow
	// one.
	RooflineFraction float64 `json:"roofline_fraction"`
	Impl             string  `json:"impl"`
}

// benchCase is one kernel at one shape: setup allocates its inputs and
// returns the call to time.
type benchCase struct {
	kernel, shape string
	flops, bytes  float64 // per call
	memoryBound   bool
	setup         func() (call func(), err error)
}

type benchKernelsOptions struct {
	json    bool
	threads int
	rounds  int
	minTime time.Duration
	only    string
	impl    string
}

func newBenchKernelsCmd() *cobra.Command {
	var o benchKernelsOptions
	cmd := &cobra.Command{
		Use:   "kernels [--json] [--threads N]",
		Short: "Time the hot kernels against this machine's FMA peak and read bandwidth",
		Long: `Times sparse MLA attention, the lightning indexer, GEMM and GEMV at the model's
shapes. In each round the machine's fp32 FMA peak (a register-only FMA loop, best of
five runs) and its read bandwidth (best of three passes over 256 MiB) are measured on
the same threads right before the kernel, whose time per call is the fastest of
several batches; the reported numbers are medians over rounds. peak_fraction is the
median of the per-round ratios to the kernel's nominal bound (the FMA peak, or the
read bandwidth for GEMV and the indexer); roofline_fraction is the same against the
least time both resources allow, max(FLOPs / FMA peak, bytes / bandwidth).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchKernels(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print a JSON list of result objects")
	f.IntVar(&o.threads, "threads", 1, "threads per kernel call (kernels.SetThreads) and for the peak measurements")
	f.IntVar(&o.rounds, "rounds", 5, "rounds per kernel (peak, then kernel); medians are reported")
	f.DurationVar(&o.minTime, "min-time", 100*time.Millisecond, "least time spent timing a kernel in one round")
	f.StringVar(&o.only, "only", "", "regular expression selecting kernels by name (default: all)")
	f.StringVar(&o.impl, "impl", "", "kernel implementation: auto, ref, avx2, avx512 or avx512-amx (default: "+kernels.ImplEnv+" or auto)")
	return cmd
}

func runBenchKernels(w io.Writer, o benchKernelsOptions) error {
	switch {
	case o.threads < 1 || o.threads > maxThreadsPerRank:
		return fmt.Errorf("bench kernels: --threads %d: need 1 to %d (use --threads 1)", o.threads, maxThreadsPerRank)
	case o.rounds < 1 || o.rounds > 1000:
		return fmt.Errorf("bench kernels: --rounds %d: need 1 to 1000 (use --rounds 5)", o.rounds)
	case o.minTime <= 0 || o.minTime > maxBenchTime:
		return fmt.Errorf("bench kernels: --min-time %v: need a duration in (0, %v] (use --min-time 100ms)", o.minTime, maxBenchTime)
	}
	sel, err := regexp.Compile(o.only)
	if err != nil {
		return fmt.Errorf("bench kernels: --only: %w", err)
	}
	if o.impl != "" {
		prev, err := kernels.SetImpl(o.impl)
		if err != nil {
			return fmt.Errorf("bench kernels: --impl: %w", err)
		}
		defer kernels.SetImpl(prev)
	}
	defer kernels.SetThreads(kernels.SetThreads(o.threads))

	probe := newPeakProbe(o.threads)
	var results []kernelResult
	for _, c := range kernelBenchCases() {
		if !sel.MatchString(c.kernel) {
			continue
		}
		call, err := c.setup()
		if err != nil {
			return fmt.Errorf("bench kernels: %s %s: %w", c.kernel, c.shape, err)
		}
		results = append(results, measureKernel(c, call, probe, o))
	}
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if results == nil {
			results = []kernelResult{}
		}
		return enc.Encode(results)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "kernel\tshape\tthreads\ts/call\tGFLOP/s\tGB/s\tpeak fraction\tof\tpeak\troofline\t\n")
	for _, r := range results {
		peak := fmt.Sprintf("%.1f GFLOP/s", r.FMAPeakGFLOPS)
		if r.Bound == "read_bandwidth" {
			peak = fmt.Sprintf("%.1f GB/s", r.ReadBandwidthGBPS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.3g\t%.1f\t%.1f\t%.1f%%\t%s\t%s\t%.1f%%\t\n",
			r.Kernel, r.Shape, r.Threads, r.SecondsPerCall, r.GFLOPS, r.GBPS, 100*r.PeakFraction, r.Bound, peak, 100*r.RooflineFraction)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "implementation %s; medians of %d rounds; the peak is re-measured in every round\n", kernels.Impl(), o.rounds)
	return err
}

// measureKernel runs o.rounds rounds of (peak, kernel) and returns medians.
func measureKernel(c benchCase, call func(), p *peakProbe, o benchKernelsOptions) kernelResult {
	call() // warm caches, pools and page tables once
	var secs, fracs, roofs, fma, bw []float64
	for range o.rounds {
		f, b := p.fmaPeak(), p.readBandwidth()
		fma, bw = append(fma, f), append(bw, b)
		s := timeCalls(call, o.minTime)
		secs = append(secs, s)
		if c.memoryBound {
			fracs = append(fracs, c.bytes/s/1e9/b)
		} else {
			fracs = append(fracs, c.flops/s/1e9/f)
		}
		roofs = append(roofs, max(c.flops/(f*1e9), c.bytes/(b*1e9))/s)
	}
	s := median(secs)
	r := kernelResult{
		Kernel: c.kernel, Shape: c.shape, Threads: o.threads, SecondsPerCall: s,
		GFLOPS: c.flops / s / 1e9, GBPS: c.bytes / s / 1e9, PeakFraction: median(fracs),
		Bound: "fma_peak", FMAPeakGFLOPS: median(fma), ReadBandwidthGBPS: median(bw),
		RooflineFraction: median(roofs), Impl: kernels.Impl(),
	}
	if c.memoryBound {
		r.Bound = "read_bandwidth"
	}
	return r
}

// timeCalls returns the least seconds per call over batches of calls that
// together take at least minTime: on a shared machine the fastest batch is
// the one least disturbed, as the peak probes (best of several runs) are.
func timeCalls(call func(), minTime time.Duration) float64 {
	best := math.Inf(1)
	start := time.Now()
	for n, batches := 1, 0; ; batches++ {
		t0 := time.Now()
		for range n {
			call()
		}
		d := time.Since(t0)
		best = min(best, d.Seconds()/float64(n))
		if time.Since(start) >= minTime && batches >= 2 {
			return best
		}
		if d < minTime/20 {
			n *= 2
		}
	}
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// peakProbe measures the machine on a number of threads at once.
type peakProbe struct {
	threads int
	buf     []float32 // 256 MiB, split among the threads
}

func newPeakProbe(threads int) *peakProbe {
	return &peakProbe{threads: threads}
}

// fmaPeak is the fp32 FMA rate of all threads running the FMA loop at once
// (GFLOP/s), the best of five runs of about 1.5 ms.
func (p *peakProbe) fmaPeak() float64 {
	const rounds = 400_000 // about 1.5 ms on one core
	best := 0.0
	for range 5 {
		t0 := time.Now()
		total := p.together(func(int) float64 { return kernels.FMAPeakLoop(rounds) })
		if total == 0 { // no vector FMA on this CPU: fall back to a scalar estimate
			total = scalarFMALoop(p.threads, rounds)
		}
		best = max(best, total/time.Since(t0).Seconds()/1e9)
	}
	return best
}

// together runs probe on every thread at once (thread i calls probe(i),
// which returns the work it did) and returns the work of all of them.
func (p *peakProbe) together(probe func(thread int) float64) float64 {
	var wg sync.WaitGroup
	work := make([]float64, p.threads)
	for i := range p.threads {
		wg.Go(func() { work[i] = probe(i) })
	}
	wg.Wait()
	var total float64
	for _, w := range work {
		total += w
	}
	return total
}

// fp8Rates is, for each of kernels.FP8ProductRows, the fp8 weights a
// second all threads decode and multiply into that many activation rows
// running kernels.FP8ProductLoop at once, the best of three runs of well
// under a millisecond each; nil where the CPU has no vector fp8 path.
func (p *peakProbe) fp8Rates() []model.FP8Rate {
	const rounds = 100_000
	var rates []model.FP8Rate
	for _, rows := range kernels.FP8ProductRows {
		best := 0.0
		for range 3 {
			t0 := time.Now()
			total := p.together(func(int) float64 { return kernels.FP8ProductLoop(rows, rounds) })
			best = max(best, total/time.Since(t0).Seconds())
		}
		if best == 0 {
			return nil
		}
		rates = append(rates, model.FP8Rate{Rows: rows, Codes: best})
	}
	return rates
}

// scalarFMALoop is the reference's stand-in peak: eight independent scalar
// multiply-add chains per thread, timed by the caller.
func scalarFMALoop(threads, rounds int) float64 {
	var wg sync.WaitGroup
	sink := make([]float32, threads)
	for i := range threads {
		wg.Go(func() {
			var a [8]float32
			for range rounds * 16 {
				for k := range a {
					a[k] = a[k]*0.999 + 0.5
				}
			}
			sink[i] = a[0] + a[7]
		})
	}
	wg.Wait()
	return float64(threads) * float64(rounds*16) * 8 * 2
}

// readBandwidth is the rate of all threads streaming disjoint parts of a
// 256 MiB buffer at once (GB/s), the best of three passes of each of
// kernels.ReadProbes.
func (p *peakProbe) readBandwidth() float64 {
	if p.buf == nil {
		p.buf = make([]float32, 64<<20)
		for i := range p.buf {
			p.buf[i] = float32(i & 1023)
		}
	}
	best := 0.0
	per := len(p.buf) / p.threads
	for _, read := range kernels.ReadProbes {
		for range 3 {
			t0 := time.Now()
			bytes := p.together(func(i int) float64 {
				read(p.buf[i*per : (i+1)*per])
				return float64(4 * per)
			})
			best = max(best, bytes/time.Since(t0).Seconds()/1e9)
		}
	}
	return best
}

// kernelBenchCases lists the kernels and shapes: GLM-5 sparse attention per
// rank (64 heads, top-k 2048) for decode and prefill rows and each KV format,
// the indexer over 64 Ki keys, and GEMM/GEMV at projection shapes.
func kernelBenchCases() []benchCase {
	var cases []benchCase
	// 64 Ki cache rows (75 MiB in bf16) and 8 query rows' index sets used in
	// turn: the rows a call reads are not left in the caches by the call
	// before, as in a model where every layer reads its own cache.
	const heads, topk, pool = 64, 2048, 64 << 10
	attnFlops := float64(heads*topk) * 2 * (mla.RowDim + mla.LatentDim)
	for _, sc := range []struct {
		kernel  string
		rows    int
		kv      kvcache.KVDType
		kvcache bool // rows from a kvcache.LayerCache (the engine's cache) instead of an in-place mla source
	}{
		{"sparse_mla_decode", 1, kvcache.KVBF16, false},
		{"sparse_mla_decode", 1, kvcache.KVBF16, true},
		{"sparse_mla_decode", 1, kvcache.KVF32, true},
		{"sparse_mla_decode", 1, kvcache.KVFP8DSMLA, true},
		{"sparse_mla_prefill", 16, kvcache.KVBF16, false},
		{"sparse_mla_prefill", 16, kvcache.KVBF16, true},
		{"sparse_mla_prefill", 16, kvcache.KVF32, true},
		{"sparse_mla_prefill", 16, kvcache.KVFP8DSMLA, true},
	} {
		shape := fmt.Sprintf("rows=%d heads=%d topk=%d kv=%s", sc.rows, heads, topk, sc.kv)
		if sc.kvcache {
			shape += " source=kvcache"
		}
		cases = append(cases, benchCase{
			kernel: sc.kernel,
			shape:  shape,
			flops:  float64(sc.rows) * attnFlops,
			bytes:  float64(sc.rows*topk) * float64(kvcache.RowBytes(sc.kv)),
			setup:  func() (func(), error) { return setupSparse(sc.rows, heads, topk, pool, sc.kv, sc.kvcache) },
		})
	}
	const nkeys, ih, idim = 64 << 10, 32, 128
	for _, paged := range []bool{false, true} {
		for _, idx := range []kvcache.IndexerDType{kvcache.IdxF32, kvcache.IdxFP8} {
			shape := fmt.Sprintf("queries=1 keys=%d heads=%d dim=%d topk=%d keys=%s", nkeys, ih, idim, topk, idx)
			if paged {
				shape += " slots=paged"
			}
			cases = append(cases, benchCase{
				kernel:      "indexer_scores_topk",
				shape:       shape,
				flops:       float64(nkeys) * ih * idim * 2,
				bytes:       float64(nkeys) * float64(kvcache.KeyBytes(idx, idim)),
				memoryBound: true,
				setup:       func() (func(), error) { return setupIndexer(nkeys, ih, idim, topk, idx, paged) },
			})
		}
	}
	for _, dtype := range []string{"f32", "bf16", "fp8"} {
		bpw := map[string]float64{"f32": 4, "bf16": 2, "fp8": 1}[dtype]
		for _, g := range []struct{ rows, out, in int }{
			{128, 2048, 6144}, {16, 2048, 6144}, {128, 576, 7168}, {8, 2048, 6144}, {64, 2048, 6144}, {512, 2048, 6144},
		} {
			cases = append(cases, benchCase{
				kernel: "gemm_" + dtype,
				shape:  fmt.Sprintf("rows=%d out=%d in=%d", g.rows, g.out, g.in),
				flops:  2 * float64(g.rows*g.out*g.in),
				bytes:  bpw * float64(g.out*g.in),
				setup:  func() (func(), error) { return setupGEMM(g.rows, g.out, g.in, dtype) },
			})
		}
		// 7168×4096 is larger than the last-level cache in every format;
		// the rest are GLM-5's projections and experts (gemvShapes).
		for _, g := range append([]gemvShape{{"", 7168, 4096}}, gemvShapes...) {
			shape := fmt.Sprintf("rows=1 out=%d in=%d", g.out, g.in)
			if g.name != "" {
				shape += " " + g.name
			}
			cases = append(cases, benchCase{
				kernel:      "gemv_" + dtype,
				shape:       shape,
				flops:       2 * float64(g.out*g.in),
				bytes:       bpw * float64(g.out*g.in),
				memoryBound: true,
				setup:       func() (func(), error) { return setupGEMM(1, g.out, g.in, dtype) },
			})
		}
	}
	return cases
}

// benchRand fills inputs with FlashMLA's test distribution scaled down, so
// that softmax weights are spread over many keys.
func benchRand(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(scale * (rng.NormFloat64()/10 + (rng.Float64()-0.5)/10))
	}
	return v
}

// setupSparse builds a pool of KV rows, either in a kvcache.LayerCache of
// the given format (the engine's cache: f32 rows read as views, bf16 rows in
// place, fp8_ds_mla rows decoded a block at a time) or, for
// bf16, in an mla.DenseKVBF16 that the fast path reads in place.
func setupSparse(rows, heads, topk, pool int, kv kvcache.KVDType, useCache bool) (func(), error) {
	const blockSize = 64
	rng := rand.New(rand.NewPCG(1, 2))
	var src mla.KVSource
	switch {
	case useCache:
		c, err := kvcache.NewCache(1, pool/blockSize, blockSize, kv, kvcache.IdxF32, 0)
		if err != nil {
			return nil, err
		}
		lc := c.Layer(0)
		for s := range pool {
			lc.WriteRow(int32(s), benchRand(rng, mla.RowDim, 1))
		}
		src = lc
	case kv == kvcache.KVBF16:
		d := make(mla.DenseKVBF16, pool*mla.RowDim)
		numfmt.F32sToBF16(d, benchRand(rng, pool*mla.RowDim, 1))
		src = d
	default:
		return nil, fmt.Errorf("no in-place source for kv format %s", kv)
	}
	const sets = 8
	indices := make([][]int32, sets)
	q := make([][]float32, sets)
	for k := range sets {
		indices[k] = make([]int32, rows*topk)
		for r := range rows {
			for j, p := range rng.Perm(pool)[:topk] {
				indices[k][r*topk+j] = int32(p)
			}
		}
		q[k] = benchRand(rng, rows*heads*mla.RowDim, 1)
	}
	out := make([]float32, rows*heads*mla.LatentDim)
	lse := make([]float32, rows*heads)
	ws := mla.NewWorkspace(topk, heads)
	k := 0
	return func() {
		mla.SparseAttention(out, lse, nil, q[k], rows, heads, src, indices[k], topk, nil, 0.0625, ws)
		k = (k + 1) % sets
	}, nil
}

func setupIndexer(nkeys, heads, dim, topk int, idx kvcache.IndexerDType, paged bool) (func(), error) {
	const blockSize = 64
	c, err := kvcache.NewCache(1, nkeys/blockSize, blockSize, kvcache.KVBF16, idx, dim)
	if err != nil {
		return nil, err
	}
	lc := c.Layer(0)
	rng := rand.New(rand.NewPCG(3, 4))
	slots := make([]int32, nkeys)
	if paged {
		// A sequence's positions through a block table: its blocks in any
		// order, the positions of a block in consecutive slots.
		for i, b := range rng.Perm(nkeys / blockSize) {
			for o := range blockSize {
				slots[i*blockSize+o] = int32(b*blockSize + o)
			}
		}
	} else {
		// Every position in a random slot: no two consecutive keys share
		// a block (the worst case for the memory system).
		for j, p := range rng.Perm(nkeys) {
			slots[j] = int32(p)
		}
	}
	for _, p := range slots {
		lc.WriteKey(p, benchRand(rng, dim, 10))
	}
	q := benchRand(rng, heads*dim, 10)
	w := benchRand(rng, heads, 1)
	ends := []int32{int32(nkeys)}
	scores := make([]float32, nkeys)
	picked := make([]int32, topk)
	counts := make([]int32, 1)
	var keys mla.KeySource = lc
	return func() {
		mla.IndexerScores(scores, q, w, 1, heads, dim, keys, slots, ends)
		mla.IndexerTopK(picked, counts, scores, 1, nkeys, topk)
	}, nil
}

// gemvShape is a GEMV benchmark shape [out, in], named after the weight.
type gemvShape struct {
	name    string
	out, in int
}

// gemvShapes are GLM-5's projections and experts that a decode step
// multiplies by one activation row.
var gemvShapes = []gemvShape{
	{"q_a", 2048, 6144}, {"q_b", 16384, 2048}, {"kv_a_proj_with_mqa", 576, 6144}, {"o_proj", 6144, 16384},
	{"expert_gate_up", 2048, 6144}, {"expert_down", 6144, 2048}, {"indexer_wq_b", 4096, 2048},
}

// setupGEMM builds the weights of a projection in dtype (f32, bf16, or fp8
// block-quantized by kernels.QuantizeFP8 as checkpoints are). A one-row product (GEMV,
// memory-bound) cycles through copies of the weights in distinct memory,
// gemvStreamBytes in all (at least gemvCopies), so that every call streams
// its weights from memory even when the machine's last-level caches
// together hold several matrices (two cores on two core complexes hold
// 64 MiB).
func setupGEMM(rows, out, in int, dtype string) (func(), error) {
	rng := rand.New(rand.NewPCG(5, 6))
	wf := benchRand(rng, out*in, 10)
	w := &kernels.Matrix{Rows: out, Cols: in}
	switch dtype {
	case "f32":
		w.F32 = wf
	case "bf16":
		w.BF16 = make([]uint16, len(wf))
		numfmt.F32sToBF16(w.BF16, wf)
	case "fp8":
		var err error
		if w, err = kernels.QuantizeFP8(out, in, wf); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown weight dtype %q", dtype)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	ws := []*kernels.Matrix{w}
	if rows == 1 {
		size := len(w.F32)*4 + len(w.BF16)*2 + len(w.FP8)
		for len(ws) < max(gemvCopies, gemvStreamBytes/max(1, size)) {
			c := *w
			c.F32, c.BF16, c.FP8 = slices.Clone(w.F32), slices.Clone(w.BF16), slices.Clone(w.FP8)
			ws = append(ws, &c)
		}
	}
	x := benchRand(rng, rows*in, 10)
	dst := make([]float32, rows*out)
	k := 0
	return func() {
		kernels.MatMulT(dst, x, rows, ws[k])
		k = (k + 1) % len(ws)
	}, nil
}

const (
	// gemvCopies is the least number of weight matrices a GEMV benchmark
	// cycles through (3 × 59 MB in bf16 at 7168×4096).
	gemvCopies = 3
	// gemvStreamBytes is how many bytes of weights, at least, a GEMV
	// benchmark cycles through: more than the last-level caches hold.
	gemvStreamBytes = 160 << 20
)
