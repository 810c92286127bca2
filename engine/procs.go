package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
)

// Multi-process ranks (one MPI process per rank): world rank 0 runs the
// scheduler and drives the others by broadcasting what to do. Every message is
// a fixed-size header broadcast over the world group, followed for a step by
// the encoded batch, so every process enters the same collectives with the
// same counts:
//
//	header [op, a, b, c, d, e, f, g] int32
//	  opBuild:    a..g = the runner options (max tokens, max model len, max logit rows,
//	              max seqs, block size, block count, cache dtypes and the MTP flag);
//	              builds an executor
//	  opForward:  a = sequences, b = payload length, c = block copies; then the payload
//	  opDraft:    a = sequences, b = payload length, d = MTP layer, e = hidden bank;
//	              then the payload (a draft step of the MTP layer)
//	  opClose:    closes the current executor
//	  opShutdown: ends the follower loop
//	  opHeartbeat: nothing; rank 0 sends it while idle so that followers,
//	              waiting inside a collective with a deadline, learn that it is alive
//
// The payload of a step holds the block copies (source, destination), then
// per sequence: start, logits-all, token count, block count, hidden-row
// count, the tokens, the block table, the hidden rows.
const (
	opBuild int32 = iota + 1
	opForward
	opClose
	opShutdown
	opHeartbeat
	opDraft
	headerLen = 8
	// mtpFlag marks opBuild's dtype field when the runner drafts.
	mtpFlag = 64
)

// Procs is this process's part of a multi-process deployment.
type Procs struct {
	cfg    *config.Model
	model  *model.Model
	world  comm.Group
	groups comm.Groups
	p      Parallel
	ctx    context.Context

	// broken is closed, and brokenErr set, when a heartbeat fails: the
	// world is unusable although no step has run into it yet.
	brokenOnce sync.Once
	broken     chan struct{}
	brokenErr  error

	mu      sync.Mutex // serializes rank 0's broadcasts (steps and heartbeats)
	header  []int32
	payload []int32
	batch   model.Batch
	runner  *model.Runner
}

// NewProcs prepares this process's rank: its model shard and its TP, PCP and
// DCP groups (split collectively, so every process calls it). ctx bounds
// every collective.
func NewProcs(ctx context.Context, cfg *config.Model, src model.TensorSource, world comm.Group, p Parallel) (*Procs, int64, error) {
	l := p.Layout
	if world.Size() != l.World() {
		return nil, 0, fmt.Errorf("the job has %d processes, TP=%d × PCP=%d needs %d; start it with mpirun -np %d", world.Size(), l.TP, l.PCP, l.World(), l.World())
	}
	gs, err := l.Split(world)
	if err != nil {
		return nil, 0, err
	}
	rank := world.Rank()
	m, err := model.Build(cfg, src, p.Shard(rank))
	if err != nil {
		return nil, 0, err
	}
	pr := &Procs{cfg: cfg, model: m, world: world, groups: gs, p: p, ctx: ctx, header: make([]int32, headerLen), broken: make(chan struct{})}
	// The most loaded rank's weights (every rank of a layout holds the same sizes).
	w := []float64{float64(WeightBytes(m))}
	all := make([]float64, world.Size())
	if err := comm.AllGather(ctx, world, all, w); err != nil {
		return nil, 0, err
	}
	var most int64
	for _, v := range all {
		most = max(most, int64(v))
	}
	return pr, most, nil
}

var dtypeCodes = []kvcache.KVDType{kvcache.KVF32, kvcache.KVBF16, kvcache.KVFP8DSMLA}
var idxCodes = []kvcache.IndexerDType{kvcache.IdxF32, kvcache.IdxFP8}

func codeOf[T comparable](list []T, v T) int32 {
	for i, x := range list {
		if x == v {
			return int32(i)
		}
	}
	return -1
}

// Factory is the executor factory of world rank 0: each executor it builds
// has every other process build the same runner.
func (pr *Procs) Factory() ExecutorFactory {
	return func(opt model.RunnerOptions) (Executor, error) {
		if opt.KVDType == "" {
			opt.KVDType = kvcache.KVF32
		}
		if opt.IndexerDType == "" {
			opt.IndexerDType = kvcache.IdxF32
		}
		pr.mu.Lock()
		defer pr.mu.Unlock()
		h := pr.header
		h[0], h[1], h[2], h[3] = opBuild, int32(opt.MaxTokens), int32(opt.MaxModelLen), int32(opt.MaxLogitRows)
		h[4], h[5], h[6] = int32(opt.MaxSeqs), int32(opt.BlockSize), int32(opt.NumBlocks)
		h[7] = codeOf(dtypeCodes, opt.KVDType)*8 + codeOf(idxCodes, opt.IndexerDType)
		if opt.MTP {
			h[7] += mtpFlag
		}
		if err := comm.Broadcast(pr.ctx, pr.world, h, 0); err != nil {
			return nil, err
		}
		if err := pr.build(opt); err != nil {
			return nil, err
		}
		return &procExecutor{pr: pr}, nil
	}
}

func (pr *Procs) build(opt model.RunnerOptions) error {
	opt.Parallel = &model.Parallel{Layout: pr.p.Layout, Groups: pr.groups, Interleave: pr.p.Interleave, Backend: pr.p.Backend, Ctx: pr.ctx}
	r, err := model.NewRunner(pr.model, opt)
	if err != nil {
		return fmt.Errorf("rank %d runner: %w", pr.world.Rank(), err)
	}
	pr.runner = r
	pr.payload = make([]int32, payloadCap(opt))
	pr.batch.Seqs = make([]model.Seq, 0, opt.MaxSeqs)
	pr.batch.Copies = make([]model.BlockCopy, 0, opt.MaxSeqs)
	return nil
}

// payloadCap bounds the encoded batch of any step opt allows.
func payloadCap(opt model.RunnerOptions) int {
	return opt.MaxSeqs*5 + 2*opt.MaxTokens + opt.MaxSeqs*(opt.MaxModelLen/opt.BlockSize+2) + 2*opt.MaxSeqs
}

// Follow is the loop of every process but world rank 0: it builds the runners
// and runs the steps rank 0 broadcasts until rank 0 shuts the deployment
// down. A failed collective ends it with that error.
func (pr *Procs) Follow() error {
	h := pr.header
	for {
		if err := comm.Broadcast(pr.ctx, pr.world, h, 0); err != nil {
			return err
		}
		switch h[0] {
		case opBuild:
			mtp := h[7]&mtpFlag != 0
			kv, idx := (h[7]&^mtpFlag)/8, (h[7]&^mtpFlag)%8
			if kv < 0 || int(kv) >= len(dtypeCodes) || idx < 0 || int(idx) >= len(idxCodes) {
				return fmt.Errorf("rank %d: unknown cache dtype code %d", pr.world.Rank(), h[7])
			}
			opt := model.RunnerOptions{MaxTokens: int(h[1]), MaxModelLen: int(h[2]), MaxLogitRows: int(h[3]), MaxSeqs: int(h[4]),
				BlockSize: int(h[5]), NumBlocks: int(h[6]), KVDType: dtypeCodes[kv], IndexerDType: idxCodes[idx], MTP: mtp}
			if err := pr.build(opt); err != nil {
				return err
			}
		case opForward, opDraft:
			n := int(h[2])
			if n > len(pr.payload) {
				return fmt.Errorf("rank %d: step payload of %d values exceeds the %d its runner was sized for", pr.world.Rank(), n, len(pr.payload))
			}
			if err := comm.Broadcast(pr.ctx, pr.world, pr.payload[:n], 0); err != nil {
				return err
			}
			if err := pr.decode(int(h[1]), int(h[3])); err != nil {
				return err
			}
			var err error
			if h[0] == opDraft {
				err = pr.runner.Draft(int(h[4]), &pr.batch, model.HiddenBank(h[5]))
			} else {
				err = pr.runner.Forward(&pr.batch)
			}
			if err != nil {
				return err
			}
		case opClose:
			pr.runner = nil
		case opHeartbeat:
		case opShutdown:
			return nil
		default:
			return fmt.Errorf("rank %d: unknown operation %d from rank 0", pr.world.Rank(), h[0])
		}
	}
}

// Shutdown ends every follower's loop; world rank 0 calls it once when it
// is done serving.
func (pr *Procs) Shutdown() error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	clear(pr.header)
	pr.header[0] = opShutdown
	return comm.Broadcast(pr.ctx, pr.world, pr.header, 0)
}

func (pr *Procs) encode(b *model.Batch) (int, error) {
	p := pr.payload
	n := 0
	put := func(v int32) bool {
		if n == len(p) {
			return false
		}
		p[n] = v
		n++
		return true
	}
	if 2*len(b.Copies) > len(p) {
		return 0, fmt.Errorf("step has %d block copies, more than the %d-value payload holds", len(b.Copies), len(p))
	}
	for _, c := range b.Copies {
		p[n], p[n+1] = c.Src, c.Dst
		n += 2
	}
	for _, s := range b.Seqs {
		la := int32(0)
		if s.LogitsAll {
			la = 1
		}
		ok := put(int32(s.Start)) && put(la) && put(int32(len(s.Tokens))) && put(int32(len(s.BlockTable))) && put(int32(len(s.Hidden)))
		for _, t := range s.Tokens {
			ok = ok && put(t)
		}
		for _, t := range s.BlockTable {
			ok = ok && put(t)
		}
		for _, t := range s.Hidden {
			ok = ok && put(t)
		}
		if !ok {
			return 0, fmt.Errorf("step does not fit the %d-value payload its runner was sized for", len(p))
		}
	}
	return n, nil
}

func (pr *Procs) decode(nseq, ncopies int) error {
	p := pr.payload
	pr.batch.Seqs = pr.batch.Seqs[:0]
	pr.batch.Copies = pr.batch.Copies[:0]
	if ncopies < 0 || 2*ncopies > len(p) {
		return errors.New("truncated step payload")
	}
	for k := range ncopies {
		pr.batch.Copies = append(pr.batch.Copies, model.BlockCopy{Src: p[2*k], Dst: p[2*k+1]})
	}
	i := 2 * ncopies
	for range nseq {
		if i+5 > len(p) {
			return errors.New("truncated step payload")
		}
		start, la, nt, nb, nh := int(p[i]), p[i+1] == 1, int(p[i+2]), int(p[i+3]), int(p[i+4])
		i += 5
		if nt < 0 || nb < 0 || nh < 0 || i+nt+nb+nh > len(p) {
			return errors.New("truncated step payload")
		}
		q := model.Seq{Start: start, LogitsAll: la, Tokens: p[i : i+nt], BlockTable: p[i+nt : i+nt+nb]}
		if nh > 0 {
			q.Hidden = p[i+nt+nb : i+nt+nb+nh]
		}
		pr.batch.Seqs = append(pr.batch.Seqs, q)
		i += nt + nb + nh
	}
	return nil
}

// procExecutor is world rank 0's executor: it broadcasts each step and runs
// rank 0's shard of it.
type procExecutor struct{ pr *Procs }

// Broken is closed when rank 0's heartbeat found the world unusable;
// BrokenErr then says why (the engine fails on it while idle).
func (x *procExecutor) Broken() <-chan struct{} { return x.pr.broken }

// BrokenErr is the heartbeat's error once Broken is closed.
func (x *procExecutor) BrokenErr() error {
	select {
	case <-x.pr.broken:
		return x.pr.brokenErr
	default:
		return nil
	}
}

func (x *procExecutor) Forward(b *model.Batch) error { return x.step(opForward, b, 0, 0) }

// Draft broadcasts a draft step of MTP layer k and runs rank 0's shard of it.
func (x *procExecutor) Draft(k int, b *model.Batch, from model.HiddenBank) error {
	return x.step(opDraft, b, k, from)
}

func (x *procExecutor) step(op int32, b *model.Batch, k int, from model.HiddenBank) error {
	pr := x.pr
	pr.mu.Lock()
	defer pr.mu.Unlock()
	n, err := pr.encode(b)
	if err != nil {
		return err
	}
	h := pr.header
	clear(h)
	h[0], h[1], h[2], h[3] = op, int32(len(b.Seqs)), int32(n), int32(len(b.Copies))
	h[4], h[5] = int32(k), int32(from)
	if err := comm.Broadcast(pr.ctx, pr.world, h, 0); err != nil {
		return err
	}
	if err := comm.Broadcast(pr.ctx, pr.world, pr.payload[:n], 0); err != nil {
		return err
	}
	if op == opDraft {
		return pr.runner.Draft(k, b, from)
	}
	return pr.runner.Forward(b)
}

// StepCost is rank 0's cost of the last step: the other processes' shares
// are not seen here (ranks of a layout read shards of about equal size).
func (x *procExecutor) StepCost() model.StepCost { return x.pr.runner.StepCost() }

// StepRooflineTerms is rank 0's own terms of the last step.
func (x *procExecutor) StepRooflineTerms(l model.Limits) (memory, compute float64) {
	return x.pr.runner.StepRooflineTerms(l)
}

func (x *procExecutor) NumLogitRows() int             { return x.pr.runner.NumLogitRows() }
func (x *procExecutor) Logits(i int) (int, []float32) { return x.pr.runner.Logits(i) }
func (x *procExecutor) Buffers() []model.Buffer       { return x.pr.runner.Buffers() }

// Close has every process drop its runner.
func (x *procExecutor) Close() error {
	pr := x.pr
	pr.mu.Lock()
	defer pr.mu.Unlock()
	clear(pr.header)
	pr.header[0] = opClose
	pr.runner = nil
	return comm.Broadcast(pr.ctx, pr.world, pr.header, 0)
}

// Heartbeat makes world rank 0 broadcast a heartbeat every interval while no
// step runs, so followers waiting for the next step never hit the collective
// deadline on an idle server, yet still fail within it if rank 0 dies. Call
// the returned function to stop it before Shutdown.
func (pr *Procs) Heartbeat(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				pr.mu.Lock()
				clear(pr.header)
				pr.header[0] = opHeartbeat
				err := comm.Broadcast(pr.ctx, pr.world, pr.header, 0)
				pr.mu.Unlock()
				if err != nil {
					pr.brokenOnce.Do(func() {
						pr.brokenErr = fmt.Errorf("heartbeat to the other ranks: %w", err)
						close(pr.broken)
					})
					return
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// CollectiveSeconds is the time this process's rank (rank 0) has spent
// inside its TP, PCP and DCP collectives.
func (x *procExecutor) CollectiveSeconds() float64 {
	return groupsBusy(x.pr.groups).Seconds()
}
