package model

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpmla/cpmla/kernels"
)

// profileCases are the step benchmarks' cases and glm5-dense-350m with
// power-of-two fp8 scales (stepFP8UE8M0).
var profileCases = append(stepCases[:len(stepCases):len(stepCases)], struct{ name, weights string }{"glm5-dense-350m", stepFP8UE8M0})

// BenchmarkStepProfile times every product of BenchmarkStep's decode steps
// (one thread or two; 512 of context, and 8,192 under the suffix
// /ctx=8192, where attention and the indexer weigh more; one sequence also
// at 2,048 and 32,768, the long-context split), the sparse attention and
// the indexer's scoring and top-k, and logs, per product shape and for
// those two, the time against the part's own roofline (max(bytes / read
// bandwidth, FLOPs / FMA peak), with the probes of machinePeaks taken
// before the steps); the rest (norms, RoPE, writing the cache, SwiGLU,
// routing, the embedding lookups) is one line, with the lookups' roofline,
// the only part of it the step's cost counts. It reports the timed
// parts' share of the step time (timed-share) and their time against their
// roofline (timed-of-bound). An fp8 product whose roofline the fp8 product
// rate of its rows raises (Limits.FP8, measured by machineFP8) also shows
// that roofline and the fraction of it reached; timed-of-fp8-bound is the
// timed parts against their rooflines with those rates. Select with -bench,
// e.g.
//
//	go test ./model -run XXX -bench 'StepProfile/glm5-shape/fp8/threads=1/batch=8$' -benchtime 20x
//	go test ./model -run XXX -bench 'StepProfile/glm5-dense-350m/bf16/threads=1/batch=8/ctx=8192' -benchtime 10x
func BenchmarkStepProfile(b *testing.B) {
	for _, mc := range profileCases {
		for _, threads := range []int{1, 2} {
			for _, batch := range []int{1, 8} {
				ctxs := []int{512, 8192}
				if batch == 1 {
					// The long-context split: weights, indexer and
					// attention per token at 2, 8 and 32 Ki.
					ctxs = []int{512, 2048, 8192, 32768}
				}
				for _, ctx := range ctxs {
					name := fmt.Sprintf("%s/%s/threads=%d/batch=%d", mc.name, mc.weights, threads, batch)
					if ctx != 512 {
						name += fmt.Sprintf("/ctx=%d", ctx)
					}
					b.Run(name, func(b *testing.B) {
						defer kernels.SetThreads(kernels.SetThreads(threads))
						profileDecode(b, stepModel(b, mc.name, mc.weights), ctx, batch, threads)
					})
				}
			}
		}
	}
}

// BenchmarkPrefillProfile is BenchmarkStepProfile for a prompt: it times
// every product of BenchmarkStep's prefill of len tokens (in steps of 512,
// one thread or two), the sparse attention and the indexer's scoring and
// top-k, and logs the same table, a prompt per iteration. A product's rows
// are a class there (one row; 2–16, the decode-sized tiles; 17–64, which
// fp8 weights decode a group at a time; more, the strips over blocks of
// weights), since the routed experts of a prompt take every count. e.g.
//
//	go test ./model -run XXX -bench 'PrefillProfile/glm5-moe-shape/fp8/threads=1/len=512' -benchtime 3x
func BenchmarkPrefillProfile(b *testing.B) {
	for _, mc := range profileCases {
		for _, threads := range []int{1, 2} {
			for _, n := range []int{512, 4096} {
				b.Run(fmt.Sprintf("%s/%s/threads=%d/len=%d", mc.name, mc.weights, threads, n), func(b *testing.B) {
					defer kernels.SetThreads(kernels.SetThreads(threads))
					profilePrefill(b, stepModel(b, mc.name, mc.weights), n, threads)
				})
			}
		}
	}
}

// profileShape is what a profile sums per product shape.
type profileShape struct {
	name         string
	calls        int
	ns, boundNS  float64
	fp8NS        float64 // the roofline with the fp8 product rates
	bytes, flops int64
}

// stepParts sums the timed parts of a profile's steps: per product shape
// (key names it), the attention, the indexer, and the roofline of what is
// not timed.
type stepParts struct {
	unit      string // "step" or "prompt": what the table is per
	l, lf     Limits
	key       func(o *opCost) string
	shapes    map[string]*profileShape
	restBound float64
}

func newStepParts(unit string, l, lf Limits, key func(o *opCost) string) *stepParts {
	return &stepParts{unit: unit, l: l, lf: lf, key: key, shapes: map[string]*profileShape{}}
}

// add sums one step's ops.
func (s *stepParts) add(ops []opCost) {
	for i := range ops {
		o := &ops[i]
		bound, fp8 := 1e9*o.bound(s.l), 1e9*o.bound(s.lf)
		var key string
		switch {
		case o.kind == opAttention && o.ns > 0:
			key = "sparse attention"
		case o.kind == opIndexer && o.ns > 0:
			key = "indexer scores and top-k"
		case o.kind != opProduct:
			s.restBound += bound
			continue
		default:
			key = s.key(o)
		}
		p := s.shapes[key]
		if p == nil {
			p = &profileShape{name: key}
			s.shapes[key] = p
		}
		p.calls++
		p.ns += float64(o.ns)
		p.bytes += o.bytes
		p.flops += o.flops
		p.boundNS += bound
		p.fp8NS += fp8
	}
}

// report logs the table of n steps (or prompts) that took stepNS in all and reports
// timed-share, timed-of-bound and timed-of-fp8-bound.
func (s *stepParts) report(b *testing.B, n, stepNS float64) {
	list := slices.SortedFunc(func(yield func(*profileShape) bool) {
		for _, p := range s.shapes {
			if !yield(p) {
				return
			}
		}
	}, func(a, c *profileShape) int { return cmp.Or(cmp.Compare(c.ns, a.ns), cmp.Compare(a.name, c.name)) })
	var timedNS, timedBound, timedFP8 float64
	var sb strings.Builder
	fmt.Fprintf(&sb, "FMA peak %.0f GFLOP/s, read %.1f GB/s, fp8 products %s; per %s, the mean of %.0f:\n", s.l.FMAPeak/1e9, s.l.ReadBW/1e9, fp8RatesText(s.lf.FP8), s.unit, n)
	fmt.Fprintf(&sb, "| part | calls | ms | share of %s | roofline ms | of its roofline | bound by | with the fp8 rate ms | of it |\n|---|---|---|---|---|---|---|---|---|\n", s.unit)
	for _, p := range list {
		timedNS, timedBound, timedFP8 = timedNS+p.ns, timedBound+p.boundNS, timedFP8+p.fp8NS
		by := "memory"
		if float64(p.flops)/s.l.FMAPeak > float64(p.bytes)/s.l.ReadBW {
			by = "FMA"
		}
		withFP8 := "– | –"
		if p.fp8NS > p.boundNS {
			withFP8 = fmt.Sprintf("%.3f | %.0f %%", p.fp8NS/n/1e6, 100*p.fp8NS/p.ns)
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %.3f | %.1f %% | %.3f | %.0f %% | %s | %s |\n", p.name, float64(p.calls)/n, p.ns/n/1e6, 100*p.ns/stepNS, p.boundNS/n/1e6, 100*p.boundNS/p.ns, by, withFP8)
	}
	rest := stepNS - timedNS
	fmt.Fprintf(&sb, "| everything else (norms, RoPE, cache writes, SwiGLU, routing; lookups %.3f ms of roofline) | – | %.3f | %.1f %% | – | – | – | – | – |\n", s.restBound/n/1e6, rest/n/1e6, 100*rest/stepNS)
	b.Log(sb.String())
	b.ReportMetric(timedNS/stepNS, "timed-share")
	b.ReportMetric(timedBound/timedNS, "timed-of-bound")
	b.ReportMetric(timedFP8/timedNS, "timed-of-fp8-bound")
}

// productKey names a product by its weights' dtype and shape and, for
// per-head products, their count.
func productKey(o *opCost) string {
	if o.heads > 1 {
		return fmt.Sprintf("%s %d heads of %d×%d", strings.ToLower(o.w.DType()), o.heads, o.w.Rows, o.w.Cols)
	}
	return fmt.Sprintf("%s %d×%d", strings.ToLower(o.w.DType()), o.w.Rows, o.w.Cols)
}

// decodeKey is productKey with the product's rows.
func decodeKey(o *opCost) string { return fmt.Sprintf("%s, %d rows", productKey(o), o.rows) }

// prefillKey is productKey with the class of the product's rows.
func prefillKey(o *opCost) string {
	rows := "65+ rows"
	switch {
	case o.rows == 1:
		rows = "1 row"
	case o.rows <= 16:
		rows = "2–16 rows"
	case o.rows <= 64:
		rows = "17–64 rows"
	}
	return productKey(o) + ", " + rows
}

func profileDecode(b *testing.B, m *Model, ctx, batch, threads int) {
	d := decodeRunner(b, m, ctx)
	seqs, toks := make([]Seq, batch), make([]int32, batch)
	d.step(b, seqs, toks) // warm-up
	fma, bw := machinePeaks(threads)
	parts := newStepParts("step", Limits{ReadBW: bw, FMAPeak: fma}, Limits{ReadBW: bw, FMAPeak: fma, FP8: machineFP8(threads)}, decodeKey)
	var stepNS, steps float64
	d.r.reads.timed = true
	defer func() { d.r.reads.timed = false }()
	for b.Loop() {
		t0 := time.Now()
		d.step(b, seqs, toks)
		stepNS += float64(time.Since(t0))
		parts.add(d.r.reads.ops)
		steps++
	}
	parts.report(b, steps, stepNS)
	b.ReportMetric(float64(batch)*steps/(stepNS/1e9), "tokens/s")
}

// profilePrefill prefills a prompt of n tokens per iteration, in steps of
// 512 as benchPrefill does, with every product timed. The fp8 product rates
// are those of decode-sized products, so a prompt's table leaves them out.
func profilePrefill(b *testing.B, m *Model, n, threads int) {
	p := newPromptRun(b, m, n)
	p.prefill(b, nil) // warm-up
	runtime.GC()      // finish a cycle the set-up's garbage started, not during the prompts
	fma, bw := machinePeaks(threads)
	l := Limits{ReadBW: bw, FMAPeak: fma}
	parts := newStepParts("prompt", l, l, prefillKey)
	p.r.reads.timed = true
	var ns, prompts float64
	for b.Loop() {
		// Each step's time, not the summing of its parts after it.
		t0 := time.Now()
		p.prefill(b, func() {
			ns += float64(time.Since(t0))
			parts.add(p.r.reads.ops)
			t0 = time.Now()
		})
		prompts++
	}
	parts.report(b, prompts, ns)
	b.ReportMetric(float64(n)*prompts/(ns/1e9), "tokens/s")
}

// fp8RatesText is the fp8 product rates as "rows: Gcodes/s" pairs.
func fp8RatesText(rates []FP8Rate) string {
	if len(rates) == 0 {
		return "not measured"
	}
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = fmt.Sprintf("%d rows %.1f", r.Rows, r.Codes/1e9)
	}
	return strings.Join(parts, ", ") + " Gcodes/s"
}
