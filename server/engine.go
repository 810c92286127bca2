package server

import (
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/spec"
)

// EngineStats adapts an engine's counters to Stats. Every rank's cache
// holds the same block ids (each block id stands for --block-size positions
// spread over the DCP ranks), so the fraction of blocks in use is the same
// on each of the ranks.
func EngineStats(e *engine.Engine, ranks int) Stats {
	return engineStats{e: e, ranks: max(ranks, 1)}
}

type engineStats struct {
	e     *engine.Engine
	ranks int
}

func (s engineStats) KVUsage() []float64 {
	st := s.e.Stats()
	u := 0.0
	if st.KVBlocks > 0 {
		u = float64(st.KVBlocksInUse) / float64(st.KVBlocks)
	}
	out := make([]float64, s.ranks)
	for i := range out {
		out[i] = u
	}
	return out
}

func (s engineStats) PlanBuildsAfterWarmup() uint64 {
	return uint64(max(s.e.Stats().KernelPlansBuiltAfterWarmup, 0))
}

// CollectiveSeconds is the time the engine's ranks have spent inside
// collectives (cpmla:collective_seconds_total).
func (s engineStats) CollectiveSeconds() float64 { return s.e.CollectiveSeconds() }

// Preemptions counts the engine's preemptions (vllm:num_preemptions_total).
func (s engineStats) Preemptions() int64 { return s.e.Stats().Preemptions }

// PrefixCache is the engine's prefix-cache lookups and hits in tokens.
func (s engineStats) PrefixCache() (queries, hits int64) {
	st := s.e.Stats()
	return st.PrefixQueryTokens, st.PrefixHitTokens
}

// SpecDecode is the engine's speculative-decoding counters
// (vllm:spec_decode_*), and whether it speculates at all.
func (s engineStats) SpecDecode() (spec.Stats, bool) {
	return s.e.Stats().Spec, s.e.Options().Speculative != nil
}
