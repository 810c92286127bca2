package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpmla/cpmla/kernels"
)

// BenchmarkStepProfile times every product of BenchmarkStep's decode steps
// (one thread or two, 512 of context), the sparse attention and the
// indexer's scoring and top-k, and logs, per product shape and for those
// two, the time against the part's own roofline (max(bytes / read bandwidth,
// FLOPs / FMA peak), with the probes of machinePeaks taken before the
// steps); the rest (norms, RoPE, writing the cache, SwiGLU, routing, the
// embedding lookups) is one line, with the lookups' roofline, the only part
// of it the step's cost counts. It reports the timed
// parts' share of the step time (timed-share) and their time against their
// roofline (timed-of-bound). An fp8 product whose roofline the fp8 product
// rate of its rows raises (Limits.FP8, measured by machineFP8) also shows
// that roofline and the fraction of it reached; timed-of-fp8-bound is the
// timed parts against their rooflines with those rates. Select with -bench,
// e.g.
//
//	go test ./model -run XXX -bench 'StepProfile/glm5-shape/fp8/threads=1/batch=8' -benchtime 20x
func BenchmarkStepProfile(b *testing.B) {
	for _, mc := range stepCases {
		for _, threads := range []int{1, 2} {
			for _, batch := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/threads=%d/batch=%d", mc.name, mc.weights, threads, batch), func(b *testing.B) {
					defer kernels.SetThreads(kernels.SetThreads(threads))
					profileDecode(b, stepModel(b, mc.name, mc.weights), 512, batch, threads)
				})
			}
		}
	}
}

// profileShape is what BenchmarkStepProfile sums per product shape.
type profileShape struct {
	name         string
	calls        int
	ns, boundNS  float64
	fp8NS        float64 // the roofline with the fp8 product rates
	bytes, flops int64
}

func profileDecode(b *testing.B, m *Model, ctx, batch, threads int) {
	d := decodeRunner(b, m, ctx)
	seqs, toks := make([]Seq, batch), make([]int32, batch)
	d.step(b, seqs, toks) // warm-up
	fma, bw := machinePeaks(threads)
	l := Limits{ReadBW: bw, FMAPeak: fma}
	lf := Limits{ReadBW: bw, FMAPeak: fma, FP8: machineFP8(threads)}
	shapes := map[string]*profileShape{}
	var stepNS, restBound float64
	d.r.reads.timed = true
	defer func() { d.r.reads.timed = false }()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		d.step(b, seqs, toks)
		stepNS += float64(time.Since(t0))
		for _, o := range d.r.reads.ops {
			bound, fp8 := 1e9*o.bound(l), 1e9*o.bound(lf)
			var key string
			switch {
			case o.kind == opAttention && o.ns > 0:
				key = "sparse attention"
			case o.kind == opIndexer && o.ns > 0:
				key = "indexer scores and top-k"
			case o.kind != opProduct:
				restBound += bound
				continue
			case o.heads > 1:
				key = fmt.Sprintf("%s %d heads of %d×%d, %d rows", strings.ToLower(o.w.DType()), o.heads, o.w.Rows, o.w.Cols, o.rows)
			default:
				key = fmt.Sprintf("%s %d×%d, %d rows", strings.ToLower(o.w.DType()), o.w.Rows, o.w.Cols, o.rows)
			}
			p := shapes[key]
			if p == nil {
				p = &profileShape{name: key}
				shapes[key] = p
			}
			p.calls++
			p.ns += float64(o.ns)
			p.bytes += o.bytes
			p.flops += o.flops
			p.boundNS += bound
			p.fp8NS += fp8
		}
	}
	b.StopTimer()
	list := slices.SortedFunc(func(yield func(*profileShape) bool) {
		for _, p := range shapes {
			if !yield(p) {
				return
			}
		}
	}, func(a, c *profileShape) int { return cmp.Compare(c.ns, a.ns) })
	var timedNS, timedBound, timedFP8 float64
	var sb strings.Builder
	fmt.Fprintf(&sb, "FMA peak %.0f GFLOP/s, read %.1f GB/s, fp8 products %s; per step:\n", fma/1e9, bw/1e9, fp8RatesText(lf.FP8))
	fmt.Fprintf(&sb, "| part | calls | ms | share of step | roofline ms | of its roofline | bound by | with the fp8 rate ms | of it |\n|---|---|---|---|---|---|---|---|---|\n")
	n := float64(b.N)
	for _, p := range list {
		timedNS, timedBound, timedFP8 = timedNS+p.ns, timedBound+p.boundNS, timedFP8+p.fp8NS
		by := "memory"
		if float64(p.flops)/l.FMAPeak > float64(p.bytes)/l.ReadBW {
			by = "FMA"
		}
		withFP8 := "– | –"
		if p.fp8NS > p.boundNS {
			withFP8 = fmt.Sprintf("%.3f | %.0f %%", p.fp8NS/n/1e6, 100*p.fp8NS/p.ns)
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %.3f | %.1f %% | %.3f | %.0f %% | %s | %s |\n", p.name, float64(p.calls)/n, p.ns/n/1e6, 100*p.ns/stepNS, p.boundNS/n/1e6, 100*p.boundNS/p.ns, by, withFP8)
	}
	rest := stepNS - timedNS
	fmt.Fprintf(&sb, "| everything else (norms, RoPE, cache writes, SwiGLU, routing; lookups %.3f ms of roofline) | – | %.3f | %.1f %% | – | – | – | – | – |\n", restBound/n/1e6, rest/n/1e6, 100*rest/stepNS)
	b.Log(sb.String())
	b.ReportMetric(timedNS/stepNS, "timed-share")
	b.ReportMetric(timedBound/timedNS, "timed-of-bound")
	b.ReportMetric(timedFP8/timedNS, "timed-of-fp8-bound")
	b.ReportMetric(float64(batch)*n/(stepNS/1e9), "tokens/s")
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
