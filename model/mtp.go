package model

import (
	"fmt"

	"github.com/cpmla/cpmla/kernels"
)

// HiddenBank names one of a runner's banks of final-normed hidden states,
// one row per batch row of the step that wrote it.
type HiddenBank int

const (
	// TargetBank holds the last target step's hidden states after the
	// model's final norm.
	TargetBank HiddenBank = iota
	// DraftBank holds the last draft step's hidden states after the MTP
	// layer's shared-head norm.
	DraftBank
)

// mtpBlock holds the buffers of the MTP glue.
type mtpBlock struct {
	glue []float32 // [T, 2D]: enorm(embedding) | hnorm(previous hidden)
}

// mtpStep says which MTP layer a step runs and where its hidden states come
// from.
type mtpStep struct {
	k    int
	from HiddenBank
}

// Draft runs MTP layer k (DeepSeek-V3's multi-token prediction, as vLLM
// runs it for DeepSeek-V3.2 and GLM-5) over b, on this rank's share of the
// rows, with the layer's own KV and indexer caches laid out by the runner's
// kvcache.Layout — the target's own ownership function, so a draft cannot
// run on another layout — and combined over DCP by the same LSE merge.
//
// Token j of sequence q at position Start+j is the token after that
// position; its previous hidden state is that of batch row q.Hidden[j] of
// the step that wrote bank from (its rows are the step's batch rows). The
// layer computes
//
//	h = eh_proj([enorm(embed(token)) | hnorm(previous hidden)])
//
// (the embedding is zero at position 0, as vLLM runs it), then a full
// decoder layer (MLA + indexer + MoE) with h as its residual stream; the
// logit rows get shared_head.norm(h) — kept in DraftBank, which is the
// hidden state the next chained draft step reads (post-norm, as vLLM
// recycles it for DeepSeek since its #47448 and GLM's NextN always did) —
// and their logits through the layer's shared head (the main LM head when
// the checkpoint stores none, GLM-5).
//
// The first draft step after a target step reads TargetBank: the target's
// hidden states after its final norm.
func (r *Runner) Draft(k int, b *Batch, from HiddenBank) error {
	if r.mtp == nil {
		return fmt.Errorf("the runner has no MTP layers; build it with RunnerOptions.MTP")
	}
	if k < 0 || k >= len(r.M.MTP) {
		return fmt.Errorf("MTP layer %d of %d", k, len(r.M.MTP))
	}
	if from != TargetBank && from != DraftBank {
		return fmt.Errorf("hidden bank %d is neither TargetBank nor DraftBank", from)
	}
	// Checked on the whole replicated batch, so every rank refuses alike
	// before any collective.
	for si, q := range b.Seqs {
		if len(q.Hidden) != len(q.Tokens) {
			return fmt.Errorf("draft sequence %d has %d tokens and %d hidden rows; give one per token", si, len(q.Tokens), len(q.Hidden))
		}
		for j, h := range q.Hidden {
			if h < 0 || int(h) >= r.bankRows[from] {
				return fmt.Errorf("draft sequence %d token %d reads hidden row %d, but the bank holds the %d batch rows of the step that wrote it", si, j, h, r.bankRows[from])
			}
		}
	}
	return r.run(b, &mtpStep{k: k, from: from})
}

// mtpInput fills the residual stream of the local rows of a draft step from
// the MTP glue. The hidden rows index bank from, which holds one row per
// batch row of the step that wrote it.
func (r *Runner) mtpInput(b *Batch, t *MTPLayer, from HiddenBank) {
	cfg, m, s := r.M.Cfg, r.M, r.steps
	D := cfg.HiddenSize
	eps := float32(cfg.RMSNormEps)
	bank := r.banks[from]
	// hiddenOf is the bank row of batch row br (checked by Draft).
	hiddenOf := func(br int32) int32 {
		i := int32(0)
		for _, q := range b.Seqs {
			if br < i+int32(len(q.Tokens)) {
				return q.Hidden[br-i]
			}
			i += int32(len(q.Tokens))
		}
		panic(fmt.Sprintf("model: batch row %d has no sequence", br))
	}
	M := s.nLocal
	glue := r.mtp.glue[:M*2*D]
	for i := 0; i < M; i++ {
		g := glue[i*2*D : (i+1)*2*D]
		br := s.lrow[i]
		if br < 0 {
			clear(g)
			continue
		}
		e := g[:D]
		if s.rowPos[br] == 0 {
			clear(e)
		} else {
			m.Embed.Row(int(s.rowTok[br]), e)
			r.reads.add(opLookup, matrixBytes(m.Embed)/int64(m.Embed.Rows), 0)
		}
		kernels.RMSNorm(e, e, t.ENorm, eps)
		hr := hiddenOf(br)
		kernels.RMSNorm(g[D:], bank[int(hr)*D:(int(hr)+1)*D], t.HNorm, eps)
	}
	r.reads.mul(r.h[:M*D], glue, M, t.EHProj)
}
