package cp_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/plan"
)

const (
	testSeq   = 24 // keys of the request
	testBlock = 4  // KV block size
	testTopK  = 8
	testScale = 0.0721 // ≈ 192^-0.5, the scale of a 128+64 query
)

// shardCase is one request whose keys are split over the ranks of a DCP
// group, with the single-rank attention over all keys as the reference.
type shardCase struct {
	n, heads, rows int
	layout         kvcache.Layout
	q              []float32 // [rows, n·heads, RowDim]
	positions      []int32   // [rows, topk] global positions, −1 = none
	all            mla.KVSource
	rowsKV         []float32 // [testSeq, RowDim]
	blockTable     []int32
	wantOut        []float32 // [rows, n·heads, LatentDim]
	wantLSE        []float32 // [rows, n·heads]
}

func newShardCase(t *testing.T, seed uint64, n, interleave, heads int) *shardCase {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(n*100+interleave)))
	l := kvcache.Layout{N: n, I: interleave}
	if err := l.Validate(testBlock); err != nil {
		t.Fatal(err)
	}
	sc := &shardCase{n: n, heads: heads, layout: l}
	nh := n * heads
	// Row kinds: random top-k subsets; only position 0 (every other rank is
	// empty); no key at all; keys only in the first interleave run (one
	// owner); a full causal prefix of 3 keys.
	rowsPos := [][]int32{}
	for range 3 {
		perm := rng.Perm(testSeq)[:testTopK]
		row := make([]int32, testTopK)
		for i, p := range perm {
			row[i] = int32(p)
		}
		rowsPos = append(rowsPos, row)
	}
	rowsPos = append(rowsPos, []int32{0}, nil)
	var firstRun []int32
	for p := range interleave {
		firstRun = append(firstRun, int32(p))
	}
	rowsPos = append(rowsPos, firstRun, []int32{2, 0, 1})
	sc.rows = len(rowsPos)
	sc.positions = make([]int32, sc.rows*testTopK)
	for i := range sc.positions {
		sc.positions[i] = -1
	}
	for i, row := range rowsPos {
		copy(sc.positions[i*testTopK:], row)
	}
	sc.rowsKV = randVec(rng, testSeq*mla.RowDim)
	sc.all = mla.DenseKV(sc.rowsKV)
	sc.q = randVec(rng, sc.rows*nh*mla.RowDim)
	sc.blockTable = make([]int32, (testSeq+testBlock-1)/testBlock)
	for i := range sc.blockTable {
		sc.blockTable[i] = int32(i)
	}
	sc.wantOut = make([]float32, sc.rows*nh*mla.LatentDim)
	sc.wantLSE = make([]float32, sc.rows*nh)
	mla.SparseAttention(sc.wantOut, sc.wantLSE, nil, sc.q, sc.rows, nh, sc.all, sc.positions, testTopK, nil, testScale, nil)
	return sc
}

// partial computes rank's partial attention over its own keys: its local
// cache holds the positions it owns at their kvcache slots, the top-k
// positions are localized through cp.LocalizeRows, and empty rows are
// neutralized.
func (sc *shardCase) partial(t *testing.T, rank int, compact bool) (out, lse []float32) {
	t.Helper()
	local := make([]float32, len(sc.blockTable)*testBlock*mla.RowDim)
	for p := range testSeq {
		if s := sc.layout.Slot(sc.blockTable, testBlock, p, rank); s >= 0 {
			copy(local[int(s)*mla.RowDim:], sc.rowsKV[p*mla.RowDim:(p+1)*mla.RowDim])
		}
	}
	slots := make([]int32, len(sc.positions))
	valid := make([]int32, sc.rows)
	rowReq := make([]int32, sc.rows)
	if err := cp.LocalizeRows(sc.layout, rank, slots, valid, sc.positions, sc.rows, testTopK, [][]int32{sc.blockTable}, rowReq, testBlock, compact); err != nil {
		t.Fatal(err)
	}
	nh := sc.n * sc.heads
	out = make([]float32, sc.rows*nh*mla.LatentDim)
	lse = make([]float32, sc.rows*nh)
	var topkLen []int32
	if compact {
		topkLen = valid
	}
	mla.SparseAttention(out, lse, nil, sc.q, sc.rows, nh, mla.DenseKV(local), slots, testTopK, topkLen, testScale, nil)
	cp.NeutralizeEmptyRows(out, lse, valid, sc.rows, nh, mla.LatentDim)
	return out, lse
}

// ownHeads extracts heads [r·H, (r+1)·H) of a [rows, N·H, d] buffer.
func ownHeads(all []float32, rows, n, h, d, r int) []float32 {
	dst := make([]float32, 0, rows*h*d)
	for t := range rows {
		dst = append(dst, all[(t*n*h+r*h)*d:(t*n*h+(r+1)*h)*d]...)
	}
	return dst
}

var approx = cmpopts.EquateApprox(1e-5, 1e-5)

func TestCombineEqualsSingleRank(t *testing.T) {
	const heads = 2
	for _, n := range []int{1, 2, 3, 4} {
		for _, interleave := range []int{1, 2, 4} {
			sc := newShardCase(t, 7, n, interleave, heads)
			outs := make([][]float32, n)
			lses := make([][]float32, n)
			for r := range n {
				outs[r], lses[r] = sc.partial(t, r, r%2 == 0)
			}
			backends := []string{plan.CommAGRS}
			if n > 1 {
				backends = append(backends, plan.CommA2A)
			}
			got := map[string][][]float32{}
			for _, backend := range backends {
				t.Run(fmt.Sprintf("N=%d/I=%d/%s", n, interleave, backend), func(t *testing.T) {
					world := newWorld(t, n)
					res := make([][]float32, n)
					runRanks(t, world, func(ctx context.Context, g comm.Group) error {
						c, err := cp.NewCombiner(backend, n, sc.rows, heads, mla.LatentDim)
						if err != nil {
							return err
						}
						r := g.Rank()
						dst := make([]float32, sc.rows*heads*mla.LatentDim)
						dstLSE := make([]float32, sc.rows*heads)
						if err := c.Combine(ctx, g, dst, dstLSE, outs[r], lses[r], sc.rows); err != nil {
							return err
						}
						res[r] = append(dst, dstLSE...)
						return nil
					})
					for r := range n {
						want := append(ownHeads(sc.wantOut, sc.rows, n, heads, mla.LatentDim, r), ownHeads(sc.wantLSE, sc.rows, n, heads, 1, r)...)
						if diff := cmp.Diff(want, res[r], approx); diff != "" {
							t.Errorf("rank %d differs from the single-rank attention (-want +got):\n%s", r, diff)
						}
						for i, v := range res[r] {
							if math.IsNaN(float64(v)) {
								t.Fatalf("rank %d: NaN at %d", r, i)
							}
						}
					}
					got[backend] = res
				})
			}
			if a, b := got[plan.CommAGRS], got[plan.CommA2A]; a != nil && b != nil {
				for r := range n {
					// The LSEs are computed by the same float64 arithmetic in
					// both backends; the outputs differ only by float32
					// rounding of the rescale-then-sum order.
					differ := 0
					for i := range a[r] {
						if math.Float32bits(a[r][i]) != math.Float32bits(b[r][i]) {
							differ++
						}
					}
					t.Logf("N=%d I=%d rank %d: %d of %d values differ in bits between ag_rs and a2a", n, interleave, r, differ, len(a[r]))
					// The global LSEs come from the same float64 formula in
					// both backends, so they are bit-identical.
					lseA, lseB := a[r][sc.rows*heads*mla.LatentDim:], b[r][sc.rows*heads*mla.LatentDim:]
					if diff := cmp.Diff(lseA, lseB); diff != "" {
						t.Errorf("N=%d I=%d rank %d: global LSEs differ in bits (-ag_rs +a2a):\n%s", n, interleave, r, diff)
					}
					if diff := cmp.Diff(a[r], b[r], cmpopts.EquateApprox(1e-6, 1e-6)); diff != "" {
						t.Errorf("N=%d I=%d rank %d: ag_rs and a2a differ (-ag_rs +a2a):\n%s", n, interleave, r, diff)
					}
				}
			}
		}
	}
}

func TestCombineAllEqualsSingleRank(t *testing.T) {
	const heads = 2
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			sc := newShardCase(t, 11, n, 2, heads)
			world := newWorld(t, n)
			res := make([][]float32, n)
			runRanks(t, world, func(ctx context.Context, g comm.Group) error {
				r := g.Rank()
				c, err := cp.NewCombiner(plan.CommAGRS, n, sc.rows, heads, mla.LatentDim)
				if err != nil {
					return err
				}
				out, lse := sc.partial(t, r, false)
				dst := make([]float32, sc.rows*n*heads*mla.LatentDim)
				dstLSE := make([]float32, sc.rows*n*heads)
				if err := c.CombineAll(ctx, g, dst, dstLSE, out, lse, sc.rows); err != nil {
					return err
				}
				res[r] = append(dst, dstLSE...)
				return nil
			})
			want := append(append([]float32{}, sc.wantOut...), sc.wantLSE...)
			for r := range n {
				if diff := cmp.Diff(want, res[r], approx); diff != "" {
					t.Errorf("rank %d (-want +got):\n%s", r, diff)
				}
				if diff := cmp.Diff(res[0], res[r]); diff != "" {
					t.Errorf("rank %d differs from rank 0 (the all-reduce sums in rank order, so every rank has the same bits):\n%s", r, diff)
				}
			}
		})
	}
}

// TestCombineEmptyPartials pins that NaN and +Inf LSEs are empty, that an
// empty partial's garbage output never reaches the result, and that a row no
// rank has keys for gives 0 and −Inf.
func TestCombineEmptyPartials(t *testing.T) {
	const n, heads, d, rows = 2, 1, 3, 3
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	// Row 0: rank 0 has (out 1,2,3; lse 0), rank 1 is empty (NaN lse, NaN out).
	// Row 1: both empty (+Inf and NaN). Row 2: equal LSEs ln 2 → weights ½.
	lses := [][]float32{
		{0, 0, inf, inf, float32(math.Ln2), float32(math.Ln2)},
		{nan, nan, nan, nan, float32(math.Ln2), float32(math.Ln2)},
	}
	outs := [][]float32{
		{1, 2, 3, 1, 2, 3, nan, nan, nan, nan, nan, nan, 2, 4, 6, 2, 4, 6},
		{nan, nan, nan, nan, nan, nan, 5, 5, 5, 5, 5, 5, 4, 0, 2, 4, 0, 2},
	}
	negInf := float32(math.Inf(-1))
	ln4 := float32(math.Ln2 + math.Ln2)
	// Rank r keeps head r: row 0 = rank 0's partial, row 1 = empty, row 2 =
	// the mean of the two partials with LSE ln 4.
	want := [][]float32{
		{1, 2, 3, 0, 0, 0, 3, 2, 4, 0, negInf, ln4},
		{1, 2, 3, 0, 0, 0, 3, 2, 4, 0, negInf, ln4},
	}
	for _, backend := range []string{plan.CommAGRS, plan.CommA2A} {
		t.Run(backend, func(t *testing.T) {
			world := newWorld(t, n)
			got := make([][]float32, n)
			runRanks(t, world, func(ctx context.Context, g comm.Group) error {
				c, err := cp.NewCombiner(backend, n, rows, heads, d)
				if err != nil {
					return err
				}
				dst := make([]float32, rows*heads*d)
				dstLSE := make([]float32, rows*heads)
				if err := c.Combine(ctx, g, dst, dstLSE, outs[g.Rank()], lses[g.Rank()], rows); err != nil {
					return err
				}
				got[g.Rank()] = append(dst, dstLSE...)
				return nil
			})
			if diff := cmp.Diff(want, got, cmpopts.EquateApprox(1e-6, 0)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCombinerRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend string
		n       int
	}{
		{"a2a needs two ranks", plan.CommA2A, 1},
		{"unknown backend", "ring", 2},
		{"zero ranks", plan.CommAGRS, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := cp.NewCombiner(tc.backend, tc.n, 4, 2, 8); err == nil {
				t.Errorf("NewCombiner(%q, %d) succeeded", tc.backend, tc.n)
			} else {
				t.Log(err)
			}
		})
	}
}

func TestCombineNoAllocsAndSameCollectives(t *testing.T) {
	const n, rows, heads, d = 4, 3, 2, 16
	for _, backend := range []string{plan.CommAGRS, plan.CommA2A, "all"} {
		t.Run(backend, func(t *testing.T) {
			world := newWorld(t, n)
			rng := rand.New(rand.NewPCG(1, 2))
			type bufs struct {
				c                     *cp.Combiner
				out, lse, dst, dstLSE []float32
			}
			b := make([]bufs, n)
			for r := range n {
				kind := backend
				outHeads := heads
				if backend == "all" {
					kind, outHeads = plan.CommAGRS, n*heads
				}
				c, err := cp.NewCombiner(kind, n, rows, heads, d)
				if err != nil {
					t.Fatal(err)
				}
				b[r] = bufs{c, randVec(rng, rows*n*heads*d), randVec(rng, rows*n*heads), make([]float32, rows*outHeads*d), make([]float32, rows*outHeads)}
			}
			step := func(ctx context.Context, g comm.Group) error {
				x := b[g.Rank()]
				if backend == "all" {
					return x.c.CombineAll(ctx, g, x.dst, x.dstLSE, x.out, x.lse, rows)
				}
				return x.c.Combine(ctx, g, x.dst, x.dstLSE, x.out, x.lse, rows)
			}
			if allocs := allocsOnRank0(t, world, 20, step); allocs != 0 {
				t.Errorf("%v allocations per combine, want 0", allocs)
			}
			tr := traces(world)
			for r := 1; r < n; r++ {
				if diff := cmp.Diff(tr[0], tr[r]); diff != "" {
					t.Errorf("rank %d issued other collectives than rank 0:\n%s", r, diff)
				}
			}
			nh := n * heads
			var want []comm.TraceEntry
			switch backend {
			case plan.CommAGRS:
				want = []comm.TraceEntry{{Op: comm.OpAllGather, DType: comm.F32, Count: rows * nh}, {Seq: 1, Op: comm.OpReduceScatter, DType: comm.F32, Count: rows * nh * d}}
			case plan.CommA2A:
				want = []comm.TraceEntry{{Op: comm.OpAllToAll, DType: comm.F32, Count: rows * nh * (d + 1)}}
			default:
				want = []comm.TraceEntry{{Op: comm.OpAllGather, DType: comm.F32, Count: rows * nh}, {Seq: 1, Op: comm.OpAllReduce, DType: comm.F32, Count: rows * nh * d}}
			}
			if diff := cmp.Diff(want, tr[0][:len(want)]); diff != "" {
				t.Errorf("first step's collectives (-want +got):\n%s", diff)
			}
		})
	}
}
