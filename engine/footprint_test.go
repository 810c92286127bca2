package engine

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
)

// allocatedBy is the bytes f allocates on the heap (all goroutines).
func allocatedBy(t *testing.T, f func() (Executor, error)) (Executor, int64) {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ex, err := f()
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	return ex, int64(after.TotalAlloc - before.TotalAlloc)
}

// RunnerBytes bounds what building an executor allocates, per rank, for
// single and parallel layouts, sparse and dense models and every cache
// dtype, and stays within a quarter of it (plus the runtime's fixed
// costs), so that a start-up refused by it would really not have fitted.
func TestRunnerBytesBoundsWhatRunnersAllocate(t *testing.T) {
	sparse, err := config.Load("glm5-mini")
	if err != nil {
		t.Fatal(err)
	}
	dense := *sparse
	dense.IndexTopK, dense.IndexNHeads, dense.IndexHeadDim = 0, 0, 0
	moe, err := config.Load("glm5-moe-mini")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg    *config.Model
		l      comm.Layout
		I      int
		ro     model.RunnerOptions
		kv     kvcache.KVDType
		idx    kvcache.IndexerDType
		prefix string
	}{
		{cfg: sparse, l: comm.Layout{TP: 1, PCP: 1, DCP: 1}, ro: model.RunnerOptions{MaxTokens: 512, MaxModelLen: 4096, MaxLogitRows: 16, MaxSeqs: 16, BlockSize: 16, NumBlocks: 300}},
		{cfg: sparse, l: comm.Layout{TP: 1, PCP: 1, DCP: 1}, ro: model.RunnerOptions{MaxTokens: 2048, MaxModelLen: 1024, MaxLogitRows: 64, MaxSeqs: 64, BlockSize: 16, NumBlocks: 100}, kv: kvcache.KVFP8DSMLA, idx: kvcache.IdxFP8},
		{cfg: &dense, l: comm.Layout{TP: 1, PCP: 1, DCP: 1}, ro: model.RunnerOptions{MaxTokens: 256, MaxModelLen: 2048, MaxLogitRows: 8, MaxSeqs: 8, BlockSize: 16, NumBlocks: 200}, kv: kvcache.KVBF16},
		{cfg: moe, l: comm.Layout{TP: 1, PCP: 1, DCP: 1}, ro: model.RunnerOptions{MaxTokens: 512, MaxModelLen: 2048, MaxLogitRows: 16, MaxSeqs: 16, BlockSize: 16, NumBlocks: 200}},
		{cfg: moe, l: comm.Layout{TP: 2, PCP: 1, DCP: 1}, ro: model.RunnerOptions{MaxTokens: 512, MaxModelLen: 2048, MaxLogitRows: 16, MaxSeqs: 16, BlockSize: 16, NumBlocks: 200}},
		// A drafting runner: the MTP layer's KV and indexer caches, its
		// expert load and the drafter's hidden banks.
		{cfg: moe, l: comm.Layout{TP: 1, PCP: 1, DCP: 1}, ro: model.RunnerOptions{MaxTokens: 512, MaxModelLen: 2048, MaxLogitRows: 96, MaxSeqs: 16, BlockSize: 16, NumBlocks: 200, MTP: true}},
		{cfg: moe, l: comm.Layout{TP: 2, PCP: 2, DCP: 2}, I: 1, ro: model.RunnerOptions{MaxTokens: 256, MaxModelLen: 1024, MaxLogitRows: 48, MaxSeqs: 8, BlockSize: 8, NumBlocks: 200, MTP: true}},
		{cfg: sparse, l: comm.Layout{TP: 2, PCP: 1, DCP: 2}, I: 1, ro: model.RunnerOptions{MaxTokens: 512, MaxModelLen: 2048, MaxLogitRows: 16, MaxSeqs: 16, BlockSize: 8, NumBlocks: 200}},
		{cfg: sparse, l: comm.Layout{TP: 1, PCP: 2, DCP: 2}, I: 2, ro: model.RunnerOptions{MaxTokens: 512, MaxModelLen: 2048, MaxLogitRows: 16, MaxSeqs: 16, BlockSize: 8, NumBlocks: 200}},
		{cfg: sparse, l: comm.Layout{TP: 2, PCP: 2, DCP: 4}, I: 1, ro: model.RunnerOptions{MaxTokens: 256, MaxModelLen: 1024, MaxLogitRows: 8, MaxSeqs: 8, BlockSize: 4, NumBlocks: 200}},
	} {
		name := fmt.Sprintf("%s/TP%d-PCP%d-DCP%d/T%d-L%d", map[bool]string{true: "sparse", false: "dense"}[tc.cfg.Sparse()], tc.l.TP, tc.l.PCP, tc.l.DCP, tc.ro.MaxTokens, tc.ro.MaxModelLen) + map[bool]string{true: "/mtp"}[tc.ro.MTP]
		t.Run(name, func(t *testing.T) {
			ro := tc.ro
			ro.KVDType, ro.IndexerDType = tc.kv, tc.idx
			if ro.KVDType == "" {
				ro.KVDType = kvcache.KVF32
			}
			if ro.IndexerDType == "" {
				ro.IndexerDType = kvcache.IdxF32
			}
			src := model.RandomTensors(tc.cfg, 1)
			var factory ExecutorFactory
			world := tc.l.World()
			if world == 1 {
				m, err := model.Build(tc.cfg, src, model.Shard{TPSize: 1})
				if err != nil {
					t.Fatal(err)
				}
				factory = SingleRank(m)
			} else {
				bp, err := cp.NewBackendPlan(cp.BackendConfig{Layout: tc.l, Interleave: max(tc.I, 1), BlockSize: ro.BlockSize, KVDtype: string(ro.KVDType), Backend: "auto",
					HeadsPerRank: tc.cfg.NumHeads / tc.l.TP, QKNopeHeadDim: tc.cfg.QKNopeHeadDim, Sparse: tc.cfg.Sparse()})
				if err != nil {
					t.Fatal(err)
				}
				if factory, _, err = InProcess(tc.cfg, src, Parallel{Layout: tc.l, Interleave: max(tc.I, 1), Backend: bp}); err != nil {
					t.Fatal(err)
				}
			}
			ex, got := allocatedBy(t, func() (Executor, error) { return factory(ro) })
			defer closeExecutor(ex)
			buf, cache, err := RunnerBytes(tc.cfg, ro, tc.l, tc.I)
			if err != nil {
				t.Fatal(err)
			}
			est := (buf + cache) * int64(world)
			const fixed = 1 << 20 // goroutines, group bookkeeping, runtime
			if est < got-fixed || est > got+got/4+fixed {
				t.Errorf("estimated %d bytes (%d buffers + %d cache per rank × %d ranks), building allocated %d", est, buf, cache, world, got)
			}
		})
	}
}

// Absurd sizes saturate instead of overflowing.
func TestRunnerBytesSaturates(t *testing.T) {
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		t.Fatal(err)
	}
	buf, cache, err := RunnerBytes(cfg, model.RunnerOptions{MaxTokens: math.MaxInt, MaxModelLen: math.MaxInt, MaxSeqs: math.MaxInt,
		MaxLogitRows: math.MaxInt, BlockSize: math.MaxInt, NumBlocks: math.MaxInt}, comm.Layout{TP: 1, PCP: math.MaxInt, DCP: math.MaxInt}, math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	if buf != math.MaxInt64 || cache != math.MaxInt64 {
		t.Errorf("got %d buffer and %d cache bytes, want both saturated at %d", buf, cache, int64(math.MaxInt64))
	}
}

// CheckMemory refuses, before anything is built, a start-up that cannot fit,
// naming the bytes and a setting that fits; the setting it names does fit.
func TestCheckMemoryRefusesWhatCannotFit(t *testing.T) {
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		t.Fatal(err)
	}
	avail := Available{Bytes: 4 << 30, Source: "test limit 4 GiB"}
	single := comm.Layout{TP: 1, PCP: 1, DCP: 1}
	const weights = 100 << 20
	for _, tc := range []struct {
		name   string
		opt    Options
		l      comm.Layout
		want   []string
		adjust func(o *Options, v int) // applies the suggested value
		flag   string
	}{
		{name: "memory limit beyond the process", opt: Options{MemoryLimit: 1 << 40}, l: single,
			want: []string{"--memory-limit", "more than the 4.00 GiB", "set --memory-limit to at most 4294967296"}},
		{name: "memory limit over many ranks", opt: Options{MemoryLimit: 1 << 30, RanksPerHost: 8}, l: comm.Layout{TP: 1, PCP: 8, DCP: 1},
			want: []string{"8 ranks", "set --memory-limit to at most 536870912"}},
		{name: "batched tokens", opt: Options{MaxNumBatchedTokens: 1 << 30, MemoryLimit: 2 << 30}, l: single,
			want: []string{"step buffers", "--max-num-batched-tokens"}, flag: "--max-num-batched-tokens",
			adjust: func(o *Options, v int) { o.MaxNumBatchedTokens = v }},
		{name: "sequences", opt: Options{MaxNumSeqs: 1 << 14, MaxNumBatchedTokens: 1 << 14, MemoryLimit: 2 << 30}, l: single,
			want: []string{"--max-num-seqs"}, flag: "--max-num-seqs", adjust: func(o *Options, v int) { o.MaxNumSeqs = v }},
		{name: "kv cache memory", opt: Options{KVCacheMemory: 1 << 40, MemoryLimit: 2 << 30}, l: single,
			want: []string{"KV cache at start-up 1024.00 GiB", "a smaller --kv-cache-memory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opt.WithDefaults(cfg)
			err := o.CheckMemory(cfg, tc.l, weights, avail)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tc.adjust == nil {
				return
			}
			var v int
			_, fixes, _ := strings.Cut(err.Error(), "; set ")
			_, after, _ := strings.Cut(fixes, tc.flag+" ")
			if _, err := fmt.Sscanf(after, "%d", &v); err != nil {
				t.Fatalf("no value after %s in %q", tc.flag, err)
			}
			tc.adjust(&o, v)
			o.MaxNumBatchedTokens = max(o.MaxNumBatchedTokens, o.MaxNumSeqs)
			if err := o.CheckMemory(cfg, tc.l, weights, avail); err != nil {
				t.Errorf("the suggested %s %d does not fit: %v", tc.flag, v, err)
			}
		})
	}
	if err := (Options{}).WithDefaults(cfg).CheckMemory(cfg, single, weights, avail); err != nil {
		t.Errorf("the defaults do not fit in 4 GiB: %v", err)
	}
}
