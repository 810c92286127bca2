package model

import (
	"fmt"

	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/kvcache"
)

// stepTables are the per-step tables every block of a step reads, derived
// from the replicated Batch into buffers sized at start-up: each batch row's
// position, sequence and token; this rank's local rows (all of them, or its
// DualChunkSwap share under PCP); and the cache slots of every sequence's
// local keys.
type stepTables struct {
	layout    kvcache.Layout
	dcpRank   int
	pcpRank   int
	pcpSize   int
	blockSize int
	maxTokens int
	maxLen    int
	maxSeqs   int

	rowPos, rowSeq, rowTok []int32 // per batch row
	lrow                   []int32 // local row → batch row (−1 = padding)
	nLocal                 int
	rope                   *kernels.Rope
	ropeCS                 []float32 // local row t's rope cos/sin at [t·dim, (t+1)·dim)
	keySlot                []int32   // slots of this rank's local keys of each seq, back to back
	keyOff                 []int
	keyLen                 []int32
	tables                 [][]int32
	// PCP > 1
	part        *cp.Partition
	partLens    []int32
	partPrefill []bool
}

func newStepTables(layout kvcache.Layout, opt RunnerOptions, rope *kernels.Rope, bufs *bufferList) (*stepTables, error) {
	s := &stepTables{layout: layout, pcpSize: 1, blockSize: opt.BlockSize, maxTokens: opt.MaxTokens, maxLen: opt.MaxModelLen, maxSeqs: opt.MaxSeqs, rope: rope}
	T := opt.MaxTokens
	if p := opt.Parallel; p != nil {
		rank := p.Groups.World.Rank()
		s.dcpRank, s.pcpRank = p.Layout.DCPRank(rank), p.Layout.PCPRank(rank)
		s.pcpSize = p.Layout.PCP
		if P := p.Layout.PCP; P > 1 {
			var err error
			if s.part, err = cp.NewPartition(P, T); err != nil {
				return nil, err
			}
			s.partLens, s.partPrefill = make([]int32, opt.MaxSeqs), make([]bool, opt.MaxSeqs)
		}
	}
	i32 := bufs.i32
	s.rowPos, s.rowSeq, s.rowTok = i32("row positions", T), i32("row sequences", T), i32("row tokens", T)
	s.lrow = i32("local rows", T)
	s.ropeCS = bufs.f32("rope cos/sin", T*rope.Dim())
	s.keySlot = i32("key slots", opt.MaxSeqs*layout.LocalLen(opt.MaxModelLen, 0)) // rank 0 owns the most
	s.keyOff = make([]int, 0, opt.MaxSeqs)
	s.keyLen = make([]int32, 0, opt.MaxSeqs)
	s.tables = make([][]int32, 0, opt.MaxSeqs)
	return s, nil
}

// pcp is the PCP world size.
func (s *stepTables) pcp() int { return s.pcpSize }

// build derives the tables of b, appending the batch rows that ask for
// logits to logitRow (whose capacity bounds them). It returns the batch's
// token count.
func (s *stepTables) build(b *Batch, vocab int, logitRow *[]int32) (int, error) {
	T := 0
	for _, q := range b.Seqs {
		T += len(q.Tokens)
	}
	if T == 0 {
		return 0, nil
	}
	if T > s.maxTokens {
		return 0, fmt.Errorf("step has %d tokens, more than max tokens %d", T, s.maxTokens)
	}
	if len(b.Seqs) > s.maxSeqs {
		return 0, fmt.Errorf("step has %d sequences, more than max sequences %d", len(b.Seqs), s.maxSeqs)
	}
	B := s.blockSize
	s.keyOff, s.keyLen = s.keyOff[:0], s.keyLen[:0]
	s.tables = s.tables[:0]
	row, off := 0, 0
	for si, q := range b.Seqs {
		end := q.Start + len(q.Tokens)
		if end > s.maxLen {
			return 0, fmt.Errorf("sequence %d reaches position %d, beyond max model len %d", si, end, s.maxLen)
		}
		if need := (s.layout.LocalLen(end, 0) + B - 1) / B; len(q.BlockTable) < need {
			return 0, fmt.Errorf("sequence %d needs %d blocks for %d positions, block table has %d", si, need, end, len(q.BlockTable))
		}
		s.tables = append(s.tables, q.BlockTable)
		nk := s.layout.LocalLen(end, s.dcpRank)
		s.keyOff = append(s.keyOff, off)
		s.keyLen = append(s.keyLen, int32(nk))
		s.layout.LocalSlots(s.keySlot[off:off+nk], q.BlockTable, B)
		off += nk
		for j, tok := range q.Tokens {
			if tok < 0 || int(tok) >= vocab {
				return 0, fmt.Errorf("sequence %d token %d is %d, outside the vocabulary [0, %d)", si, j, tok, vocab)
			}
			s.rowPos[row] = int32(q.Start + j)
			s.rowSeq[row] = int32(si)
			s.rowTok[row] = tok
			if q.LogitsAll || j == len(q.Tokens)-1 {
				if len(*logitRow) == cap(*logitRow) {
					return 0, fmt.Errorf("step asks for more than %d logit rows", cap(*logitRow))
				}
				*logitRow = append(*logitRow, int32(row))
			}
			row++
		}
	}
	// This rank's rows: all of them, or its DualChunkSwap share under PCP.
	if s.part != nil {
		lens, pre := s.partLens[:len(b.Seqs)], s.partPrefill[:len(b.Seqs)]
		for i, q := range b.Seqs {
			lens[i] = int32(len(q.Tokens))
			pre[i] = len(q.Tokens) > 1
		}
		if err := s.part.Build(lens, pre); err != nil {
			return 0, err
		}
		M := s.part.MaxRows()
		copy(s.lrow[:M], s.part.Tokens(s.pcpRank))
		s.nLocal = M
	} else {
		for i := 0; i < T; i++ {
			s.lrow[i] = int32(i)
		}
		s.nLocal = T
	}
	// Every head of every layer rotates a row by the same angles.
	dr := s.rope.Dim()
	for t := range s.nLocal {
		s.rope.Angles(s.ropeCS[t*dr:(t+1)*dr], s.localPos(t))
	}
	return T, nil
}

// ropeAngles is local row t's rope cos/sin (Rope.Angles at its position).
func (s *stepTables) ropeAngles(t int) []float32 {
	dr := s.rope.Dim()
	return s.ropeCS[t*dr : (t+1)*dr]
}

// localPos is the position of local row t (0 for padding rows).
func (s *stepTables) localPos(t int) int {
	if br := s.lrow[t]; br >= 0 {
		return int(s.rowPos[br])
	}
	return 0
}

// sequenceRun returns the end u of the run rows[t:u] of batch rows of
// rows[t]'s sequence (rows[t] ≥ 0; a padding row, −1, ends a run): the rows
// of a prompt or a verification, which share their sequence's keys.
func (s *stepTables) sequenceRun(rows []int32, t int) int {
	seq := s.rowSeq[rows[t]]
	u := t + 1
	for u < len(rows) && rows[u] >= 0 && s.rowSeq[rows[u]] == seq {
		u++
	}
	return u
}

// keys returns the cache slots of seq si's local keys.
func (s *stepTables) keys(si int) []int32 {
	start := s.keyOff[si]
	return s.keySlot[start : start+int(s.keyLen[si])]
}
