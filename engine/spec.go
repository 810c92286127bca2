package engine

import (
	"fmt"
	"slices"

	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/sampler"
	"github.com/cpmla/cpmla/spec"
)

// speculator runs the MTP drafter after every target step and verifies the
// drafts of the next one (speculative decoding). Every buffer is sized at
// start-up.
//
// Verification replays plain decoding: a decoding sequence's rows are its
// last token and its k drafts; the sampler draws from row j with the
// sequence's own state and generator exactly as plain decoding draws that
// token, and the draft is kept while the draw equals it (spec.AcceptGreedy).
// So every emitted token is the token plain decoding would have drawn —
// greedy or sampled, the output and its distribution are plain decoding's,
// with the same seed the same tokens — and the drafts only decide how many
// tokens one target step yields.
//
// The drafter follows each target step over the positions it computed for
// good: a prefill chunk's rows (teacher-forced: each row's next token is
// the prompt's, or the token just sampled), or a verification's last token
// and accepted drafts. The pass reads the target's hidden states
// (model.TargetBank) and ends in each decoding sequence's first draft; k−1
// chained steps, each reading the previous step's hidden state
// (model.DraftBank), draft the rest.
type speculator struct {
	k        int
	accepted []int32   // per entry of the plan: drafts accepted
	tokLP    []float64 // per entry, 1 + k: the logprob of each token it emits
	pass     model.Batch
	passEnd  []int // per pass sequence: the batch row after its rows
	chain    model.Batch
	hidden   []int32 // backing of the pass's hidden rows
	ids      []uint64
	drafts   []int32 // per drafting sequence, k
	allowed  []int
	chainRow []int32 // per drafting sequence: its row in the last draft step
	// held is, per drafting sequence, the drafts its structured output's
	// constraint accepted while they were proposed (withdrawn before
	// verification); mask is the constraint's mask of one draft.
	held  []int
	mask  []uint64
	stats spec.Stats
	// script, set only by tests, rewrites the drafts of a sequence whose
	// tokens so far are toks, so that verification on a real model meets
	// drafts that are right, wrong or right in part.
	script func(toks, drafts []int32)
}

func newSpeculator(c *spec.Config, maxSeqs, maxTokens, vocab int) *speculator {
	k := c.K()
	return &speculator{
		k:        k,
		accepted: make([]int32, maxSeqs),
		tokLP:    make([]float64, maxSeqs*(1+k)),
		pass:     model.Batch{Seqs: make([]model.Seq, 0, maxSeqs)},
		passEnd:  make([]int, 0, maxSeqs),
		chain:    model.Batch{Seqs: make([]model.Seq, 0, maxSeqs)},
		hidden:   make([]int32, maxTokens),
		ids:      make([]uint64, 0, maxSeqs),
		drafts:   make([]int32, maxSeqs*k),
		allowed:  make([]int, maxSeqs),
		chainRow: make([]int32, maxSeqs),
		held:     make([]int, maxSeqs),
		mask:     make([]uint64, (vocab+63)/64),
		stats:    spec.NewStats(k),
	}
}

// verify samples entry i's rows (its last token, then its drafts, from
// logit row first on) until a draw differs from its draft, recording the
// logprob of every token; it returns the drafts accepted and the token after
// them.
//
// Only positions plain decoding reaches are drawn: none after an accepted
// draft that is one of the request's stop tokens (the sequence ends there,
// and the token after it, -1, is never taken), none after a draw that
// failed the sequence's constraint. So the sampler's state — its history
// and a structured output's matcher — advances over exactly the tokens
// emitted, and a constrained position is masked by the constraint's state
// after the tokens accepted before it.
func (e *Engine) verify(sq *sequence, i, first int, drafts []int32) (int32, int32) {
	sp := e.spec
	stops := sq.req.stopIDs
	failed := false
	a, tok := spec.AcceptGreedy(drafts, func(j int) int32 {
		if j > 0 && slices.Contains(stops, drafts[j-1]) {
			return -1
		}
		_, logits := e.exec.Logits(first + j)
		t, lp := e.sampleAt(sq, logits, j)
		sp.tokLP[i*(1+sp.k)+j] = lp
		if sq.sampler.Err() != nil {
			failed = true
			return -1 // never a draft: verification stops here
		}
		return t
	})
	if failed {
		tok = 0 // what a failed plain draw returns; deliver ends the request
	}
	sp.stats.Add(len(drafts), a)
	return int32(a), tok
}

// propose picks the next draft of drafting sequence c (sp.ids[c]) from the
// drafter's logits lg: their argmax, or, under a structured output whose
// constraint can take drafts back, the argmax of the tokens it allows after
// the sequence's tokens and drafts so far, which it then accepts (draft
// withdraws them). Drafts the grammar refuses would only be rejected; the
// grammar's forced tokens are drafted right. ok is false when the
// constraint allows no token (a draft ended the output).
func (e *Engine) propose(c int, lg []float32) (int32, bool) {
	sp := e.spec
	dc, _ := e.live[sp.ids[c]].sampler.Constraint().(sampler.DraftConstraint)
	if dc == nil {
		return int32(sampler.Argmax(lg)), true
	}
	dc.FillMask(sp.mask)
	t := sampler.ArgmaxMasked(lg, sp.mask)
	if t < 0 || dc.Accept(t) != nil {
		return 0, false
	}
	sp.held[c]++
	return int32(t), true
}

// draft runs the drafter after target step p: the pass over every entry's
// finished positions, then the chained steps of the sequences that go on
// decoding, and hands their drafts to the scheduler.
func (e *Engine) draft(p *StepPlan) error {
	sp := e.spec
	sp.pass.Seqs = sp.pass.Seqs[:0]
	sp.passEnd = sp.passEnd[:0]
	sp.ids = sp.ids[:0]
	row, h := 0, 0
	for i, en := range p.Entries {
		q := p.Batch.Seqs[i]
		first := row
		row += len(q.Tokens)
		toks, ok := e.sched.Tokens(en.ID)
		if !ok {
			continue // finished this step
		}
		m := en.NumTokens - en.Drafts + int(sp.accepted[i])
		if en.Start+m+1 > len(toks) {
			continue // no next token known for its last row (cannot happen: a row's next token is the prompt's or was sampled)
		}
		hid := sp.hidden[h : h+m]
		for j := range hid {
			hid[j] = int32(first + j)
		}
		h += m
		sp.pass.Seqs = append(sp.pass.Seqs, model.Seq{Tokens: toks[en.Start+1 : en.Start+m+1], Start: en.Start, BlockTable: q.BlockTable, Hidden: hid})
		sp.passEnd = append(sp.passEnd, h)
		sp.ids = append(sp.ids, en.ID)
	}
	if len(sp.pass.Seqs) == 0 {
		return nil
	}
	if err := e.exec.Draft(0, &sp.pass, model.TargetBank); err != nil {
		return fmt.Errorf("draft pass of %d sequences: %w", len(sp.pass.Seqs), err)
	}
	// The first draft of every sequence that decodes next.
	n := 0
	for i, id := range sp.ids {
		k := e.sched.Draftable(id, sp.k)
		if k == 0 {
			continue
		}
		sp.ids[n], sp.allowed[n], sp.held[n] = id, k, 0
		_, lg := e.exec.Logits(i) // one logit row per pass sequence
		d, ok := e.propose(n, lg)
		if !ok {
			continue // its constraint allows nothing to draft
		}
		sp.drafts[n*sp.k] = d
		sp.chainRow[n] = int32(sp.passEnd[i] - 1)
		n++
	}
	sp.ids = sp.ids[:n]
	for j := 1; j < sp.k; j++ {
		sp.chain.Seqs = sp.chain.Seqs[:0]
		for c, id := range sp.ids {
			if sp.allowed[c] <= j {
				continue
			}
			toks, _ := e.sched.Tokens(id)
			pos := len(toks) - 2 + j // the row drafting token j+1 sits one before its input
			d := sp.drafts[c*sp.k+j-1 : c*sp.k+j]
			sp.chain.Seqs = append(sp.chain.Seqs, model.Seq{Tokens: d, Start: pos, BlockTable: e.sched.blockTable(id), Hidden: sp.chainRow[c : c+1]})
		}
		if len(sp.chain.Seqs) == 0 {
			break
		}
		if err := e.exec.Draft(0, &sp.chain, model.DraftBank); err != nil {
			return fmt.Errorf("draft step %d of %d sequences: %w", j, len(sp.chain.Seqs), err)
		}
		r := 0
		for c := range sp.ids {
			if sp.allowed[c] <= j {
				continue
			}
			_, lg := e.exec.Logits(r)
			sp.chainRow[c] = int32(r)
			r++
			d, ok := e.propose(c, lg)
			if !ok {
				sp.allowed[c] = j // drafts 0 … j-1 only
				continue
			}
			sp.drafts[c*sp.k+j] = d
		}
	}
	for c, id := range sp.ids {
		if h := sp.held[c]; h > 0 {
			if err := e.live[id].sampler.Constraint().(sampler.DraftConstraint).Rollback(h); err != nil {
				return fmt.Errorf("withdraw %d drafts from request %d's structured output: %w", h, id, err)
			}
		}
		if sp.script != nil {
			toks, _ := e.sched.Tokens(id)
			sp.script(toks, sp.drafts[c*sp.k:c*sp.k+sp.allowed[c]])
		}
		if err := e.sched.SetDrafts(id, sp.drafts[c*sp.k:c*sp.k+sp.allowed[c]]); err != nil {
			return err
		}
	}
	return nil
}
