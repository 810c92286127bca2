package model

import (
	"fmt"
	"math"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
)

// dcpExchange is the part of an attention block that exists only under
// decode context parallelism: the gathers of the DCP group's absorbed
// queries and (sparse models) indexer queries, the merge of the members'
// top-k candidates, the LSE combine of their partial outputs, and which PCP
// row block each member's rows are. Its buffers are sized once, for the
// worst step, with the block's other buffers.
type dcpExchange struct {
	qgather         *cp.QueryGather
	comb            *cp.Combiner
	tk              *cp.TopK // sparse models only
	qG, attnG, lseG []float32
	idxPack, idxG   []float32 // sparse models only
	blockDistinct   []int     // DCP member → index of its PCP row block
	distinctPCP     []int     // PCP rank of each distinct row block of the DCP group
}

// rowBlocks finds the distinct PCP row blocks of this rank's DCP group
// (members of one PCP rank hold the same rows) and returns how many there
// are: the row blocks whose top-k this rank computes.
func (x *dcpExchange) rowBlocks(par *Parallel) int {
	l := par.Layout
	members := l.DCPMembers(par.Groups.World.Rank())
	seen := map[int]int{}
	x.blockDistinct = make([]int, len(members))
	for j, w := range members {
		pr := l.PCPRank(w)
		d, ok := seen[pr]
		if !ok {
			d = len(x.distinctPCP)
			seen[pr] = d
			x.distinctPCP = append(x.distinctPCP, pr)
		}
		x.blockDistinct[j] = d
	}
	return len(x.distinctPCP)
}

// size makes the exchange's collectives and buffers for a's shapes (after
// rowBlocks, with a's top-k and indexer widths set).
func (x *dcpExchange) size(a *attentionBlock, opt RunnerOptions, bufs *bufferList) error {
	cfg, steps, f := a.m.Cfg, a.steps, bufs.f32
	T, H, N := opt.MaxTokens, a.m.Heads, steps.layout.N
	backend := "ag_rs"
	if a.par.Backend != nil {
		backend = a.par.Backend.Comm
	}
	var err error
	if x.qgather, err = cp.NewQueryGather(N, T, H, mla.RowDim); err != nil {
		return err
	}
	if x.comb, err = cp.NewCombiner(backend, N, T, H, mla.LatentDim); err != nil {
		return err
	}
	bufs.add("dcp combine", x.comb.Bytes())
	x.qG = f("dcp query gather", T*N*H*mla.RowDim)
	x.attnG, x.lseG = f("dcp partial out", T*N*H*mla.LatentDim), f("dcp partial lse", T*N*H)
	if cfg.Sparse() {
		sel := len(x.distinctPCP) * T
		if x.tk, err = cp.NewTopK(steps.layout, steps.dcpRank, sel, a.topk, opt.MaxModelLen); err != nil {
			return err
		}
		x.idxPack, x.idxG = f("indexer query pack", T*a.idxWidth), f("indexer query gather", N*T*a.idxWidth)
	}
	return nil
}

// attendDCP runs attention for this rank's rows with the KV sharded over the
// DCP group: gather the group's absorbed queries (one block of M rows × H
// heads per member), select every distinct row block's global top-k and
// localize it, attend every block over the local shard, and combine the
// partials so that this rank keeps its own block, out [M, H, 512].
func (a *attentionBlock) attendDCP(lc *kvcache.LayerCache, out []float32) error {
	m, cfg, s := a.m, a.m.Cfg, a.steps
	ctx, g := a.par.ctx(), a.par.Groups.DCP
	N, H, M, K := s.layout.N, m.Heads, s.nLocal, a.topk
	NH := N * H
	qG := a.dcp.qG[:M*NH*mla.RowDim]
	if err := a.dcp.qgather.Gather(ctx, g, qG, a.qabs[:M*H*mla.RowDim], M); err != nil {
		return fmt.Errorf("dcp query gather: %w", err)
	}
	nb := len(a.dcp.distinctPCP)
	R := nb * M
	if cfg.Sparse() {
		if err := a.selectDCP(lc, R); err != nil {
			return err
		}
	} else {
		a.selectDenseDCP(R)
	}
	attn, lse := a.dcp.attnG[:M*NH*mla.LatentDim], a.dcp.lseG[:M*NH]
	if nb == 1 {
		a.countAttention(validSlots(a.indices[:M*K]), NH)
	} else {
		for j := 0; j < N; j++ {
			d := a.dcp.blockDistinct[j]
			a.countAttention(validSlots(a.indices[d*M*K:(d+1)*M*K]), H)
		}
	}
	if nb == 1 {
		// Every member holds the same rows: one call over all gathered heads.
		mla.SparseAttention(attn, lse, nil, qG, M, NH, lc, a.indices[:M*K], K, nil, m.Scale, a.ws)
	} else {
		for j := 0; j < N; j++ {
			d := a.dcp.blockDistinct[j]
			for t := 0; t < M; t++ {
				base := t*NH + j*H
				mla.SparseAttention(attn[base*mla.LatentDim:(base+H)*mla.LatentDim], lse[base:base+H], nil,
					qG[base*mla.RowDim:(base+H)*mla.RowDim], 1, H, lc, a.indices[(d*M+t)*K:(d*M+t+1)*K], K, nil, m.Scale, a.ws)
			}
		}
	}
	if err := a.dcp.comb.Combine(ctx, g, out, a.lse[:M*H], attn, lse, M); err != nil {
		return fmt.Errorf("dcp combine: %w", err)
	}
	return nil
}

// blockRows returns the batch rows of distinct row block d's M rows (−1 for
// padding).
func (a *attentionBlock) blockRows(d int) []int32 {
	s := a.steps
	if s.part == nil {
		return s.lrow[:s.nLocal]
	}
	return s.part.Tokens(a.dcp.distinctPCP[d])
}

// blockRow returns the batch row of row t of distinct row block d (−1 for padding).
func (a *attentionBlock) blockRow(d, t int) int32 { return a.blockRows(d)[t] }

// selectDCP computes the exact global top-k of every row of the DCP group's
// distinct row blocks from this rank's keys and turns it into local slots.
func (a *attentionBlock) selectDCP(lc *kvcache.LayerCache, R int) error {
	cfg, s := a.m.Cfg, a.steps
	ctx, g := a.par.ctx(), a.par.Groups.DCP
	HI, dI := cfg.IndexNHeads, cfg.IndexHeadDim
	N, M, K, W := s.layout.N, s.nLocal, a.topk, a.idxWidth
	// Gather the indexer queries and weights of the group's rows: each
	// member's M queries, then its M rows of head weights, so that a run of
	// rows' queries (and weights) lie side by side for one scoring call.
	QW := M * HI * dI
	pack := a.dcp.idxPack[:M*W]
	copy(pack[:QW], a.qI[:QW])
	copy(pack[QW:], a.wI[:M*HI])
	all := a.dcp.idxG[:N*M*W]
	if err := comm.AllGather(ctx, g, all, pack); err != nil {
		return fmt.Errorf("dcp indexer query gather: %w", err)
	}
	width := 0
	for si := range s.keyOff {
		width = max(width, len(s.keys(si)))
	}
	width = max(width, 1)
	scores := a.scores[:R*width]
	for i := range R {
		row := scores[i*width : (i+1)*width]
		for k := range row {
			row[k] = float32(math.Inf(-1))
		}
		a.rowReq[i] = 0
		if br := a.blockRow(i/M, i%M); br >= 0 {
			a.rowReq[i] = s.rowSeq[br]
		}
	}
	for d := range R / M {
		// The member whose block this is: any member of distinct block d.
		j := 0
		for j = range a.dcp.blockDistinct {
			if a.dcp.blockDistinct[j] == d {
				break
			}
		}
		src := all[j*M*W : (j+1)*M*W]
		// The block's rows of one sequence (a prompt's) share its keys:
		// one call scores them, each row's local keys up to its causal
		// bound, with the bits of scoring each row alone.
		rows := a.blockRows(d)[:M]
		for t := 0; t < M; {
			if rows[t] < 0 {
				t++
				continue
			}
			u, keys := s.sequenceRun(rows, t), 0
			for v := t; v < u; v++ {
				end := s.layout.LocalLen(int(s.rowPos[rows[v]])+1, s.dcpRank)
				a.ends[v] = int32(end)
				keys = max(keys, end)
				a.countIndexer(end)
			}
			if keys > 0 {
				slots := s.keys(int(s.rowSeq[rows[t]]))
				a.scoreSeq(scores[d*M*width:], width, src[:QW], src[QW:], lc, mla.IndexerSeq{Row: t, Rows: u - t, Slots: slots[:keys], Ends: a.ends[t:u]})
			}
			t = u
		}
		// The block's rows are scored before the next block reuses a.ends.
		a.flushSeqs(scores[d*M*width:], width, src[:QW], src[QW:], lc)
	}
	pos := a.idxPos[:R*K]
	if err := a.dcp.tk.Select(ctx, g, pos, a.valid[:R], scores, R, width); err != nil {
		return fmt.Errorf("dcp top-k merge: %w", err)
	}
	if *a.trace != nil {
		for i := range R {
			if br := a.blockRow(i/M, i%M); br >= 0 {
				(*a.trace)(a.layer, s.rowPos[br], s.rowSeq[br], pos[i*K:i*K+int(a.valid[i])])
			}
		}
	}
	return cp.LocalizeRows(s.layout, s.dcpRank, a.indices[:R*K], a.valid[:R], pos, R, K, s.tables, a.rowReq[:R], s.blockSize, a.compact)
}

// selectDenseDCP gives every row of the group's distinct row blocks all its
// causal keys held by this rank (dense MLA: no indexer).
func (a *attentionBlock) selectDenseDCP(R int) {
	s := a.steps
	M, K := s.nLocal, a.topk
	for i := range R {
		dst := a.indices[i*K : (i+1)*K]
		fillInvalid(dst)
		br := a.blockRow(i/M, i%M)
		if br < 0 {
			continue
		}
		slots := s.keys(int(s.rowSeq[br]))
		end := s.layout.LocalLen(int(s.rowPos[br])+1, s.dcpRank)
		copy(dst, slots[:end])
	}
}
