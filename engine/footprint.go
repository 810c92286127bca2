package engine

import (
	"fmt"
	"math"
	"strings"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
)

// RunnerBytes is what model.NewRunner allocates for ro on one rank of layout
// l with DCP interleave, computed without allocating: buffers are the step
// buffers (model.Runner.Buffers and the cross-rank helpers' own), cache the
// paged KV cache of ro.NumBlocks blocks (with ro.MTP, the MTP layers' caches
// and the drafter's hidden banks and glue too). Both are upper bounds that
// saturate at math.MaxInt64 instead of overflowing, so absurd sizes compare
// as absurd. ro.Parallel is ignored; l says where the rank sits.
func RunnerBytes(cfg *config.Model, ro model.RunnerOptions, l comm.Layout, interleave int) (buffers, cache int64, err error) {
	if l.TP < 1 || l.PCP < 1 || l.DCP < 1 {
		return 0, 0, fmt.Errorf("runner bytes: parallel sizes must be ≥ 1, got TP=%d PCP=%d DCP=%d", l.TP, l.PCP, l.DCP)
	}
	slot, err := plan.KVSlotBytes(cfg, kvOrDefault(ro.KVDType), idxOrDefault(ro.IndexerDType), plan.CacheLayers(cfg, ro.MTP))
	if err != nil {
		return 0, 0, err
	}
	cache = plan.MulSat(int64(max(ro.NumBlocks, 0)), int64(max(ro.BlockSize, 0)), slot)

	i64 := func(v int) int64 { return int64(max(v, 0)) }
	T := i64(ro.MaxTokens)
	seqs, logitRows := i64(max(ro.MaxSeqs, 1)), i64(max(ro.MaxLogitRows, 1))
	logitRows = min(logitRows, max(T, 1))
	H := i64(cfg.NumHeads / l.TP)
	D, dn, dr, dv, dc := i64(cfg.HiddenSize), i64(cfg.QKNopeHeadDim), i64(cfg.QKRopeHeadDim), i64(cfg.VHeadDim), i64(cfg.KVLoraRank)
	qIn := i64(max(cfg.QLoraRank, 1))
	il := i64(cfg.IntermediateSize / l.TP)
	N, P := i64(l.DCP), i64(l.PCP)
	I := i64(max(interleave, 1))
	maxLen := i64(ro.MaxModelLen)
	// The most positions of one sequence any DCP rank holds.
	localKeys := plan.AddSat(plan.MulSat(maxLen/max(N*I, 1)+1, I))
	topk := maxLen
	if cfg.Sparse() {
		topk = i64(cfg.IndexTopK)
	}
	blocks := int64(1)
	if N > 1 {
		blocks = P // the distinct PCP row blocks of a DCP group
	}
	sel := plan.MulSat(blocks, T)
	f := func(v ...int64) int64 { return plan.MulSat(append(v, 4)...) } // float32 and int32 buffers

	parts := []int64{
		f(4, T),                          // row positions, sequences, tokens, local rows
		f(seqs, localKeys),               // key slots
		plan.MulSat(seqs, 8*3+24),        // key offsets, lengths, tables (headers)
		f(logitRows),                     // logit rows
		f(2, T, D),                       // hidden, normed hidden
		f(T, qIn),                        // q latent
		f(T, H, dn+dr),                   // q
		f(T, dc+dr),                      // kv latent
		f(T, H, mla.RowDim),              // absorbed q
		f(T, H, mla.LatentDim),           // attention out
		f(T, H),                          // attention lse
		f(T, H, dv),                      // value heads
		f(T, D),                          // layer out
		f(T, max(dn+dc, dc+dv)),          // head gather (W_UK, W_UV)
		f(2, T, il),                      // mlp gate, up
		f(sel, topk),                     // top-k slots
		f(2, sel),                        // top-k counts, row requests
		f(logitRows, i64(cfg.VocabSize)), // logits
	}
	// The attention workspace (mla.WorkspaceBytes): gathered rows, row
	// headers, and the kernel's logits scratch with its split partials.
	nh := plan.MulSat(N, H)
	parts = append(parts, f(topk, mla.RowDim), plan.MulSat(topk, 48), f(2, nh, topk), f(nh, mla.LatentDim+2), f(topk))
	if l.TP > 1 {
		// The tp all-reduce; the TP members' shares of kv_a, q_a and the
		// indexer's query projection, and their gather.
		per := model.ShareRows(cfg.KVLoraRank+cfg.QKRopeHeadDim, l.TP)
		per = max(per, model.ShareRows(cfg.QLoraRank, l.TP))
		if cfg.Sparse() {
			per = max(per, model.ShareRows(cfg.IndexNHeads*cfg.IndexHeadDim, l.TP))
		}
		parts = append(parts, f(T, D), f(T, i64(per)), f(i64(l.TP), T, i64(per)))
	}
	if W := l.World(); W > 1 {
		per := i64(model.ShareRows(cfg.VocabSize, W))
		parts = append(parts, f(logitRows, per), f(i64(W), logitRows, per)) // the LM head's vocabulary shares, their gather
	}
	var idxW int64
	if cfg.Sparse() {
		ih, id := i64(cfg.IndexNHeads), i64(cfg.IndexHeadDim)
		idxW = ih*id + ih
		parts = append(parts,
			f(T, ih, id), f(T, id), f(T, ih), // indexer q, k, weights
			mla.IndexerScratchBytes(cfg.IndexNHeads, cfg.IndexHeadDim),
			f(sel, localKeys), // indexer scores
			f(sel, topk),      // top-k positions
		)
	}
	if N > 1 {
		parts = append(parts,
			f(N, T, H, mla.RowDim),                    // query gather staging
			f(2, T, nh, mla.LatentDim+1), f(N, T, nh), // combine (the larger of ag_rs and a2a)
			f(T, N, H, mla.RowDim),                // dcp query gather
			f(T, N, H, mla.LatentDim), f(T, N, H), // dcp partial out, lse
		)
		if cfg.Sparse() {
			parts = append(parts,
				f(T, idxW), f(N, T, idxW), // indexer query pack, gather
				f(sel, topk, 2), f(N, sel, topk, 2), f(sel), // top-k merge: local, send, receive
			)
		}
	}
	if E := i64(cfg.NRoutedExperts); E > 0 {
		// The MoE block, sized as if its rows were dispatched across PCP
		// under expert parallelism (the most it holds).
		K, moe := i64(cfg.NumExpertsPerTok), i64(cfg.MoEIntermediateSize)
		rows := plan.MulSat(P, T)
		width := max(moe, i64(cfg.NSharedExperts)*moe/i64(l.TP))
		parts = append(parts,
			f(T, E), f(2, T, K), // router logits, routed experts and weights
			f(2, rows, K), f(rows, D), f(max(rows, T), D), // expert pairs, rows, outputs
			f(2, max(rows, T), width),                                                     // expert gate, up
			plan.MulSat(2, E+1, 4), plan.MulSat(i64(plan.CacheLayers(cfg, ro.MTP)), E, 8), // counts, load
		)
		if P > 1 {
			parts = append(parts, f(4, P, T, K), f(P, T), f(4, P, T, D), f(T, K), f(3, T, D)) // dispatch and combine
		}
	}
	if ro.MTP {
		parts = append(parts, f(2, T, D), f(T, 2, D)) // hidden banks (target, draft), eh_proj input
	}
	if P > 1 {
		kvw := dc + dr
		if cfg.Sparse() {
			kvw += i64(cfg.IndexHeadDim)
		}
		parts = append(parts,
			f(2, P, T), f(T), plan.MulSat(P, 8), // partition tables, restore index
			plan.MulSat(seqs, 5),    // partition lengths and prefill flags
			f(T, kvw), f(P, T, kvw), // pcp kv pack, gather
			f(P, T, D), f(T, D), // pcp hidden gather, restore
		)
	}
	return plan.AddSat(parts...), cache, nil
}

func kvOrDefault(k kvcache.KVDType) string {
	if k == "" {
		return string(kvcache.KVF32)
	}
	return string(k)
}

func idxOrDefault(k kvcache.IndexerDType) string {
	if k == "" {
		return string(kvcache.IdxF32)
	}
	return string(k)
}

// Start is what starting an engine with given options certainly allocates
// on one rank, before the profile step measures the rest: the weights, the
// step buffers of the worst step, and the larger of the profile executor's
// cache (the largest all-prefill step) and the cache of one max-model-len
// request.
type Start struct {
	WeightBytes, BufferBytes, KVBytes int64
}

// Bytes is the total of s.
func (s Start) Bytes() int64 { return plan.AddSat(s.WeightBytes, s.BufferBytes, s.KVBytes) }

// Start computes what starting an engine with o (defaults filled, valid)
// allocates on one rank of layout l, holding weightBytes of weights.
func (o Options) Start(cfg *config.Model, l comm.Layout, weightBytes int64) (Start, error) {
	sc := o.scheduler(1)
	ro := o.runnerOptions(profileBlocks(sc))
	buf, profileKV, err := RunnerBytes(cfg, ro, l, o.Layout.I)
	if err != nil {
		return Start{}, err
	}
	slot, err := o.SlotBytes(cfg)
	if err != nil {
		return Start{}, err
	}
	kv := max(profileKV, plan.MulSat(int64(sc.BlocksFor(o.MaxModelLen)), int64(sc.LocalBlockSize()), slot))
	if o.KVCacheMemory > 0 {
		kv = max(profileKV, o.KVCacheMemory)
	}
	return Start{WeightBytes: weightBytes, BufferBytes: buf, KVBytes: kv}, nil
}

// CheckMemory refuses, before anything is allocated, options whose start-up
// cannot fit: --memory-limit over all ranks of this process beyond what the
// process may use (avail), or one rank's weights, step buffers and minimal
// KV cache beyond its budget (--memory-limit × --memory-utilization, or its
// share of avail when no limit is given). l is the parallel layout, of
// which RanksPerHost ranks live in this process; weightBytes is one rank's
// weights. A refusal names the bytes needed and a setting that fits.
func (o Options) CheckMemory(cfg *config.Model, l comm.Layout, weightBytes int64, avail Available) error {
	ranks := int64(max(o.RanksPerHost, 1))
	st, err := o.Start(cfg, l, weightBytes)
	if err != nil {
		return err
	}
	// Every rank of this process needs its start-up within its budget.
	perRank := int64(float64(st.Bytes())/o.MemoryUtilization) + 1
	if st.Bytes() == math.MaxInt64 {
		perRank = math.MaxInt64
	}
	if ranks > 1 && plan.MulSat(perRank, ranks) > avail.Bytes {
		most := avail.Bytes / max(perRank, 1)
		fix := fmt.Sprintf("set --tensor-parallel-size × --prefill-context-parallel-size to at most %d ranks in one process (--comm mpi spreads them over processes)", most)
		if most < 1 {
			fix = "run the ranks as separate processes (--comm mpi), on hosts with more memory"
		}
		return fmt.Errorf("%d ranks in this process need %s each at start-up (weights %s, step buffers %s, KV cache %s, over --memory-utilization %g), %s in all, more than the %s this process may use; %s",
			ranks, formatNeed(perRank), plan.FormatBytes(st.WeightBytes), formatNeed(st.BufferBytes), formatNeed(st.KVBytes), o.MemoryUtilization,
			formatNeed(plan.MulSat(perRank, ranks)), avail, fix)
	}
	if o.MemoryLimit > 0 && plan.MulSat(o.MemoryLimit, ranks) > avail.Bytes {
		return fmt.Errorf("--memory-limit %s for each of the %d ranks of this process is %s, more than the %s this process may use; set --memory-limit to at most %d",
			plan.FormatBytes(o.MemoryLimit), ranks, formatNeed(plan.MulSat(o.MemoryLimit, ranks)), avail, avail.Bytes/ranks)
	}
	limit, source := o.MemoryLimit, "--memory-limit"
	if limit == 0 {
		limit, source = avail.Bytes/ranks, fmt.Sprintf("%s / %d ranks", avail, ranks)
	}
	usable := int64(float64(limit) * o.MemoryUtilization)
	if st.Bytes() <= usable {
		return nil
	}
	var fixes []string
	if need := int64(float64(st.Bytes())/o.MemoryUtilization) + 1; plan.MulSat(need, ranks) <= avail.Bytes && need < (1<<62) {
		fixes = append(fixes, fmt.Sprintf("--memory-limit %d", need))
	}
	fits := func(m Options) bool {
		s, err := m.Start(cfg, l, weightBytes)
		return err == nil && s.Bytes() <= usable
	}
	// The largest batch and length limits that fit, each alone.
	for _, lim := range []struct {
		flag    string
		lo, cur int
		set     func(*Options, int)
	}{
		{"--max-num-batched-tokens", o.MaxNumSeqs, o.MaxNumBatchedTokens, func(m *Options, v int) { m.MaxNumBatchedTokens = v }},
		{"--max-num-seqs", 1, o.MaxNumSeqs, func(m *Options, v int) { m.MaxNumSeqs = v }},
		{"--max-model-len", 1, o.MaxModelLen, func(m *Options, v int) { m.MaxModelLen = v }},
	} {
		if v, ok := plan.LargestFitting(lim.lo, lim.cur, func(v int) bool {
			m := o
			lim.set(&m, v)
			return fits(m)
		}); ok {
			fixes = append(fixes, fmt.Sprintf("%s %d", lim.flag, v))
		}
	}
	if o.KVCacheMemory > 0 {
		fixes = append(fixes, "a smaller --kv-cache-memory")
	}
	fix := "more memory per rank, fewer ranks per process or a larger tensor-parallel size"
	if len(fixes) > 0 {
		fix = strings.Join(fixes, ", or ")
	}
	return fmt.Errorf("one rank needs %s before its KV cache is sized (weights %s, step buffers %s for --max-num-batched-tokens %d --max-num-seqs %d --max-model-len %d, KV cache at start-up %s), more than its budget %s (%s %s × --memory-utilization %g); set %s",
		formatNeed(st.Bytes()), plan.FormatBytes(st.WeightBytes), formatNeed(st.BufferBytes), o.MaxNumBatchedTokens, o.MaxNumSeqs, o.MaxModelLen,
		formatNeed(st.KVBytes), plan.FormatBytes(usable), source, plan.FormatBytes(limit), o.MemoryUtilization, fix)
}
