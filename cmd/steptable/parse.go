package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// caseKey names one BenchmarkStep case: a decode step (ctx and batch set)
// or a prefill (len set).
type caseKey struct {
	model, weights string
	threads        int
	prefill        bool
	ctx, batch     int // decode
	len            int // prefill
}

// result is one line of a benchmark run: its case and its metrics by unit
// ("tokens/s", "roofline", "ns/op", …).
type result struct {
	key     caseKey
	metrics map[string]float64
}

// maxPairs bounds the value/unit pairs a line may hold: BenchmarkStep
// reports about a dozen.
const maxPairs = 64

// parseLine reads one line of `go test -bench` output. ok is false for a
// line that is not a BenchmarkStep result (anything else a run prints);
// err is set for a BenchmarkStep line that does not have the shape a
// result line has.
func parseLine(line string) (r result, ok bool, err error) {
	f := strings.Fields(line)
	if len(f) == 0 || !strings.HasPrefix(f[0], "BenchmarkStep/") {
		return result{}, false, nil
	}
	if len(f) < 4 {
		// The bare name, printed when a case starts (-v) or fails.
		return result{}, false, nil
	}
	key, err := parseName(strings.TrimPrefix(f[0], "BenchmarkStep/"))
	if err != nil {
		return result{}, false, err
	}
	if _, err := strconv.Atoi(f[1]); err != nil {
		return result{}, false, fmt.Errorf("%s: iteration count %q: %w", f[0], f[1], err)
	}
	pairs := f[2:]
	if len(pairs)%2 != 0 {
		return result{}, false, fmt.Errorf("%s: %d fields after the iteration count, want value and unit pairs", f[0], len(pairs))
	}
	if len(pairs)/2 > maxPairs {
		return result{}, false, fmt.Errorf("%s: %d metrics, at most %d", f[0], len(pairs)/2, maxPairs)
	}
	r = result{key: key, metrics: make(map[string]float64, len(pairs)/2)}
	for i := 0; i < len(pairs); i += 2 {
		v, err := strconv.ParseFloat(pairs[i], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return result{}, false, fmt.Errorf("%s: metric %s: value %q is not a finite number", f[0], pairs[i+1], pairs[i])
		}
		if _, dup := r.metrics[pairs[i+1]]; dup {
			return result{}, false, fmt.Errorf("%s: metric %s reported twice", f[0], pairs[i+1])
		}
		r.metrics[pairs[i+1]] = v
	}
	return r, true, nil
}

// parseName reads a case name after "BenchmarkStep/":
// model/weights/threads=N/decode/ctx=C/batch=B or
// model/weights/threads=N/prefill/len=L, with go test's -GOMAXPROCS
// suffix on the last element when it prints one.
func parseName(name string) (caseKey, error) {
	p := strings.Split(name, "/")
	if n := len(p); n > 0 {
		if i := strings.LastIndexByte(p[n-1], '-'); i > 0 && allDigits(p[n-1][i+1:]) {
			p[n-1] = p[n-1][:i]
		}
	}
	var k caseKey
	bad := func(why string) (caseKey, error) {
		return caseKey{}, fmt.Errorf("case %q: %s (want model/weights/threads=N/decode/ctx=C/batch=B or model/weights/threads=N/prefill/len=L)", name, why)
	}
	if len(p) < 5 {
		return bad("too few elements")
	}
	k.model, k.weights = p[0], p[1]
	if k.model == "" || k.weights == "" {
		return bad("empty model or weights")
	}
	var err error
	if k.threads, err = positiveField(p[2], "threads"); err != nil {
		return bad(err.Error())
	}
	switch {
	case p[3] == "decode" && len(p) == 6:
		if k.ctx, err = positiveField(p[4], "ctx"); err != nil {
			return bad(err.Error())
		}
		if k.batch, err = positiveField(p[5], "batch"); err != nil {
			return bad(err.Error())
		}
	case p[3] == "prefill" && len(p) == 5:
		k.prefill = true
		if k.len, err = positiveField(p[4], "len"); err != nil {
			return bad(err.Error())
		}
	default:
		return bad("not a decode or prefill case")
	}
	return k, nil
}

// positiveField reads "name=N" with N a positive integer.
func positiveField(s, name string) (int, error) {
	v, ok := strings.CutPrefix(s, name+"=")
	if !ok {
		return 0, fmt.Errorf("element %q is not %s=N", s, name)
	}
	if !allDigits(v) || len(v) > 9 {
		return 0, fmt.Errorf("%s=%q is not a positive integer below 10^9", name, v)
	}
	n, _ := strconv.Atoi(v)
	if n <= 0 {
		return 0, fmt.Errorf("%s=%d is not positive", name, n)
	}
	return n, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
