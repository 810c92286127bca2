package engine

import (
	"fmt"
	"unsafe"

	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/model"
)

// Executor runs the steps the scheduler plans on every rank of a deployment.
// The single-rank *model.Runner satisfies it; a multi-rank executor
// broadcasts the plan and runs every rank's shard, returning rank 0's logits.
type Executor interface {
	// Forward runs one step. It writes the step's KV before any row attends.
	Forward(b *model.Batch) error
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

// WeightBytes is the memory of a rank's weights: every matrix and vector the
// model holds, counting storage shared by two fields (tied embeddings) once.
func WeightBytes(m *model.Model) int64 {
	seen := map[uintptr]bool{}
	var n int64
	add := func(p unsafe.Pointer, bytes int64) {
		if bytes == 0 || seen[uintptr(p)] {
			return
		}
		seen[uintptr(p)] = true
		n += bytes
	}
	mat := func(w *kernels.Matrix) {
		switch {
		case w == nil:
		case w.F32 != nil && len(w.F32) > 0:
			add(unsafe.Pointer(&w.F32[0]), int64(len(w.F32))*4)
		case len(w.BF16) > 0:
			add(unsafe.Pointer(&w.BF16[0]), int64(len(w.BF16))*2)
		}
	}
	vec := func(v []float32) {
		if len(v) > 0 {
			add(unsafe.Pointer(&v[0]), int64(len(v))*4)
		}
	}
	mat(m.Embed)
	mat(m.LMHead)
	vec(m.Norm)
	for i := range m.Layers {
		L := &m.Layers[i]
		for _, w := range []*kernels.Matrix{L.QA, L.QB, L.KVA, L.O, L.IdxWQB, L.IdxWK, L.IdxWProj, L.Gate, L.Up, L.Down} {
			mat(w)
		}
		for h := range L.WUKT {
			mat(&L.WUKT[h])
		}
		for h := range L.WUV {
			mat(&L.WUV[h])
		}
		for _, v := range [][]float32{L.InputNorm, L.QANorm, L.KVANorm, L.IdxNormW, L.IdxNormB, L.PostNorm} {
			vec(v)
		}
	}
	return n
}
