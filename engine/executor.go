package engine

import (
	"fmt"

	"github.com/cpmla/cpmla/model"
)

// Executor runs the steps the scheduler plans on every rank of a deployment.
// The single-rank *model.Runner satisfies it; a multi-rank executor
// broadcasts the plan and runs every rank's shard, returning rank 0's logits.
type Executor interface {
	// Forward runs one step. It writes the step's KV before any row attends.
	Forward(b *model.Batch) error
	// Draft runs MTP layer k over b, reading each token's previous hidden
	// state from bank from (model.Runner.Draft); its logit rows replace the
	// last step's. Only executors built with RunnerOptions.MTP can draft.
	Draft(k int, b *model.Batch, from model.HiddenBank) error
	// NumLogitRows and Logits give the last step's logit rows, one per
	// sequence (its last token), in batch order.
	NumLogitRows() int
	Logits(i int) (row int, logits []float32)
	// Buffers lists the persistent step buffers of the most loaded rank,
	// allocated once when the executor was built.
	Buffers() []model.Buffer
}

// PlanCounter is implemented by executors that build kernel plans or
// specializations lazily (per row-count bucket, rank/world combination or
// communication backend). Warm-up must leave nothing to build: the engine
// reports the builds that happen after it.
type PlanCounter interface {
	KernelPlansBuilt() int64
}

// StepCoster is implemented by executors that report what their last step
// read and computed (the terms of its roofline, model.StepCost): the
// single-rank runner, the in-process ranks (summed over the ranks) and rank
// 0 of an MPI world (its own share only).
type StepCoster interface {
	StepCost() model.StepCost
}

// RooflineTermer is implemented by executors that report the two terms of
// their last step's roofline at given rates (model.Runner.StepRooflineTerms):
// the seconds its bytes take at the read bandwidth and its compute at the
// FMA peak and the fp8 product rates, summed over the in-process ranks, or
// rank 0's own under MPI, as StepCoster's counts are.
type RooflineTermer interface {
	StepRooflineTerms(l model.Limits) (memory, compute float64)
}

// ExecutorFactory builds an executor whose buffers hold the worst step of
// opt and whose cache holds opt.NumBlocks blocks of opt.BlockSize slots on
// each rank.
type ExecutorFactory func(opt model.RunnerOptions) (Executor, error)

// SingleRank returns the factory of the one-rank executor, *model.Runner.
func SingleRank(m *model.Model) ExecutorFactory {
	return func(opt model.RunnerOptions) (Executor, error) {
		r, err := model.NewRunner(m, opt)
		if err != nil {
			return nil, fmt.Errorf("single-rank runner: %w", err)
		}
		return r, nil
	}
}

// WeightBytes is the memory of a rank's weights (model.Model.WeightBytes):
// every matrix and vector the model holds, fp8 block scales included,
// counting storage shared by two fields (tied embeddings) once.
func WeightBytes(m *model.Model) int64 { return m.WeightBytes() }

var (
	_ StepCoster = (*model.Runner)(nil)
	_ StepCoster = (*rankGroup)(nil)
	_ StepCoster = (*procExecutor)(nil)

	_ RooflineTermer = (*model.Runner)(nil)
	_ RooflineTermer = (*rankGroup)(nil)
	_ RooflineTermer = (*procExecutor)(nil)
)
