package model

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/kvcache"
)

// Seq is one request's share of a step: the new tokens it runs and where they
// sit in its sequence.
type Seq struct {
	Tokens     []int32 // new tokens of this step
	Start      int     // position of Tokens[0] (= tokens already in the cache)
	BlockTable []int32 // cache blocks of the request, in order (the same on every rank)
	// LogitsAll asks for logits after every new token instead of only the last.
	LogitsAll bool
	// Hidden is set on draft steps only (Runner.Draft): for each token, the
	// batch row (of the step that wrote the bank) whose hidden state is the
	// token's previous hidden state.
	Hidden []int32
}

// Batch is the work of one step. Under TP/DCP/PCP every rank runs the same
// (replicated) Batch; each derives its own rows, heads and KV shard from it.
type Batch struct {
	Seqs []Seq
	// Copies are block copies (copy-on-write of a forked sequence's last,
	// partial block) done on every rank before any of the step's KV is
	// written.
	Copies []BlockCopy
}

// BlockCopy copies the KV of cache block Src into block Dst (every layer,
// each rank its own slots of the block).
type BlockCopy struct{ Src, Dst int32 }

// Parallel places a Runner in a TP × PCP world with DCP-sharded KV.
type Parallel struct {
	Layout     comm.Layout
	Groups     comm.Groups // this rank's groups (Layout.Split of its world group)
	Interleave int         // --cp-kv-cache-interleave-size
	Backend    *cp.BackendPlan
	// Ctx bounds every collective of the runner's steps.
	Ctx context.Context
}

func (p *Parallel) ctx() context.Context {
	if p == nil || p.Ctx == nil {
		return context.Background()
	}
	return p.Ctx
}

// RunnerOptions sizes a Runner once, at start-up.
type RunnerOptions struct {
	MaxTokens    int // tokens per step (the whole batch, before any PCP split)
	MaxModelLen  int // longest sequence
	MaxLogitRows int // rows per step that may ask for logits
	MaxSeqs      int // sequences per step
	BlockSize    int
	NumBlocks    int
	KVDType      kvcache.KVDType
	IndexerDType kvcache.IndexerDType
	// MTP allocates the cache layers and buffers of the model's MTP layers,
	// so that Draft can run them (speculative decoding).
	MTP bool
	// Parallel is nil for a single rank.
	Parallel *Parallel
}

// Runner executes forward steps of one rank over its paged KV cache. It
// composes the step's parts, each owning its weights' use and its buffers:
// the step tables derived from the batch, the attention block (MLA + DSA
// indexer over the paged cache, with the DCP exchange), the dense MLP and
// the MoE block (with the expert-parallel exchange), and the PCP exchange of
// the final hidden states. Every buffer is sized from RunnerOptions when the
// runner is created and never grows.
//
// Every collective's count derives from the replicated Batch (and, for the
// expert exchange, from the routing the ranks all-gather first), so all
// ranks issue the same sequence.
type Runner struct {
	M      *Model
	Cache  *kvcache.Cache
	Layout kvcache.Layout // DCP ownership of KV positions
	Opt    RunnerOptions
	// Trace, when set, observes every row's selected positions.
	Trace SelectionTrace
	// RouteTrace, when set, observes every row's routed experts.
	RouteTrace RouteTrace

	par   *Parallel
	reads weightReads
	steps *stepTables
	attn  *attentionBlock
	moe   *moeBlock
	// residual stream and per-layer scratch
	h, x, u, red []float32
	gate, up     []float32      // dense MLP
	hAll, hRest  []float32      // PCP gather of the final hidden states
	mtp          *mtpBlock      // nil without RunnerOptions.MTP
	banks        [2][]float32   // final-normed hidden of every batch row (MTP runners)
	bankRows     [2]int         // batch rows of the step that last wrote each bank
	head         *splitProducts // the LM head, split by vocabulary over the ranks
	logits       []float32
	logitRow     []int32 // batch rows whose logits are computed
	buffers      bufferList
}

// Buffer names one persistent step buffer and its size.
type Buffer struct {
	Name  string
	Bytes int64
}

// bufferList allocates the step buffers and records them by name.
type bufferList struct{ list []Buffer }

func (b *bufferList) add(name string, bytes int64) {
	for i := range b.list {
		if b.list[i].Name == name {
			b.list[i].Bytes += bytes
			return
		}
	}
	b.list = append(b.list, Buffer{name, bytes})
}

func (b *bufferList) f32(name string, n int) []float32 {
	b.add(name, int64(n)*4)
	return make([]float32, n)
}

func (b *bufferList) i32(name string, n int) []int32 {
	b.add(name, int64(n)*4)
	return make([]int32, n)
}

// Buffers lists every persistent step buffer the runner allocated at
// construction, in allocation order. The KV cache is separate (Cache.Bytes).
func (r *Runner) Buffers() []Buffer { return r.buffers.list }

// BufferBytes is the total of Buffers.
func (r *Runner) BufferBytes() int64 {
	var n int64
	for _, b := range r.buffers.list {
		n += b.Bytes
	}
	return n
}

// ExpertLoad returns, per cache layer (the decoder layers, then the MTP
// layers of a runner built with RunnerOptions.MTP), the rows routed to each
// of this rank's experts since the runner was built (nil for dense layers).
func (r *Runner) ExpertLoad() [][]int64 {
	if r.moe == nil {
		return nil
	}
	return r.moe.load
}

// NewRunner allocates the cache and every step buffer for opt.
func NewRunner(m *Model, opt RunnerOptions) (*Runner, error) {
	cfg := m.Cfg
	if opt.MaxTokens <= 0 || opt.MaxModelLen <= 0 || opt.BlockSize <= 0 || opt.NumBlocks <= 0 {
		return nil, fmt.Errorf("runner options need positive max tokens, max model len, block size and block count, got %+v", opt)
	}
	if opt.MaxSeqs <= 0 {
		opt.MaxSeqs = 1
	}
	if opt.MaxLogitRows <= 0 {
		opt.MaxLogitRows = 1
	}
	if opt.MaxLogitRows > opt.MaxTokens {
		opt.MaxLogitRows = opt.MaxTokens
	}
	if opt.KVDType == "" {
		opt.KVDType = "f32"
	}
	if opt.IndexerDType == "" {
		opt.IndexerDType = "f32"
	}
	indexDim := 0 // dense MLA keeps no indexer keys
	if cfg.Sparse() {
		indexDim = cfg.IndexHeadDim
	}
	layers := cfg.NumLayers
	if opt.MTP {
		if cfg.NumNextNPredict == 0 {
			return nil, fmt.Errorf("speculative decoding with the MTP layer needs num_nextn_predict_layers ≥ 1, but %q has none", cfg.Name)
		}
		layers += cfg.NumNextNPredict // the MTP layers' caches follow the decoder layers'
	}
	cache, err := kvcache.NewCache(layers, opt.NumBlocks, opt.BlockSize, opt.KVDType, opt.IndexerDType, indexDim)
	if err != nil {
		return nil, fmt.Errorf("allocate KV cache: %w", err)
	}
	r := &Runner{M: m, Cache: cache, Layout: kvcache.Layout{N: 1, I: 1}, Opt: opt, par: opt.Parallel}
	if p := opt.Parallel; p != nil {
		l := p.Layout
		rank := p.Groups.World.Rank()
		if l.TP != m.Shard.TPSize || l.TPRank(rank) != m.Shard.TPRank {
			return nil, fmt.Errorf("model shard TP %d/%d does not match rank %d of layout TP=%d", m.Shard.TPRank, m.Shard.TPSize, rank, l.TP)
		}
		if m.Shard.EPSize > 1 && (m.Shard.EPSize != l.World() || m.Shard.EPRank != rank) {
			return nil, fmt.Errorf("model shard holds experts of rank %d of %d, but this is rank %d of a TP × PCP world of %d", m.Shard.EPRank, m.Shard.EPSize, rank, l.World())
		}
		if p.Interleave < 1 {
			p.Interleave = 1
		}
		r.Layout = kvcache.Layout{N: l.DCP, I: p.Interleave}
		if err := r.Layout.Validate(opt.BlockSize); err != nil {
			return nil, err
		}
	} else if m.Shard.TPSize > 1 || m.Shard.EPSize > 1 {
		return nil, fmt.Errorf("model shard TP %d, EP %d needs a parallel layout", m.Shard.TPSize, m.Shard.EPSize)
	}
	if r.steps, err = newStepTables(r.Layout, opt, m.Rope, &r.buffers); err != nil {
		return nil, err
	}
	T, D := opt.MaxTokens, cfg.HiddenSize
	f := r.buffers.f32
	r.logitRow = r.buffers.i32("logit rows", opt.MaxLogitRows)[:0]
	r.h, r.x = f("hidden", T*D), f("normed hidden", T*D)
	r.u = f("layer out", T*D)
	if r.tp() > 1 {
		r.red = f("tp all-reduce", T*D)
	}
	if r.attn, err = newAttentionBlock(m, r.steps, opt, &r.Trace, &r.reads, &r.buffers); err != nil {
		return nil, err
	}
	width := 0
	for i := range m.Layers {
		if L := m.Layers[i].MLP; L != nil {
			width = max(width, L.Width)
		}
	}
	if width > 0 {
		r.gate, r.up = f("mlp gate", T*width), f("mlp up", T*width)
	}
	r.moe = newMoEBlock(m, r.steps, opt, &r.RouteTrace, &r.reads, &r.buffers)
	// The parts of a step's cost (StepBound): per layer its products (all
	// three of every expert, at most), its attention and indexer calls and
	// lookups; one more layer for the MTP layer and the head.
	parts := (len(m.Layers) + 1) * (32 + 3*(cfg.NRoutedExperts+cfg.NSharedExperts))
	r.buffers.add("step cost parts", int64(parts)*int64(unsafe.Sizeof(opCost{})))
	r.reads.ops = make([]opCost, 0, parts)
	r.logits = f("logits", opt.MaxLogitRows*cfg.VocabSize)
	r.head = newVocabHead(m, opt, r.par, &r.buffers)
	if opt.MTP {
		r.banks[TargetBank] = f("hidden bank", T*D)
		r.banks[DraftBank] = f("draft hidden bank", T*D)
		r.mtp = &mtpBlock{glue: f("mtp glue", T*2*D)}
	}
	if P := r.steps.pcp(); P > 1 {
		r.hAll, r.hRest = f("pcp hidden gather", P*T*D), f("pcp hidden restore", T*D)
	}
	return r, nil
}

func (r *Runner) tp() int {
	if r.par == nil {
		return 1
	}
	return r.par.Layout.TP
}

// Logits returns the logits of the i-th logit row of the last step and the
// batch row it belongs to.
func (r *Runner) Logits(i int) (row int, logits []float32) {
	V := r.M.Cfg.VocabSize
	return int(r.logitRow[i]), r.logits[i*V : (i+1)*V]
}

// NumLogitRows is the number of logit rows the last step produced.
func (r *Runner) NumLogitRows() int { return len(r.logitRow) }

// Forward runs one step: it writes the step's KV into the cache (each rank
// the positions it owns), runs every layer, and computes logits for the last
// token of each sequence (or every token where LogitsAll is set). A runner
// built with RunnerOptions.MTP keeps the final-normed hidden state of every
// batch row in TargetBank, where a draft step reads it.
func (r *Runner) Forward(b *Batch) error {
	for _, q := range b.Seqs {
		if q.Hidden != nil {
			return fmt.Errorf("a target step's sequences carry no hidden rows (Seq.Hidden is for Runner.Draft)")
		}
	}
	return r.run(b, nil)
}

// run is one step of the target model (mtp nil) or of one MTP layer: the
// copies, the step tables, the input rows, the layers, the PCP gather of the
// final hidden states, the final norm into a hidden bank and the head.
func (r *Runner) run(b *Batch, mtp *mtpStep) error {
	cfg, m, s := r.M.Cfg, r.M, r.steps
	r.logitRow = r.logitRow[:0]
	r.reads.reset()
	for _, c := range b.Copies {
		if err := r.Cache.CopyBlock(c.Dst, c.Src); err != nil {
			return err
		}
	}
	T, err := s.build(b, cfg.VocabSize, &r.logitRow)
	if err != nil || T == 0 {
		return err
	}
	D := cfg.HiddenSize
	norm, head, bank := m.Norm, m.LMHead, TargetBank
	if mtp == nil {
		for i := 0; i < s.nLocal; i++ {
			h := r.h[i*D : (i+1)*D]
			if br := s.lrow[i]; br >= 0 {
				m.Embed.Row(int(s.rowTok[br]), h)
				r.reads.add(opLookup, matrixBytes(m.Embed)/int64(m.Embed.Rows), 0)
			} else {
				clear(h)
			}
		}
		for li := range m.Layers {
			if err := r.layer(li, &m.Layers[li], r.Cache.Layer(li)); err != nil {
				return fmt.Errorf("layer %d: %w", li, err)
			}
		}
	} else {
		t := &m.MTP[mtp.k]
		r.mtpInput(b, t, mtp.from)
		li := cfg.NumLayers + mtp.k
		if err := r.layer(li, &t.Block, r.Cache.Layer(li)); err != nil {
			return fmt.Errorf("mtp layer %d: %w", li, err)
		}
		norm, head, bank = t.HeadNorm, t.Head, DraftBank
	}
	hid := r.h
	if s.part != nil {
		M, P := s.nLocal, s.pcp()
		if err := comm.AllGather(r.par.ctx(), r.par.Groups.PCP, r.hAll[:P*M*D], r.h[:M*D]); err != nil {
			return fmt.Errorf("pcp hidden gather: %w", err)
		}
		if err := s.part.RestoreRows(r.hRest[:T*D], r.hAll[:P*M*D], D); err != nil {
			return err
		}
		hid = r.hRest
	}
	// The final norm of the logit rows (of every row, into the hidden bank a
	// draft step reads, when the runner drafts), then the head once over the
	// logit rows (a row's logits do not depend on how many rows share the
	// product, nor on how the vocabulary is split over the ranks).
	n := len(r.logitRow)
	eps := float32(cfg.RMSNormEps)
	normed := r.x[:n*D]
	if r.mtp != nil {
		b := r.banks[bank][:T*D]
		for t := 0; t < T; t++ {
			kernels.RMSNorm(b[t*D:(t+1)*D], hid[t*D:(t+1)*D], norm, eps)
		}
		r.bankRows[bank] = T
		for i, lr := range r.logitRow {
			copy(normed[i*D:(i+1)*D], b[int(lr)*D:(int(lr)+1)*D])
		}
	} else {
		for i, lr := range r.logitRow {
			kernels.RMSNorm(normed[i*D:(i+1)*D], hid[int(lr)*D:(int(lr)+1)*D], norm, eps)
		}
	}
	return r.head.mul(r.par.ctx(), r.logits[:n*cfg.VocabSize], normed, n, head, &r.reads)
}

// StepWeightBytes is the weight bytes the last step's Linear layers read:
// each weight counted once per product it takes part in (a GEMM over many
// rows reads it once), the embedding rows looked up, fp8 block scales
// included. A routed layer counts only the experts its rows selected.
func (r *Runner) StepWeightBytes() int64 { return r.reads.cost().WeightBytes }

// StepCost is what one step of a rank read and computed, the terms of its
// roofline: max((WeightBytes + KVBytes) / read bandwidth, FLOPs / FMA peak).
type StepCost struct {
	// WeightBytes is StepWeightBytes.
	WeightBytes int64
	// KVBytes is the cache rows attention read (each selected row once per
	// query row, in the cache's storage format) and the indexer keys scored
	// (each key once per query row).
	KVBytes int64
	// FLOPs counts 2 per multiply-add of the Linear layers (2·rows·out·in
	// per product), of attention (2·heads·(576 + 512) per selected row and
	// query row) and of the indexer (2·index heads·index dim per scored key
	// and query row).
	FLOPs int64
}

// Limits are the rates of one rank's cores that bound a step (StepBound),
// measured on the machine: the fastest of kernels.ReadProbes over a buffer
// larger than the caches and kernels.FMAPeakLoop, and optionally kernels.FP8ProductLoop.
type Limits struct {
	ReadBW  float64 // bytes read per second
	FMAPeak float64 // FLOPs per second
	// FP8, when not empty, adds the cores' fp8 product rates, sorted by
	// rows: a product of fp8 weights over at most the largest Rows
	// activation rows also takes at least its weights ÷ the rate for its
	// rows (the time per weight interpolated linearly between the row
	// counts measured, the first one's below them). Decoding a weight
	// runs on the FMA pipes' ports, so neither the read bandwidth nor the
	// FMA peak alone bounds those products. Taller products (a prefill's)
	// decode each weight once for many rows and keep the two limits.
	FP8 []FP8Rate
}

// FP8Rate is how many fp8 weights per second the cores decode and multiply
// into Rows activation rows (kernels.FP8ProductLoop on every thread).
type FP8Rate struct {
	Rows  int
	Codes float64 // per second
}

// fp8Seconds is the time per fp8 weight of a product over rows activation
// rows at the rates fp8 (sorted by Rows), and whether fp8 covers rows.
func fp8Seconds(fp8 []FP8Rate, rows int) (float64, bool) {
	if len(fp8) == 0 || rows > fp8[len(fp8)-1].Rows {
		return 0, false
	}
	if rows <= fp8[0].Rows {
		return 1 / fp8[0].Codes, true
	}
	for i := 1; i < len(fp8); i++ {
		if a, b := fp8[i-1], fp8[i]; rows <= b.Rows {
			f := float64(rows-a.Rows) / float64(b.Rows-a.Rows)
			return (1-f)/a.Codes + f/b.Codes, true
		}
	}
	return 0, false
}

// StepBound is the last step's roofline on this rank taken part by part: the
// sum over its parts (each Linear product, each layer's attention and its
// indexer, the embedding lookups) of max(bytes / ReadBW, FLOPs / FMAPeak),
// in seconds. The parts run one after another, each needing the last one's
// output, so a step cannot take less even with each part at its own limit.
// StepCost's roofline, the max over the step's totals, assumes a
// memory-bound part overlaps a compute-bound one, and is lower when a step
// holds both (a batch's attention products and its experts' GEMVs).
func (r *Runner) StepBound(l Limits) float64 { return r.reads.bound(l) }

// StepRoofline is the last step's roofline on this rank over its totals,
// in seconds: max((weight + KV bytes) / ReadBW, compute), where compute is
// FLOPs / FMAPeak except that each product of fp8 weights over as many rows
// as l.FP8 covers takes at least its weights at its rows' fp8 product rate.
// Without l.FP8 it is max((WeightBytes + KVBytes) / ReadBW, FLOPs /
// FMAPeak) of StepCost. With it, it is the roofline with the core's ceiling
// for exact fp8 products in place of the FMA peak for those products: on a
// CPU the decoding of each weight runs on the FMA pipes' ports.
func (r *Runner) StepRoofline(l Limits) float64 { return r.reads.roofline(l) }

// StepRooflineTerms is the two terms of StepRoofline in seconds: the
// step's bytes at l.ReadBW, and its compute at l (FLOPs at l.FMAPeak, the
// fp8 products that l.FP8 covers at least at their rows' rate). Executors
// of several ranks on one host add them over their ranks.
func (r *Runner) StepRooflineTerms(l Limits) (memory, compute float64) { return r.reads.terms(l) }

// StepCost is the cost of the last step on this rank.
func (r *Runner) StepCost() StepCost {
	return r.reads.cost()
}

// layer runs decoder layer li over the local rows: attention, then the
// dense MLP or the MoE block, each followed by the TP all-reduce of its
// partial and the residual add.
func (r *Runner) layer(li int, L *Layer, lc *kvcache.LayerCache) error {
	cfg := r.M.Cfg
	D, M := cfg.HiddenSize, r.steps.nLocal
	eps := float32(cfg.RMSNormEps)
	x, u := r.x[:M*D], r.u[:M*D]
	for t := 0; t < M; t++ {
		kernels.RMSNorm(x[t*D:(t+1)*D], r.h[t*D:(t+1)*D], L.InputNorm, eps)
	}
	if err := r.attn.forward(li, &L.Attn, lc, x, u); err != nil {
		return err
	}
	if err := r.addReduced(u); err != nil {
		return fmt.Errorf("o_proj all-reduce: %w", err)
	}
	for t := 0; t < M; t++ {
		kernels.RMSNorm(x[t*D:(t+1)*D], r.h[t*D:(t+1)*D], L.PostNorm, eps)
	}
	if L.MoE != nil {
		if err := r.moe.forward(li, L.MoE, x, u); err != nil {
			return err
		}
		if err := r.addReduced(u); err != nil {
			return fmt.Errorf("moe all-reduce: %w", err)
		}
		return nil
	}
	L.MLP.forward(&r.reads, u, x, M, r.gate, r.up)
	if err := r.addReduced(u); err != nil {
		return fmt.Errorf("mlp all-reduce: %w", err)
	}
	return nil
}

// addReduced adds the TP-sum of the row-parallel partial u to the residual.
func (r *Runner) addReduced(u []float32) error {
	if r.tp() > 1 {
		red := r.red[:len(u)]
		if err := comm.AllReduce(r.par.ctx(), r.par.Groups.TP, red, u); err != nil {
			return err
		}
		u = red
	}
	kernels.Axpy(1, u, r.h[:len(u)])
	return nil
}
