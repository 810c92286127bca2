package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/model"
)

// Parallel describes a TP × PCP deployment with DCP-sharded KV on
// in-process ranks.
type Parallel struct {
	Layout     comm.Layout
	Interleave int
	Backend    *cp.BackendPlan
	// CollectiveTimeout bounds every collective (inproc.DefaultTimeout if 0).
	CollectiveTimeout time.Duration
	// ExpertParallel spreads the routed experts whole over the TP × PCP
	// ranks (vLLM's --enable-expert-parallel) instead of slicing every
	// expert over TP.
	ExpertParallel bool
}

// Shard is world rank's slice of the weights under p.
func (p Parallel) Shard(rank int) model.Shard {
	l := p.Layout
	s := model.Shard{TPRank: l.TPRank(rank), TPSize: l.TP}
	if p.ExpertParallel {
		s.EPRank, s.EPSize = rank, l.World()
	}
	return s
}

// InProcess returns the factory of an executor that runs every rank of p as
// a goroutine of this process, and the weight bytes of the most loaded rank.
// Every rank's model shard is built once here; each rank's runner (its KV
// shard and step buffers) is built by the factory. The ranks run the same
// replicated Batch each step; the executor returns rank 0's logits, which the
// ranks' collectives make identical on every rank.
func InProcess(cfg *config.Model, src model.TensorSource, p Parallel) (ExecutorFactory, int64, error) {
	l := p.Layout
	if err := l.Validate(); err != nil {
		return nil, 0, err
	}
	models := make([]*model.Model, l.World())
	var weights int64
	for rank := range models {
		m, err := model.Build(cfg, src, p.Shard(rank))
		if err != nil {
			return nil, 0, err
		}
		models[rank] = m
		weights = max(weights, WeightBytes(m))
	}
	factory := func(opt model.RunnerOptions) (Executor, error) {
		return newRankGroup(models, opt, p)
	}
	return factory, weights, nil
}

// rankGroup is the multi-rank executor: one long-lived goroutine per rank,
// woken per step through channels, so a step allocates nothing.
type rankGroup struct {
	runners []*model.Runner
	start   []chan *rankJob
	job     rankJob // the step every rank runs (read-only while they run)
	done    chan rankResult
	errs    []error
	cancel  context.CancelFunc
}

type rankResult struct {
	rank int
	err  error
}

// rankJob is one step of every rank: a target step, or a draft step of MTP
// layer k reading bank from.
type rankJob struct {
	b     *model.Batch
	draft bool
	k     int
	from  model.HiddenBank
}

func newRankGroup(models []*model.Model, opt model.RunnerOptions, p Parallel) (*rankGroup, error) {
	l := p.Layout
	world, err := inproc.NewWorld(l.World(), inproc.Options{Timeout: p.CollectiveTimeout})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &rankGroup{
		runners: make([]*model.Runner, len(world)),
		start:   make([]chan *rankJob, len(world)),
		done:    make(chan rankResult, len(world)),
		errs:    make([]error, len(world)),
		cancel:  cancel,
	}
	errs := inproc.Run(ctx, world, func(ctx context.Context, wg comm.Group) error {
		rank := wg.Rank()
		gs, err := l.Split(wg)
		if err != nil {
			return err
		}
		o := opt
		o.Parallel = &model.Parallel{Layout: l, Groups: gs, Interleave: p.Interleave, Backend: p.Backend, Ctx: ctx}
		r, err := model.NewRunner(models[rank], o)
		if err != nil {
			return fmt.Errorf("rank %d runner: %w", rank, err)
		}
		g.runners[rank] = r
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		cancel()
		return nil, err
	}
	for rank := range g.runners {
		g.start[rank] = make(chan *rankJob)
		go g.loop(rank)
	}
	return g, nil
}

func (g *rankGroup) loop(rank int) {
	r := g.runners[rank]
	for j := range g.start[rank] {
		var err error
		if j.draft {
			err = r.Draft(j.k, j.b, j.from)
		} else {
			err = r.Forward(j.b)
		}
		g.done <- rankResult{rank, err}
	}
}

// Forward runs b on every rank and waits for all of them. A collective that
// fails (a ledger mismatch, a deadline) fails every rank's step; the first
// error is returned, a mismatch in preference to the errors it caused.
func (g *rankGroup) Forward(b *model.Batch) error {
	g.job = rankJob{b: b}
	return g.run()
}

// Draft runs MTP layer k over b on every rank.
func (g *rankGroup) Draft(k int, b *model.Batch, from model.HiddenBank) error {
	g.job = rankJob{b: b, draft: true, k: k, from: from}
	return g.run()
}

// run hands g.job to every rank and waits for all of them.
func (g *rankGroup) run() error {
	for _, c := range g.start {
		c <- &g.job
	}
	for range g.start {
		res := <-g.done
		g.errs[res.rank] = res.err
	}
	// Only a failed step picks its error: the search through errors.As
	// allocates, and a step that succeeded on every rank must not.
	for _, err := range g.errs {
		if err != nil {
			return comm.FirstRankError(g.errs)
		}
	}
	return nil
}

// NumLogitRows is rank 0's logit row count.
func (g *rankGroup) NumLogitRows() int { return g.runners[0].NumLogitRows() }

// Logits are rank 0's logits.
func (g *rankGroup) Logits(i int) (int, []float32) { return g.runners[0].Logits(i) }

// Buffers are the step buffers of the most loaded rank (every rank of a
// layout allocates the same sizes).
func (g *rankGroup) Buffers() []model.Buffer {
	best := g.runners[0]
	for _, r := range g.runners[1:] {
		if r.BufferBytes() > best.BufferBytes() {
			best = r
		}
	}
	return best.Buffers()
}

// StepCost is the last step's cost summed over the ranks (each rank reads
// its own shard of the weights and of the KV).
func (g *rankGroup) StepCost() model.StepCost {
	var c model.StepCost
	for _, r := range g.runners {
		rc := r.StepCost()
		c.WeightBytes += rc.WeightBytes
		c.KVBytes += rc.KVBytes
		c.FLOPs += rc.FLOPs
	}
	return c
}

// StepRooflineTerms adds the ranks' roofline terms of the last step: the
// limits are those of all the host's threads, which the ranks share.
func (g *rankGroup) StepRooflineTerms(l model.Limits) (memory, compute float64) {
	for _, r := range g.runners {
		m, c := r.StepRooflineTerms(l)
		memory, compute = memory+m, compute+c
	}
	return memory, compute
}

// Close stops the rank goroutines.
func (g *rankGroup) Close() error {
	for _, c := range g.start {
		close(c)
	}
	g.cancel()
	return nil
}

// CollectiveSeconds is the time every rank has spent inside its TP, PCP and
// DCP collectives since the executor was built, summed over the ranks.
func (g *rankGroup) CollectiveSeconds() float64 {
	var d time.Duration
	for _, r := range g.runners {
		d += groupsBusy(r.Opt.Parallel.Groups)
	}
	return d.Seconds()
}

func groupsBusy(gs comm.Groups) time.Duration {
	return gs.TP.Stats().Busy + gs.PCP.Stats().Busy + gs.DCP.Stats().Busy
}
