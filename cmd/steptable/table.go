package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cpmla/cpmla/bench"
)

// runs collects every run's metrics of each case.
type runs map[caseKey][]map[string]float64

func (rs runs) add(r result) { rs[r.key] = append(rs[r.key], r.metrics) }

// values is metric unit of every run of k that reports it.
func (rs runs) values(k caseKey, unit string) []float64 {
	var v []float64
	for _, m := range rs[k] {
		if x, ok := m[unit]; ok {
			v = append(v, x)
		}
	}
	return v
}

// median is the median of v (bench.Percentile's 50th: the mean of the
// middle two for an even count), 0 for none.
func median(v []float64) float64 {
	return bench.Percentile(slices.Sorted(slices.Values(v)), 50)
}

// fractionUnit is the metric a case's roofline fraction is read from: the
// whole-step roofline for a decode step, the FMA peak for a prefill.
func fractionUnit(k caseKey) string {
	if k.prefill {
		return "of-fma"
	}
	return "roofline"
}

// speedups returns, for a two-thread case k, its speed-up over the
// one-thread case of the same model, weights and shape (the ratio of the
// tokens/s medians) and the machine's own: the ratio of the two cases'
// roofline times per token, (f₁/r₁)/(f₂/r₂) for fractions f and rates r,
// which is how much faster the probes taken with two threads say the step
// could run. ok is false without both cases and their metrics.
func (rs runs) speedups(k caseKey) (step, machine float64, ok bool) {
	return rs.speedupsBy(k, fractionUnit(k))
}

// speedupsBy is speedups with the roofline fractions read from metric u
// (fp8Roofline for the roofline with the cores' fp8 product rates).
func (rs runs) speedupsBy(k caseKey, u string) (step, machine float64, ok bool) {
	if k.threads != 2 {
		return 0, 0, false
	}
	one := k
	one.threads = 1
	if _, has := rs[one]; !has {
		return 0, 0, false
	}
	r1, r2 := median(rs.values(one, "tokens/s")), median(rs.values(k, "tokens/s"))
	f1, f2 := median(rs.values(one, u)), median(rs.values(k, u))
	for _, v := range []float64{r1, r2, f1, f2} {
		if v <= 0 {
			return 0, 0, false
		}
	}
	return r2 / r1, (f1 / r1) / (f2 / r2), true
}

// fp8Roofline is the metric of a decode case with fp8 weights that holds
// its fraction of the whole-step roofline with the cores' fp8 product rates
// as the compute ceiling of its fp8 products (model.Runner.StepRoofline).
const fp8Roofline = "fp8-roofline"

// fp8Cells is the two columns of k at the fp8 rates: the spread of its
// fraction of that roofline, and for a two-thread case the machine's
// speed-up by it with the step's speed-up as a share of it; dashes where k
// reports no such fraction.
func (rs runs) fp8Cells(k caseKey) string {
	f := rs.values(k, fp8Roofline)
	if len(f) == 0 {
		return "– | –"
	}
	step, machine, ok := rs.speedupsBy(k, fp8Roofline)
	if !ok {
		return spread(f, 100, 0, " %") + " | –"
	}
	return fmt.Sprintf("%s | %.2f× (%.0f %%)", spread(f, 100, 0, " %"), machine, 100*step/machine)
}

// sortedKeys returns the cases of one kind (decode or prefill) ordered by
// model, weights, threads and shape.
func (rs runs) sortedKeys(prefill bool) []caseKey {
	var ks []caseKey
	for k := range rs {
		if k.prefill == prefill {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b caseKey) int {
		return cmp.Or(cmp.Compare(a.model, b.model), cmp.Compare(a.weights, b.weights), cmp.Compare(a.threads, b.threads),
			cmp.Compare(a.ctx, b.ctx), cmp.Compare(a.batch, b.batch), cmp.Compare(a.len, b.len))
	})
	return ks
}

// spread formats the median of v with its range in brackets, scaled by
// mul, with prec decimals and the unit after the median ("77 % (73–101)");
// a dash when v is empty.
func spread(v []float64, mul float64, prec int, unit string) string {
	if len(v) == 0 {
		return "–"
	}
	med := fmt.Sprintf("%.*f%s", prec, median(v)*mul, unit)
	if len(v) == 1 {
		return med
	}
	return fmt.Sprintf("%s (%.*f–%.*f)", med, prec, slices.Min(v)*mul, prec, slices.Max(v)*mul)
}

// partsCeilings is, per run of k that reports both fractions, the
// whole-step roofline over the sum of its parts' rooflines (roofline ÷
// of-parts: both divide a roofline time by the same step time). It is the
// largest whole-step fraction a step reaches that runs its parts one after
// another, each at its own roofline: the whole-step roofline lets one part's
// reading run under another's FMAs, which such a step cannot.
func (rs runs) partsCeilings(k caseKey) []float64 {
	var v []float64
	for _, m := range rs[k] {
		whole, okW := m["roofline"]
		parts, okP := m["of-parts"]
		if okW && okP && parts > 0 {
			v = append(v, whole/parts)
		}
	}
	return v
}

// single formats the median of v scaled by mul, a dash when v is empty.
func single(v []float64, mul float64, verb string) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf(verb, median(v)*mul)
}

// write prints the decode table and the prefill table of rs (each only
// when rs holds such cases).
func (rs runs) write(w io.Writer) error {
	var b strings.Builder
	if ks := rs.sortedKeys(false); len(ks) > 0 {
		b.WriteString("| model | weights | threads | ctx | batch | runs | tokens/s | 2 threads ÷ 1 | machine's 2 ÷ 1 | of the machine's | roofline | of the parts' rooflines | ceiling, parts one after another | bw GB/s | FMA GFLOP/s | roofline at the fp8 rates | machine's 2 ÷ 1 at them (step's share) |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, k := range ks {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				k.model, k.weights, k.threads, k.ctx, k.batch, len(rs[k]),
				spread(rs.values(k, "tokens/s"), 1, 1, ""), rs.ratioCells(k),
				spread(rs.values(k, fractionUnit(k)), 100, 0, " %"), single(rs.values(k, "of-parts"), 100, "%.0f %%"),
				single(rs.partsCeilings(k), 100, "%.0f %%"),
				single(rs.values(k, "bw-GB/s"), 1, "%.1f"), single(rs.values(k, "fma-GFLOP/s"), 1, "%.0f"),
				rs.fp8Cells(k))
		}
	}
	if ks := rs.sortedKeys(true); len(ks) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString("| model | weights | threads | prompt | runs | tokens/s | 2 threads ÷ 1 | machine's 2 ÷ 1 | of the machine's | of the FMA peak | FMA GFLOP/s |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, k := range ks {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %s | %s | %s |\n",
				k.model, k.weights, k.threads, k.len, len(rs[k]),
				spread(rs.values(k, "tokens/s"), 1, 1, ""), rs.ratioCells(k),
				spread(rs.values(k, fractionUnit(k)), 100, 0, " %"), single(rs.values(k, "fma-GFLOP/s"), 1, "%.0f"))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ratioCells is the three ratio columns of k: the step's speed-up, the
// machine's, and the first over the second; dashes unless k is a
// two-thread case with its one-thread counterpart.
func (rs runs) ratioCells(k caseKey) string {
	step, machine, ok := rs.speedups(k)
	if !ok {
		return "– | – | –"
	}
	return fmt.Sprintf("%.2f× | %.2f× | %.0f %%", step, machine, 100*step/machine)
}
