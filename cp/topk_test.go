package cp_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
)

// localScores gives rank its columns of the global score matrix [rows, seq]:
// local key j is global position layout.Global(j, rank).
func localScores(l kvcache.Layout, rank int, global []float32, rows, seq int) ([]float32, int) {
	width := l.LocalLen(seq, rank)
	s := make([]float32, rows*width)
	for i := range rows {
		for j := range width {
			s[i*width+j] = global[i*seq+l.Global(j, rank)]
		}
	}
	return s, width
}

// globalTopK runs the merge on every rank of an N-rank world and returns each
// rank's (indices, counts).
func globalTopK(t *testing.T, l kvcache.Layout, global []float32, rows, seq, k int) ([][]int32, [][]int32) {
	t.Helper()
	world := newWorld(t, l.N)
	idx := make([][]int32, l.N)
	cnt := make([][]int32, l.N)
	runRanks(t, world, func(ctx context.Context, g comm.Group) error {
		r := g.Rank()
		tk, err := cp.NewTopK(l, r, rows, k, seq)
		if err != nil {
			return err
		}
		s, width := localScores(l, r, global, rows, seq)
		idx[r] = make([]int32, rows*k)
		cnt[r] = make([]int32, rows)
		return tk.Select(ctx, g, idx[r], cnt[r], s, rows, width)
	})
	return idx, cnt
}

func TestTopKEqualsSingleRank(t *testing.T) {
	const rows, seq = 6, 37
	negInf := float32(math.Inf(-1))
	for _, tc := range []struct {
		name   string
		n, i   int
		k      int
		scores func(rng *rand.Rand) float32
	}{
		{"random N=4 I=1", 4, 1, 8, func(rng *rand.Rand) float32 { return rng.Float32() }},
		{"random N=4 I=2", 4, 2, 8, func(rng *rand.Rand) float32 { return rng.Float32() }},
		{"random N=3 I=4", 3, 4, 5, func(rng *rand.Rand) float32 { return rng.Float32() }},
		{"integer ties N=4 I=1", 4, 1, 8, func(rng *rand.Rand) float32 { return float32(rng.IntN(3)) }},
		{"integer ties N=4 I=4", 4, 4, 10, func(rng *rand.Rand) float32 { return float32(rng.IntN(2)) }},
		{"k above keys N=4 I=2", 4, 2, 48, func(rng *rand.Rand) float32 { return float32(rng.IntN(4)) }},
		{"single rank", 1, 1, 8, func(rng *rand.Rand) float32 { return rng.Float32() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(tc.n*10+tc.i)))
			l := kvcache.Layout{N: tc.n, I: tc.i}
			global := make([]float32, rows*seq)
			for i := range rows {
				end := []int{seq, 1, 0, 3, seq - 5, tc.i + 1}[i] // causal bounds, some shorter than one run
				for j := range seq {
					global[i*seq+j] = negInf
					if j < end {
						global[i*seq+j] = tc.scores(rng)
					}
				}
			}
			want := make([]int32, rows*tc.k)
			wantCnt := make([]int32, rows)
			mla.IndexerTopK(want, wantCnt, global, rows, seq, tc.k)
			idx, cnt := globalTopK(t, l, global, rows, seq, tc.k)
			for r := range tc.n {
				if diff := cmp.Diff(want, idx[r]); diff != "" {
					t.Errorf("rank %d indices differ from single-rank IndexerTopK (-want +got):\n%s", r, diff)
				}
				if diff := cmp.Diff(wantCnt, cnt[r]); diff != "" {
					t.Errorf("rank %d counts (-want +got):\n%s", r, diff)
				}
			}
		})
	}
}

// TestTopKUnionOfLocalListsIsNotGlobal is the negative control: when the
// best keys sit on one rank, merging per-rank top-(k/N) lists (each rank
// contributing its share) misses keys of the global top-k, which the exact
// merge keeps.
func TestTopKUnionOfLocalListsIsNotGlobal(t *testing.T) {
	const n, rows, seq, k = 4, 1, 32, 8
	l := kvcache.Layout{N: n, I: 1}
	global := make([]float32, rows*seq)
	for p := range seq {
		global[p] = float32(p % n) // rank 3 owns every best key
	}
	want := make([]int32, k)
	mla.IndexerTopK(want, make([]int32, 1), global, rows, seq, k)
	var union []int32
	for r := range n {
		s, width := localScores(l, r, global, rows, seq)
		loc := make([]int32, k/n)
		mla.IndexerTopK(loc, make([]int32, 1), s, rows, width, k/n)
		for _, j := range loc {
			union = append(union, int32(l.Global(int(j), r)))
		}
	}
	slices.Sort(union)
	wantSet := slices.Clone(want)
	slices.Sort(wantSet)
	if slices.Equal(union, wantSet) {
		t.Fatalf("the union of per-rank lists %v equals the global top-k %v; the control is broken", union, wantSet)
	}
	idx, _ := globalTopK(t, l, global, rows, seq, k)
	if diff := cmp.Diff(want, idx[0]); diff != "" {
		t.Errorf("exact merge (-want +got):\n%s", diff)
	}
}

func TestTopKRefusals(t *testing.T) {
	l := kvcache.Layout{N: 2, I: 1}
	if _, err := cp.NewTopK(l, 0, 4, 8, cp.MaxExactPosition+1); err == nil {
		t.Error("a max-model-len past 2^24 was accepted")
	} else {
		t.Log(err)
	}
	if _, err := cp.NewTopK(l, 0, 4, 8, cp.MaxExactPosition); err != nil {
		t.Errorf("max-model-len 2^24 refused: %v", err)
	}
	if _, err := cp.NewTopK(l, 2, 4, 8, 100); err == nil {
		t.Error("rank 2 of a 2-rank layout was accepted")
	}
}

func TestTopKNoAllocsAndSameCollectives(t *testing.T) {
	const n, rows, seq, k = 4, 5, 64, 8
	l := kvcache.Layout{N: n, I: 2}
	rng := rand.New(rand.NewPCG(5, 6))
	global := randVec(rng, rows*seq)
	world := newWorld(t, n)
	type bufs struct {
		tk         *cp.TopK
		s          []float32
		width      int
		idx, count []int32
	}
	b := make([]bufs, n)
	for r := range n {
		tk, err := cp.NewTopK(l, r, rows, k, seq)
		if err != nil {
			t.Fatal(err)
		}
		s, width := localScores(l, r, global, rows, seq)
		b[r] = bufs{tk, s, width, make([]int32, rows*k), make([]int32, rows)}
	}
	step := func(ctx context.Context, g comm.Group) error {
		x := b[g.Rank()]
		return x.tk.Select(ctx, g, x.idx, x.count, x.s, rows, x.width)
	}
	if allocs := allocsOnRank0(t, world, 20, step); allocs != 0 {
		t.Errorf("%v allocations per merge, want 0", allocs)
	}
	tr := traces(world)
	for r := range n {
		if diff := cmp.Diff(comm.TraceEntry{Op: comm.OpAllGather, DType: comm.F32, Count: rows * k * 2}, tr[r][0]); diff != "" {
			t.Errorf("rank %d first collective:\n%s", r, diff)
		}
		if diff := cmp.Diff(tr[0], tr[r]); diff != "" {
			t.Errorf("rank %d issued other collectives than rank 0:\n%s", r, diff)
		}
	}
}

func TestQueryGatherHeadOrder(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			const rows, heads, width = 3, 2, 5
			world := newWorld(t, n)
			got := make([][]float32, n)
			// Rank r's query value at (t, h, x) encodes the gathered head
			// r·H + h, so the expected layout follows from the definition.
			val := func(t, head, x int) float32 { return float32(t*1000 + head*10 + x) }
			runRanks(t, world, func(ctx context.Context, g comm.Group) error {
				r := g.Rank()
				qg, err := cp.NewQueryGather(n, rows, heads, width)
				if err != nil {
					return err
				}
				q := make([]float32, 0, rows*heads*width)
				for t := range rows {
					for h := range heads {
						for x := range width {
							q = append(q, val(t, r*heads+h, x))
						}
					}
				}
				got[r] = make([]float32, rows*n*heads*width)
				return qg.Gather(ctx, g, got[r], q, rows)
			})
			want := make([]float32, 0, rows*n*heads*width)
			for t := range rows {
				for head := range n * heads {
					for x := range width {
						want = append(want, val(t, head, x))
					}
				}
			}
			for r := range n {
				if diff := cmp.Diff(want, got[r]); diff != "" {
					t.Errorf("rank %d (-want +got):\n%s", r, diff)
				}
			}
		})
	}
}
