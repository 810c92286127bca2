package engine

import (
	"fmt"
	"runtime"

	"github.com/cpmla/cpmla/model"
)

// StepShape is a step the warm-up runs: Decodes one-token rows at the longest
// context, and PrefillTokens prompt tokens split into sequences of at most
// max-model-len.
type StepShape struct {
	Decodes       int
	PrefillTokens int
	// DecodeRows is the rows of each decode (1 + its drafts under
	// speculative decoding); 0 means 1.
	DecodeRows int
}

// rows is the rows of each decode.
func (s StepShape) rows() int { return max(s.DecodeRows, 1) }

// Tokens is the step's token count.
func (s StepShape) Tokens() int { return s.Decodes*s.rows() + s.PrefillTokens }

// maxStepTokens is the most tokens a step of c can hold: the batch limit, or
// every sequence's whole length if that is smaller.
func maxStepTokens(c SchedulerConfig) int {
	return min(c.MaxNumBatchedTokens, c.MaxNumSeqs*c.MaxModelLen)
}

// WarmupShapes lists the steps the warm-up runs for c, covering every
// row-count bucket the scheduler can produce: for each power of two b up to
// the one holding the largest step, an all-prefill step of min(b, largest)
// tokens and, where some row count in (b/2, b] is a possible number of
// sequences, an all-decode step; then the largest mixed step. An executor that builds kernel plans per bucket of rows must key them
// by these buckets (the next power of two of the row count, decode-only or
// not) so that serving builds none.
func WarmupShapes(c SchedulerConfig) []StepShape {
	top := maxStepTokens(c)
	var shapes []StepShape
	for b := 1; ; b *= 2 {
		// Bucket b holds the row counts (b/2, b].
		if b/2 < c.MaxNumSeqs {
			shapes = append(shapes, StepShape{Decodes: min(b, c.MaxNumSeqs)})
		}
		shapes = append(shapes, StepShape{PrefillTokens: min(b, top)})
		if b >= top {
			break
		}
	}
	if d := min(c.MaxNumSeqs-1, top-1); d > 0 {
		shapes = append(shapes, StepShape{Decodes: d, PrefillTokens: min(top-d, c.MaxModelLen)})
	}
	// Verification steps: every decode with its drafts.
	if k := c.SpecTokens; k > 0 {
		for b := 1; b/2 < c.MaxNumSeqs; b *= 2 {
			if d := min(b, c.MaxNumSeqs, top/(1+k)); d > 0 {
				shapes = append(shapes, StepShape{Decodes: d, DecodeRows: 1 + k})
			}
		}
	}
	return shapes
}

// shapeBatch builds the batch of a warm-up or profile step. Block ids are
// dealt round-robin from 0, so they are distinct while the cache has enough;
// the contents written are scratch and the cache is unused until serving.
func shapeBatch(c SchedulerConfig, s StepShape, numBlocks int, tokens []int32) *model.Batch {
	b := &model.Batch{}
	next := 0
	table := func(n int) []int32 {
		t := make([]int32, c.BlocksFor(n))
		for i := range t {
			t[i] = int32(next % numBlocks)
			next++
		}
		return t
	}
	for range s.Decodes {
		n := s.rows()
		start := c.MaxModelLen - n
		b.Seqs = append(b.Seqs, model.Seq{Tokens: tokens[:n], Start: start, BlockTable: table(start + n), LogitsAll: n > 1})
	}
	for left := s.PrefillTokens; left > 0; {
		n := min(left, c.MaxModelLen)
		b.Seqs = append(b.Seqs, model.Seq{Tokens: tokens[:n], BlockTable: table(n)})
		left -= n
	}
	return b
}

// profileBlocks is the cache a profile executor needs for the largest
// all-prefill step.
func profileBlocks(c SchedulerConfig) int {
	top := maxStepTokens(c)
	full, rest := top/c.MaxModelLen, top%c.MaxModelLen
	return full*c.BlocksFor(c.MaxModelLen) + c.BlocksFor(rest)
}

// profileGranularity rounds the measured activation bytes up, so that the
// budget (and the smallest setting a refusal suggests) does not move with the
// few kilobytes the Go runtime allocates for its own bookkeeping during a step.
const profileGranularity = 1 << 20

// profile runs the largest all-prefill step twice (the first also pays for
// lazily initialized scratch) and returns the most bytes one of them allocated
// on the heap beyond the executor's persistent buffers, rounded up to the
// next whole MiB (at least one).
func profile(ex Executor, c SchedulerConfig, numBlocks int) (int64, error) {
	tokens := make([]int32, maxStepTokens(c))
	b := shapeBatch(c, StepShape{PrefillTokens: len(tokens)}, numBlocks, tokens)
	var peak uint64
	for range 2 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := ex.Forward(b)
		runtime.ReadMemStats(&after)
		if err != nil {
			return 0, fmt.Errorf("profile step of %d tokens: %w", len(tokens), err)
		}
		peak = max(peak, after.TotalAlloc-before.TotalAlloc)
	}
	return int64((peak/profileGranularity + 1) * profileGranularity), nil
}

// warmUp runs every warm-up shape once and, under speculative decoding,
// the draft steps that follow it: the pass over its rows and a chained step.
func warmUp(ex Executor, c SchedulerConfig, numBlocks int) error {
	tokens := make([]int32, maxStepTokens(c))
	for _, s := range WarmupShapes(c) {
		b := shapeBatch(c, s, numBlocks, tokens)
		if err := ex.Forward(b); err != nil {
			return fmt.Errorf("warm-up step %+v: %w", s, err)
		}
		if c.SpecTokens > 0 {
			if err := warmDraft(ex, b); err != nil {
				return fmt.Errorf("warm-up draft of step %+v: %w", s, err)
			}
		}
	}
	return nil
}

// warmDraft runs the drafter's pass over b's rows (reading the hidden
// states b left) and one chained step per sequence.
func warmDraft(ex Executor, b *model.Batch) error {
	pass := &model.Batch{}
	chain := &model.Batch{}
	row := 0
	for _, q := range b.Seqs {
		hidden := make([]int32, len(q.Tokens))
		for j := range hidden {
			hidden[j] = int32(row + j)
		}
		row += len(q.Tokens)
		pass.Seqs = append(pass.Seqs, model.Seq{Tokens: q.Tokens, Start: q.Start, BlockTable: q.BlockTable, Hidden: hidden})
		last := q.Start + len(q.Tokens) - 1
		chain.Seqs = append(chain.Seqs, model.Seq{Tokens: q.Tokens[:1], Start: last, BlockTable: q.BlockTable, Hidden: []int32{int32(row - 1)}})
	}
	if err := ex.Draft(0, pass, model.TargetBank); err != nil {
		return err
	}
	// The chained step reads the pass's last row of each sequence.
	return ex.Draft(0, chain, model.DraftBank)
}
