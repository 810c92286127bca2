package kvcache

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/mla"
)

// BenchmarkIndexerKeys32K scores one GLM-5 indexer query (32 heads × 128)
// against 32,768 keys of a layer's cache, on one thread, the three sources
// in turns within each iteration, each call followed by an FMA probe:
// fp8-memory-% reads the fp8 keys after 256 MiB went past (as in a decode
// step, after the weights), fp8-cached-% right after the previous call
// read them, f32-memory-% f32 keys after the 256 MiB. Each is the median
// over the iterations of the scores' FLOPs (2·32·128 a key) over the
// call's time at the probe's rate: the scoring part of the indexer's
// roofline fraction, without the top-k. decode-of-fp8-% is the median of
// the fp8 keys' decoding alone (DecodeKeys over the same keys, 1,024 at a
// time, after the 256 MiB) over the fp8-memory call's time.
func BenchmarkIndexerKeys32K(b *testing.B) {
	const n, heads, dim, block = 32768, 32, 128, 64
	r := rand.New(rand.NewPCG(61, 62))
	layers := map[IndexerDType]*LayerCache{}
	for _, idx := range []IndexerDType{IdxFP8, IdxF32} {
		c, err := NewCache(1, n/block, block, KVBF16, idx, dim)
		if err != nil {
			b.Fatal(err)
		}
		layers[idx] = c.Layer(0)
	}
	key := make([]float32, dim)
	slots := make([]int32, n)
	for j := range n {
		for i := range key {
			key[i] = float32(r.NormFloat64())
		}
		for _, lc := range layers {
			lc.WriteKey(int32(j), key)
		}
		slots[j] = int32(j)
	}
	q := make([]float32, heads*dim)
	for i := range q {
		q[i] = float32(r.NormFloat64())
	}
	w := make([]float32, heads)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	scores := make([]float32, n)
	ends := []int32{n}
	sc := mla.NewIndexerScratch(heads, dim)
	flush := make([]byte, 256<<20)
	cases := []struct {
		name  string
		keys  *LayerCache
		flush bool
	}{{"fp8-memory-%", layers[IdxFP8], true}, {"fp8-cached-%", layers[IdxFP8], false}, {"f32-memory-%", layers[IdxF32], true}}
	defer kernels.SetThreads(kernels.SetThreads(1))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	runtime.GC() // the set-up's garbage, not during the calls
	fr := make([][]float64, len(cases))
	var dec []float64
	decoded := make([]float32, 1024*dim)
	for b.Loop() {
		for c, cs := range cases {
			if cs.flush {
				for i := 0; i < len(flush); i += 64 {
					flush[i]++
				}
			}
			t0 := time.Now()
			mla.IndexerScoresScratch(sc, scores, q, w, 1, heads, dim, cs.keys, slots, ends)
			s := time.Since(t0).Seconds()
			t1 := time.Now()
			peak := kernels.FMAPeakLoop(500_000) / time.Since(t1).Seconds()
			fr[c] = append(fr[c], 2*float64(n*heads*dim)/s/peak)
			if c == 0 {
				for i := 0; i < len(flush); i += 64 {
					flush[i]++
				}
				t0 := time.Now()
				for j0 := 0; j0 < n; j0 += 1024 {
					cs.keys.DecodeKeys(decoded, slots, j0, j0+1024)
				}
				dec = append(dec, time.Since(t0).Seconds()/s)
			}
		}
	}
	slices.Sort(dec)
	b.ReportMetric(100*dec[len(dec)/2], "decode-of-fp8-%")
	for c, cs := range cases {
		slices.Sort(fr[c])
		b.ReportMetric(100*fr[c][len(fr[c])/2], cs.name)
	}
}
