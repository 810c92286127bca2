package verify

import (
	"context"
	"fmt"
	"slices"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/spec"
)

// drafter proposes the drafts of one sequence's next round.
type drafter interface {
	// propose is called once per round per sequence after the MTP layer's
	// steps, with the tokens the sequence has generated and the MTP layer's
	// greedy drafts; it returns the round's drafts.
	propose(seq int, generated, mtp []int32) []int32
}

// mtpDrafts takes the MTP layer's own greedy drafts.
type mtpDrafts struct{}

func (mtpDrafts) propose(_ int, _, mtp []int32) []int32 { return mtp }

// scriptedDrafts replaces the MTP layer's drafts with fixed continuations:
// the target's own greedy tokens (every draft must be accepted) or wrong
// ones (none may be). The MTP layer still runs, so its caches stay as a
// real round leaves them.
type scriptedDrafts struct {
	next func(seq, i int) int32 // the draft for generated token i of seq
	k    int
}

func (d scriptedDrafts) propose(seq int, generated, _ []int32) []int32 {
	out := make([]int32, d.k)
	for i := range out {
		out[i] = d.next(seq, len(generated)+i)
	}
	return out
}

// specRun is a workload run with MTP speculative decoding.
type specRun struct {
	gen    [][]int32 // generated tokens of every sequence (want of them)
	rounds [][]int   // accepted drafts of every round of every sequence
	steps  int       // target steps after the prefill
	stats  spec.Stats
	// probes[s] holds, for every draft row of sequence s in order, the MTP
	// layer's log-probabilities of probeTokens evenly spaced token ids: a
	// drafter that ran on another layout than the target's differs here
	// even when no draft is accepted.
	probes [][][]float64
}

// probeTokens is the number of token ids whose draft log-probabilities are
// compared between runs.
const probeTokens = 256

// probe returns the log-probabilities of probeTokens evenly spaced ids.
func probe(logits []float32) []float64 {
	lse := sampler.LogSumExp(logits)
	out := make([]float64, probeTokens)
	for i := range out {
		out[i] = float64(logits[i*len(logits)/probeTokens]) - lse
	}
	return out
}

// runSpec runs the workload's prompts (prefilled in chunks of PrefillChunk)
// and then rounds of greedy speculative decoding until every sequence has
// want generated tokens, on one rank (bp == nil) or on the parallel layout.
// The MTP layer follows every target step: after a prefill chunk it runs
// over the chunk's positions (teacher-forced from the target's hidden
// states); after a verification step over the accepted positions, ending
// in the first draft; then K−1 chained steps draft the rest. A round's
// target step verifies [last token, K drafts] as one row each, and the
// accepted drafts plus the target's next token are appended (spec.AcceptGreedy).
func runSpec(ctx context.Context, cfg *config.Model, src model.TensorSource, c Config, prompts [][]int32, bp *cp.BackendPlan, want int, d drafter) (*specRun, error) {
	K := c.Spec.K()
	layout, interleave := c.ranks(bp)
	kl := kvcache.Layout{N: layout.DCP, I: interleave}
	B := c.BlockSize
	maxLen, total := 0, 0
	for _, p := range prompts {
		maxLen = max(maxLen, len(p)+want+K+1)
		chunk := len(p)
		if c.PrefillChunk > 0 {
			chunk = min(chunk, c.PrefillChunk)
		}
		total += max(chunk, 1+K)
	}
	blocksPerSeq := (kl.LocalLen(maxLen, 0) + B - 1) / B
	tables := make([][]int32, len(prompts))
	for s := range prompts {
		tables[s] = make([]int32, blocksPerSeq)
		for i := range tables[s] {
			tables[s][i] = int32(i*len(prompts) + s)
		}
	}
	kvd, _ := kvcache.ParseKVDType(c.KVDType)
	idd, _ := kvcache.ParseIndexerDType(c.IndexerDType)
	opt := model.RunnerOptions{
		MaxTokens: total, MaxModelLen: max(blocksPerSeq*B*layout.DCP, maxLen), MaxLogitRows: total,
		MaxSeqs: len(prompts), BlockSize: B, NumBlocks: blocksPerSeq * len(prompts), KVDType: kvd, IndexerDType: idd, MTP: true,
	}
	runners, groups, err := buildRunners(ctx, cfg, src, c, layout, interleave, bp, opt)
	if err != nil {
		return nil, err
	}
	r0 := runners[0]
	run := &specRun{gen: make([][]int32, len(prompts)), rounds: make([][]int, len(prompts)), stats: spec.NewStats(K), probes: make([][][]float64, len(prompts))}
	draftRow := func(s, row int) int32 {
		for i := 0; i < r0.NumLogitRows(); i++ {
			if br, lg := r0.Logits(i); br == row {
				run.probes[s] = append(run.probes[s], probe(lg))
				return int32(sampler.Argmax(lg))
			}
		}
		panic(fmt.Sprintf("verify: draft row %d has no logits", row))
	}
	fed := make([]int, len(prompts)) // positions the target has computed
	drafts := make([][]int32, len(prompts))
	done := func(s int) bool { return len(run.gen[s]) >= want }
	// The target row of each batch row and the batch's sequences.
	var batchSeq []int
	var rowOff []int
	step := func(b *model.Batch, draft bool, k int, from model.HiddenBank) error {
		if draft {
			return eachRank(ctx, runners, groups, func(r *model.Runner) error { return r.Draft(k, b, from) })
		}
		return eachRank(ctx, runners, groups, func(r *model.Runner) error { return r.Forward(b) })
	}
	argmaxRow := func(row int) int32 {
		for i := 0; i < r0.NumLogitRows(); i++ {
			if br, lg := r0.Logits(i); br == row {
				return int32(sampler.Argmax(lg))
			}
		}
		panic(fmt.Sprintf("verify: batch row %d has no logits", row))
	}
	for {
		target := &model.Batch{}
		batchSeq, rowOff = batchSeq[:0], rowOff[:0]
		row := 0
		decodes := false
		for s, p := range prompts {
			if done(s) {
				continue
			}
			var q model.Seq
			if fed[s] < len(p) {
				n := len(p) - fed[s]
				if c.PrefillChunk > 0 {
					n = min(n, c.PrefillChunk)
				}
				q = model.Seq{Tokens: p[fed[s] : fed[s]+n], Start: fed[s], BlockTable: tables[s]}
			} else {
				last := run.gen[s][len(run.gen[s])-1]
				q = model.Seq{Tokens: append([]int32{last}, drafts[s]...), Start: fed[s], BlockTable: tables[s], LogitsAll: true}
				decodes = true
			}
			target.Seqs = append(target.Seqs, q)
			batchSeq, rowOff = append(batchSeq, s), append(rowOff, row)
			row += len(q.Tokens)
		}
		if len(target.Seqs) == 0 {
			break
		}
		if decodes {
			run.steps++
		}
		if err := step(target, false, 0, model.TargetBank); err != nil {
			return nil, err
		}
		// Acceptance, and the MTP layer's pass over the positions the step
		// computed for good.
		pass := &model.Batch{}
		for i, s := range batchSeq {
			q := target.Seqs[i]
			off, n := rowOff[i], len(q.Tokens)
			var next []int32
			switch {
			case !q.LogitsAll && q.Start+n < len(prompts[s]):
				next = prompts[s][q.Start+1 : q.Start+n+1]
			case !q.LogitsAll:
				first := argmaxRow(off + n - 1)
				run.gen[s] = append(run.gen[s], first)
				next = append(slices.Clone(prompts[s][q.Start+1:q.Start+n]), first)
			default:
				a, tok := spec.AcceptGreedy(drafts[s], func(j int) int32 { return argmaxRow(off + j) })
				run.stats.Add(K, a)
				run.rounds[s] = append(run.rounds[s], a)
				next = append(slices.Clone(drafts[s][:a]), tok)
				run.gen[s] = append(run.gen[s], next...)
				n = a + 1
			}
			hidden := make([]int32, n)
			for j := range hidden {
				hidden[j] = int32(off + j)
			}
			pass.Seqs = append(pass.Seqs, model.Seq{Tokens: next, Start: q.Start, BlockTable: q.BlockTable, Hidden: hidden})
			fed[s] = q.Start + n
		}
		if err := step(pass, true, 0, model.TargetBank); err != nil {
			return nil, err
		}
		// The first draft of every sequence that has begun generating, then
		// K−1 chained steps.
		mtp := make([][]int32, len(prompts))
		var chain []int
		passRow := 0
		for i, s := range batchSeq {
			rows := len(pass.Seqs[i].Tokens)
			passRow += rows
			if fed[s] < len(prompts[s]) || done(s) {
				continue
			}
			mtp[s] = append(mtp[s], draftRow(s, passRow-1))
			chain = append(chain, s)
		}
		lastRow := map[int]int32{}
		passRow = 0
		for i, s := range batchSeq {
			passRow += len(pass.Seqs[i].Tokens)
			lastRow[s] = int32(passRow - 1)
		}
		for j := 1; j < K; j++ {
			b := &model.Batch{}
			for _, s := range chain {
				b.Seqs = append(b.Seqs, model.Seq{Tokens: []int32{mtp[s][j-1]}, Start: fed[s] - 1 + j, BlockTable: tables[s], Hidden: []int32{lastRow[s]}})
			}
			if len(b.Seqs) == 0 {
				break
			}
			if err := step(b, true, 0, model.DraftBank); err != nil {
				return nil, err
			}
			for i, s := range chain {
				mtp[s] = append(mtp[s], draftRow(s, i))
				lastRow[s] = int32(i)
			}
		}
		for _, s := range chain {
			drafts[s] = d.propose(s, run.gen[s], mtp[s])
		}
	}
	for s := range run.gen {
		run.gen[s] = run.gen[s][:want]
	}
	return run, nil
}

// eachRank runs fn on every runner (as its rank's goroutine, or on this
// process's one runner).
func eachRank(ctx context.Context, runners []*model.Runner, groups []comm.Group, fn func(*model.Runner) error) error {
	if len(runners) == 1 && len(groups) <= 1 {
		return fn(runners[0])
	}
	errs := inproc.Run(ctx, groups, func(ctx context.Context, g comm.Group) error {
		return fn(runners[g.Rank()])
	})
	return comm.FirstRankError(errs)
}

// compareSpec runs the workload with MTP speculation on one rank and on the
// layout and holds both to plain greedy decoding (the single-rank run's
// tokens) and to each other, round by round.
func compareSpec(ctx context.Context, cfg *config.Model, src model.TensorSource, c Config, prompts [][]int32, bp *cp.BackendPlan, plain *engineRun, res *Result) error {
	want := c.DecodeSteps + 1
	one, err := runSpec(ctx, cfg, src, c, prompts, nil, want, mtpDrafts{})
	if err != nil {
		return fmt.Errorf("single-rank speculative run: %w", err)
	}
	par, err := runSpec(ctx, cfg, src, c, prompts, bp, want, mtpDrafts{})
	if err != nil {
		return fmt.Errorf("parallel speculative run: %w", err)
	}
	greedy, accept := true, true
	for s, p := range prompts {
		ref := plain.tokens[s][len(p) : len(p)+want]
		for name, got := range map[string][]int32{"single-rank": one.gen[s], "parallel": par.gen[s]} {
			if !slices.Equal(ref, got) {
				greedy = false
				res.Problems = append(res.Problems, fmt.Sprintf("sequence %d: %s speculative greedy tokens %v differ from plain greedy decoding %v", s, name, got, ref))
			}
		}
		if len(one.probes[s]) != len(par.probes[s]) {
			accept = false
			res.Problems = append(res.Problems, fmt.Sprintf("sequence %d: %d draft rows on one rank, %d on the layout", s, len(one.probes[s]), len(par.probes[s])))
		} else {
			for i := range one.probes[s] {
				res.SpecDraftMaxDiff = max(res.SpecDraftMaxDiff, maxAbsDiff(one.probes[s][i], par.probes[s][i]))
			}
		}
		if !slices.Equal(one.rounds[s], par.rounds[s]) {
			accept = false
			res.Problems = append(res.Problems, fmt.Sprintf("sequence %d: accepted drafts per round differ: single rank %v, parallel %v", s, one.rounds[s], par.rounds[s]))
		}
	}
	if res.SpecDraftMaxDiff > c.Tolerance {
		accept = false
		res.Problems = append(res.Problems, fmt.Sprintf("the drafter's log-probabilities on the layout differ from one rank's by %.3g > %.3g", res.SpecDraftMaxDiff, c.Tolerance))
	}
	res.SpecGreedyIdentical, res.SpecAcceptanceIdentical = &greedy, &accept
	res.SpecMeanAcceptance = par.stats.MeanAcceptanceLength()
	res.SpecAcceptancePerPos = par.stats.AcceptanceRatePerPos()
	res.SpecTargetSteps = par.steps
	return nil
}
