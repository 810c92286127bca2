package mla_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
)

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64()/10 + (rng.Float64()-0.5)/10)
	}
	return v
}

var (
	nan    = float32(math.NaN())
	posInf = float32(math.Inf(1))
	negInf = float32(math.Inf(-1))
)

// TestCombineShardsEqualsUnsharded splits the keys of a sparse attention over
// n = 1..5 DCP ranks with the engine's ownership function, attends each shard
// on its own, and checks that the LSE combine reproduces the unsharded result.
// Short key sets leave some ranks empty; their outputs are poisoned with NaN.
func TestCombineShardsEqualsUnsharded(t *testing.T) {
	const heads = 4
	for _, nkv := range []int{3, 40} {
		for n := 1; n <= 5; n++ {
			l := kvcache.Layout{N: n, I: 2}
			rng := rand.New(rand.NewPCG(uint64(nkv), uint64(n)))
			kv := mla.DenseKV(randVec(rng, nkv*mla.RowDim))
			rows := 3
			q := randVec(rng, rows*heads*mla.RowDim)
			indices := make([]int32, rows*nkv)
			for r := range rows {
				for j, p := range rng.Perm(nkv) {
					indices[r*nkv+j] = int32(p)
				}
			}
			indices[1*nkv+0] = -1 // a hole in the selection itself
			ws := mla.NewWorkspace(nkv, heads)
			want := make([]float32, rows*heads*mla.LatentDim)
			wantLSE := make([]float32, rows*heads)
			mla.SparseAttention(want, wantLSE, nil, q, rows, heads, kv, indices, nkv, nil, 0.0625, ws)

			part := make([]float32, n*rows*heads*mla.LatentDim)
			partLSE := make([]float32, n*rows*heads)
			local := make([]int32, len(indices))
			empty := 0
			for rank := range n {
				for i, p := range indices {
					local[i] = -1
					if p >= 0 && l.Owner(int(p)) == rank {
						local[i] = p
					}
				}
				o := part[rank*rows*heads*mla.LatentDim : (rank+1)*rows*heads*mla.LatentDim]
				ls := partLSE[rank*rows*heads : (rank+1)*rows*heads]
				mla.SparseAttention(o, ls, nil, q, rows, heads, kv, local, nkv, nil, 0.0625, ws)
				if l.LocalLen(nkv, rank) == 0 {
					empty++
					for i := range o {
						o[i] = nan // garbage an empty rank might hold
					}
				}
			}
			if nkv == 3 && n >= 3 && empty == 0 {
				t.Fatalf("N=%d over %d keys left no rank empty; the test lost its empty-shard case", n, nkv)
			}
			got := make([]float32, len(want))
			gotLSE := make([]float32, len(wantLSE))
			mla.CombineLSE(got, gotLSE, part, partLSE, n, rows, heads, mla.LatentDim)
			opt := cmpopts.EquateApprox(1e-5, 1e-6)
			if d := cmp.Diff(want, got, opt); d != "" {
				t.Errorf("keys %d N=%d: combined out differs from unsharded (-want +got):\n%s", nkv, n, d)
			}
			if d := cmp.Diff(wantLSE, gotLSE, opt); d != "" {
				t.Errorf("keys %d N=%d: combined lse differs from unsharded (-want +got):\n%s", nkv, n, d)
			}
		}
	}
}

// refCombine is the float64 weighted combine of the vLLM CPU reference:
// NaN/±Inf → −Inf, weights exp(lse − max)/Σ, zero weights contribute nothing.
func refCombine(out, lse []float32, n, rowsN, d int) ([]float32, []float32) {
	dst := make([]float32, rowsN*d)
	dstLSE := make([]float32, rowsN)
	for k := range rowsN {
		ls := make([]float64, n)
		m := math.Inf(-1)
		for r := range n {
			ls[r] = float64(lse[r*rowsN+k])
			if math.IsNaN(ls[r]) || math.IsInf(ls[r], 0) {
				ls[r] = math.Inf(-1)
			}
			m = max(m, ls[r])
		}
		if math.IsInf(m, -1) {
			dstLSE[k] = negInf
			continue
		}
		var sum float64
		for _, l := range ls {
			sum += math.Exp(l - m)
		}
		dstLSE[k] = float32(m + math.Log(sum))
		for r := range n {
			w := math.Exp(ls[r]-m) / sum
			if w == 0 {
				continue
			}
			for i := range d {
				dst[k*d+i] += float32(w * float64(out[(r*rowsN+k)*d+i]))
			}
		}
	}
	return dst, dstLSE
}

func TestCombineLSE(t *testing.T) {
	x := []float32{1, -2, 3, 0.5}
	y := []float32{-4, 8, 0, 2}
	nanOut := []float32{nan, nan, nan, nan}
	ln3 := float32(math.Log(3))
	tests := []struct {
		name    string
		lse     []float32 // [n] for one (t, h) row
		out     [][]float32
		want    []float32
		wantLSE float32
	}{
		// vllm_cp_internals §12: a rank LSE of NaN, +Inf or −Inf with the other
		// rank at 0 gives the other rank's output and LSE 0.
		{"nan partial", []float32{nan, 0}, [][]float32{nanOut, y}, y, 0},
		{"+inf partial", []float32{posInf, 0}, [][]float32{nanOut, y}, y, 0},
		{"-inf partial", []float32{negInf, 0}, [][]float32{nanOut, y}, y, 0},
		{"all empty", []float32{negInf, nan, posInf}, [][]float32{nanOut, nanOut, nanOut}, []float32{0, 0, 0, 0}, negInf},
		// e^0 : e^{ln 3} = 1 : 3.
		{"one to three", []float32{0, ln3}, [][]float32{x, y},
			[]float32{0.25*x[0] + 0.75*y[0], 0.25*x[1] + 0.75*y[1], 0.25*x[2] + 0.75*y[2], 0.25*x[3] + 0.75*y[3]},
			float32(math.Log(4))},
		// Large LSEs must not overflow: two equal halves.
		{"large lse", []float32{1000, 1000}, [][]float32{x, x}, x, float32(1000 + math.Ln2)},
		{"single partial", []float32{-7.5}, [][]float32{x}, x, -7.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, d := len(tc.lse), len(tc.want)
			var out []float32
			for _, o := range tc.out {
				out = append(out, o...)
			}
			dst := []float32{nan, nan, nan, nan}
			dstLSE := []float32{nan}
			mla.CombineLSE(dst, dstLSE, out, tc.lse, n, 1, 1, d)
			opt := cmpopts.EquateApprox(1e-6, 1e-7)
			if diff := cmp.Diff(tc.want, dst, opt); diff != "" {
				t.Errorf("out (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]float32{tc.wantLSE}, dstLSE, opt); diff != "" {
				t.Errorf("lse (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCombineLSEReference compares against the float64 reference combine for
// non-power-of-two rank counts and the 576 / 512 head dims, with a share of
// empty (NaN / ±Inf) partials.
func TestCombineLSEReference(t *testing.T) {
	for _, tc := range []struct{ n, tok, h, d int }{{3, 3, 4, 64}, {6, 2, 3, 576}, {10, 1, 2, 512}} {
		rng := rand.New(rand.NewPCG(uint64(tc.n), uint64(tc.d)))
		rowsN := tc.tok * tc.h
		out := randVec(rng, tc.n*rowsN*tc.d)
		lse := make([]float32, tc.n*rowsN)
		for i := range lse {
			switch rng.IntN(8) {
			case 0:
				lse[i] = nan
			case 1:
				lse[i] = posInf
			case 2:
				lse[i] = negInf
			default:
				lse[i] = float32(rng.NormFloat64() * 5)
			}
			if math.IsNaN(float64(lse[i])) || math.IsInf(float64(lse[i]), 0) {
				r, k := i/rowsN, i%rowsN
				for j := range tc.d {
					out[(r*rowsN+k)*tc.d+j] = nan
				}
			}
		}
		want, wantLSE := refCombine(out, lse, tc.n, rowsN, tc.d)
		got := make([]float32, rowsN*tc.d)
		gotLSE := make([]float32, rowsN)
		mla.CombineLSE(got, gotLSE, out, lse, tc.n, tc.tok, tc.h, tc.d)
		opt := cmp.Options{cmpopts.EquateApprox(1e-5, 1e-7)}
		if d := cmp.Diff(want, got, opt); d != "" {
			t.Errorf("%+v out (-want +got):\n%s", tc, d)
		}
		if d := cmp.Diff(wantLSE, gotLSE, opt); d != "" {
			t.Errorf("%+v lse (-want +got):\n%s", tc, d)
		}
	}
}

// FuzzCombineLSE: for any partial LSEs (finite, ±Inf, NaN) the combine never
// produces NaN, ignores empty partials whose outputs are NaN, gives an LSE at
// least the largest partial one, and keeps every output inside the range of
// the non-empty partial outputs (the weights are a convex combination).
func FuzzCombineLSE(f *testing.F) {
	f.Add(float32(0), float32(0), float32(0), uint64(1))
	f.Add(nan, posInf, negInf, uint64(2))
	f.Add(float32(1e30), float32(-1e30), float32(3), uint64(3))
	f.Add(float32(88), float32(89), nan, uint64(4))
	f.Fuzz(func(t *testing.T, l0, l1, l2 float32, seed uint64) {
		const n, d = 3, 4
		lse := []float32{l0, l1, l2}
		rng := rand.New(rand.NewPCG(seed, 0))
		out := make([]float32, n*d)
		lo, hi := make([]float32, d), make([]float32, d)
		for i := range d {
			lo[i], hi[i] = posInf, negInf
		}
		maxLSE, empty := negInf, true
		for r, l := range lse {
			isEmpty := l != l || math.IsInf(float64(l), 0)
			for i := range d {
				if isEmpty {
					out[r*d+i] = nan
					continue
				}
				v := float32(rng.NormFloat64())
				out[r*d+i] = v
				lo[i], hi[i] = min(lo[i], v), max(hi[i], v)
			}
			if !isEmpty {
				maxLSE, empty = max(maxLSE, l), false
			}
		}
		dst := make([]float32, d)
		dstLSE := make([]float32, 1)
		mla.CombineLSE(dst, dstLSE, out, lse, n, 1, 1, d)
		if empty {
			if dstLSE[0] != negInf || !cmp.Equal(dst, make([]float32, d)) {
				t.Fatalf("lse %v: all empty gave %v, %v", lse, dst, dstLSE)
			}
			return
		}
		if dstLSE[0] != dstLSE[0] || dstLSE[0] < maxLSE {
			t.Fatalf("lse %v: combined lse %v below the largest partial %v", lse, dstLSE[0], maxLSE)
		}
		for i, v := range dst {
			slack := 1e-5 * max(1, float32(math.Abs(float64(lo[i]))), float32(math.Abs(float64(hi[i]))))
			if v != v || v < lo[i]-slack || v > hi[i]+slack {
				t.Fatalf("lse %v: out[%d] = %v outside [%v, %v]", lse, i, v, lo[i], hi[i])
			}
		}
	})
}
