package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/numfmt"
)

// TestSplitProductsAreBitwiseTheWholeProduct: with the output rows split
// over 1–5 members (shares that divide them unevenly, cut through fp8 scale
// blocks, or are empty), every member ends with bitwise the whole product,
// for matrices of different output sizes in one set (as q_a, kv_a and the
// indexer's query projection share one), in f32, bf16 and fp8, and counts
// only its share's bytes as read. newVocabHead's set holds the main LM head
// and an MTP layer's own head.
func TestSplitProductsAreBitwiseTheWholeProduct(t *testing.T) {
	const D = 160
	rng := rand.New(rand.NewPCG(5, 6))
	randoms := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	storages := map[string]func(rows int) *kernels.Matrix{
		"f32": func(rows int) *kernels.Matrix { return &kernels.Matrix{Rows: rows, Cols: D, F32: randoms(rows * D)} },
		"bf16": func(rows int) *kernels.Matrix {
			b := make([]uint16, rows*D)
			numfmt.F32sToBF16(b, randoms(rows*D))
			return &kernels.Matrix{Rows: rows, Cols: D, BF16: b}
		},
		"fp8": func(rows int) *kernels.Matrix {
			m, err := kernels.QuantizeFP8(rows, D, randoms(rows*D))
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
	}
	for _, dtype := range []string{"f32", "bf16", "fp8"} {
		for _, tc := range []struct{ V, W, rows int }{
			{300, 1, 3}, {300, 2, 1}, {300, 3, 3}, {301, 4, 2}, {7, 4, 3}, {5, 4, 1}, {300, 5, 4},
		} {
			t.Run(fmt.Sprintf("%s/V%d/W%d/rows%d", dtype, tc.V, tc.W, tc.rows), func(t *testing.T) {
				main, own, small := storages[dtype](tc.V), storages[dtype](tc.V), storages[dtype](37)
				m := &Model{Cfg: &config.Model{VocabSize: tc.V}, LMHead: main,
					MTP: []MTPLayer{{Head: main}, {Head: own}}}
				x := randoms(tc.rows * D)
				want := map[*kernels.Matrix][]float32{}
				for _, w := range []*kernels.Matrix{main, own, small} {
					want[w] = make([]float32, tc.rows*w.Rows)
					kernels.MatMulT(want[w], x, tc.rows, w)
				}
				world, err := inproc.NewWorld(tc.W, inproc.Options{})
				if err != nil {
					t.Fatal(err)
				}
				errs := inproc.Run(context.Background(), world, func(ctx context.Context, g comm.Group) error {
					var par *Parallel
					if tc.W > 1 {
						par = &Parallel{Groups: comm.Groups{World: g}}
					}
					var bufs bufferList
					heads := newVocabHead(m, RunnerOptions{MaxLogitRows: 4}, par, &bufs)
					set := newSplitProducts(g, 4, []*kernels.Matrix{small, main, small}, "test", &bufs)
					for _, c := range []struct {
						p    *splitProducts
						head *kernels.Matrix
					}{{heads, main}, {heads, own}, {set, main}, {set, small}} {
						head := c.head
						got := make([]float32, tc.rows*head.Rows)
						var reads weightReads
						if err := c.p.mul(ctx, got, x, tc.rows, head, &reads); err != nil {
							return err
						}
						if d := cmp.Diff(want[head], got); d != "" {
							return fmt.Errorf("rank %d, [%d, %d]: outputs differ from the whole product (-whole +split):\n%s", g.Rank(), head.Rows, D, d)
						}
						per := (head.Rows + tc.W - 1) / tc.W
						n := max(0, min(per, head.Rows-g.Rank()*per))
						var wantBytes int64
						if n > 0 {
							wantBytes = matrixBytes(head.SliceRows(g.Rank()*per, n))
						}
						if got := reads.cost().WeightBytes; got != wantBytes {
							return fmt.Errorf("rank %d counted %d bytes read, its %d of %d rows are %d", g.Rank(), got, n, head.Rows, wantBytes)
						}
					}
					return nil
				})
				for _, err := range errs {
					if err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
}
