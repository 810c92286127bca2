package engine

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/model"
)

// fakeExec is an executor without a model. It keeps, per DCP rank, a cache
// of the token id written at every slot, and its "logits" put the maximum
// at a hash of the tokens it reads back through the block table. A block
// handed to two requests, a stale prefix hit or a table that misses a
// position therefore changes the output, exactly as it would with a model.
type fakeExec struct {
	opt    model.RunnerOptions
	layout kvcache.Layout
	vocab  int
	cache  [][]int32 // per rank, per slot: token id (−2 = never written)
	logits []float32
	rows   []int32
	nrows  int
	plans  map[[2]int]bool
	built  int64
	bufs   []model.Buffer
	seq    []int32
	// While hold is set, every Forward waits for a value on gate.
	hold atomic.Bool
	gate chan struct{}
	// failWith, when set, is the error every Forward returns (a rank lost).
	failWith atomic.Pointer[error]
	// mtp holds, per DCP rank and slot, the token a draft step's row at that
	// position saw as the next one (−2 = never written); wrongDrafts makes
	// the drafter predict something the target never does.
	mtp         [][]int32
	wrongDrafts bool
	drafts      int // draft steps run
}

func newFakeExec(opt model.RunnerOptions, layout kvcache.Layout, vocab int) *fakeExec {
	f := &fakeExec{opt: opt, layout: layout, vocab: vocab, plans: map[[2]int]bool{}, gate: make(chan struct{})}
	for range layout.N {
		c := make([]int32, opt.NumBlocks*opt.BlockSize)
		for i := range c {
			c[i] = -2
		}
		f.cache = append(f.cache, c)
		f.mtp = append(f.mtp, slices.Clone(c))
	}
	f.logits = make([]float32, opt.MaxLogitRows*vocab)
	f.rows = make([]int32, opt.MaxLogitRows)
	f.seq = make([]int32, opt.MaxModelLen+1) // a draft row at the last position predicts one past it
	f.bufs = []model.Buffer{
		{Name: "fake rows", Bytes: int64(opt.MaxTokens) * 4},
		{Name: "fake logits", Bytes: int64(opt.MaxLogitRows*vocab) * 4},
	}
	return f
}

// fakeFactory returns a factory of fake executors and the list of those it
// made (the profile executor first, the serving one last).
func fakeFactory(layout kvcache.Layout, vocab int) (ExecutorFactory, *[]*fakeExec) {
	made := new([]*fakeExec)
	return func(opt model.RunnerOptions) (Executor, error) {
		f := newFakeExec(opt, layout, vocab)
		*made = append(*made, f)
		return f, nil
	}, made
}

// fakeNext is the token the fake model predicts after seq.
func fakeNext(seq []int32, vocab int) int32 {
	return int32(chainHash(uint64(len(seq)), seq) % uint64(vocab))
}

func (f *fakeExec) Forward(b *model.Batch) error {
	if f.hold.Load() {
		<-f.gate
	}
	if err := f.failWith.Load(); err != nil {
		return *err
	}
	T := 0
	for _, s := range b.Seqs {
		T += len(s.Tokens)
	}
	if T > f.opt.MaxTokens || len(b.Seqs) > f.opt.MaxSeqs {
		return fmt.Errorf("fake: step of %d tokens, %d seqs exceeds %d, %d", T, len(b.Seqs), f.opt.MaxTokens, f.opt.MaxSeqs)
	}
	if T == 0 {
		f.nrows = 0
		return nil
	}
	decodeOnly := 1
	for _, s := range b.Seqs {
		if len(s.Tokens) != 1 || s.Start == 0 {
			decodeOnly = 0
		}
	}
	key := [2]int{nextPow2(T), decodeOnly}
	if !f.plans[key] {
		f.plans[key] = true
		f.built++
	}
	B := f.opt.BlockSize
	// Write every step's tokens before any read, like the model.
	for si, s := range b.Seqs {
		end := s.Start + len(s.Tokens)
		if end > f.opt.MaxModelLen {
			return fmt.Errorf("fake: seq %d reaches %d > max model len %d", si, end, f.opt.MaxModelLen)
		}
		for j, t := range s.Tokens {
			p := s.Start + j
			r := f.layout.Owner(p)
			slot := f.layout.Slot(s.BlockTable, B, p, r)
			if slot < 0 {
				return fmt.Errorf("fake: seq %d position %d has no slot", si, p)
			}
			f.cache[r][slot] = t
		}
	}
	f.nrows = 0
	row0 := 0
	for _, s := range b.Seqs {
		end := s.Start + len(s.Tokens)
		seq := f.seq[:end]
		for p := range end {
			r := f.layout.Owner(p)
			seq[p] = f.cache[r][f.layout.Slot(s.BlockTable, B, p, r)]
		}
		for j := range s.Tokens {
			if !s.LogitsAll && j < len(s.Tokens)-1 {
				continue
			}
			if err := f.logitRow(int32(row0+j), fakeNext(seq[:s.Start+j+1], f.vocab)); err != nil {
				return err
			}
		}
		row0 += len(s.Tokens)
	}
	return nil
}

// logitRow appends a logit row for batch row row with its maximum at tok.
func (f *fakeExec) logitRow(row, tok int32) error {
	if f.nrows == f.opt.MaxLogitRows {
		return fmt.Errorf("fake: more than %d logit rows", f.opt.MaxLogitRows)
	}
	lg := f.logits[f.nrows*f.vocab : (f.nrows+1)*f.vocab]
	clear(lg)
	lg[tok] = 1
	f.rows[f.nrows] = row
	f.nrows++
	return nil
}

// Draft is a perfect drafter (unless wrongDrafts): the row at position q
// with next token t records t as the token at q+1 and predicts what the
// target predicts after the tokens the draft rows have seen, so drafts of an
// accepted prefix are the target's own greedy tokens.
func (f *fakeExec) Draft(k int, b *model.Batch, from model.HiddenBank) error {
	if !f.opt.MTP {
		return fmt.Errorf("fake: drafting needs RunnerOptions.MTP")
	}
	f.drafts++
	B := f.opt.BlockSize
	f.nrows = 0
	row0 := 0
	for si, s := range b.Seqs {
		if len(s.Hidden) != len(s.Tokens) {
			return fmt.Errorf("fake: draft seq %d has %d tokens, %d hidden rows", si, len(s.Tokens), len(s.Hidden))
		}
		for j, t := range s.Tokens {
			p := s.Start + j
			r := f.layout.Owner(p)
			slot := f.layout.Slot(s.BlockTable, B, p, r)
			if slot < 0 {
				return fmt.Errorf("fake: draft seq %d position %d has no slot", si, p)
			}
			f.mtp[r][slot] = t
		}
		last := s.Start + len(s.Tokens) - 1
		seq := f.seq[:last+2]
		seq[0] = f.cache[f.layout.Owner(0)][f.layout.Slot(s.BlockTable, B, 0, f.layout.Owner(0))]
		for q := 0; q <= last; q++ {
			r := f.layout.Owner(q)
			seq[q+1] = f.mtp[r][f.layout.Slot(s.BlockTable, B, q, r)]
		}
		tok := fakeNext(seq, f.vocab)
		if f.wrongDrafts {
			tok = (tok + 1) % int32(f.vocab)
		}
		if err := f.logitRow(int32(row0+len(s.Tokens)-1), tok); err != nil {
			return err
		}
		row0 += len(s.Tokens)
	}
	return nil
}

func (f *fakeExec) NumLogitRows() int { return f.nrows }
func (f *fakeExec) Logits(i int) (int, []float32) {
	return int(f.rows[i]), f.logits[i*f.vocab : (i+1)*f.vocab]
}
func (f *fakeExec) Buffers() []model.Buffer { return f.bufs }
func (f *fakeExec) KernelPlansBuilt() int64 { return f.built }

func nextPow2(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}
