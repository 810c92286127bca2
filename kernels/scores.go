package kernels

import (
	"fmt"
)

// WeightedReLUScores computes the lightning-indexer score of each key against
// one query of heads heads:
//
//	dim    = len(q) / heads; q is [heads, dim], w is [heads]
//	dst[j] = Σ_h w[h] · max(0, q[h]·keys[j][:dim])   for j < len(keys)
//
// Heads are summed in ascending order. The reference uses Dot and skips
// non-positive (and NaN) dot products; the AVX-512 implementation (heads a
// multiple of 4, dim a multiple of 16) computes four keys × four heads per
// tile and fuses each head's term into the running score; the AVX2 one
// (dim a multiple of 8) uses 3-head × 4-key dot tiles and adds the terms as
// the reference does. A key's score
// depends only on the query and that key, never on the other keys of the
// call, so keys are split across threads (SetThreads) without changing a
// bit. It does not allocate.
func WeightedReLUScores(dst, q, w []float32, heads int, keys [][]float32) {
	if heads <= 0 || len(q)%heads != 0 || len(w) != heads || len(dst) != len(keys) {
		panic(fmt.Sprintf("kernels: WeightedReLUScores: heads=%d needs len(q) a multiple of heads, len(w)=heads and len(dst)=len(keys); got len(q)=%d, len(w)=%d, len(dst)=%d, %d keys",
			heads, len(q), len(w), len(dst), len(keys)))
	}
	dim := len(q) / heads
	for j, k := range keys {
		if len(k) < dim {
			panic(fmt.Sprintf("kernels: WeightedReLUScores: key %d has %d values, needs %d", j, len(k), dim))
		}
	}
	if l := activeLevel(); (l == levelAVX512 && heads%4 == 0 && dim%16 == 0 && dim > 0) || (l == levelAVX2 && dim%8 == 0 && dim > 0) {
		n := len(keys)
		parts := planParts((n+3)/4, 2*float64(n)*float64(heads*dim))
		if parts == 1 {
			scoreKeys(dst, q, w, heads, dim, keys)
			return
		}
		var t *scoreTask
		select {
		case t = <-scoreTasks:
		default:
			t = new(scoreTask)
		}
		t.dst, t.q, t.w, t.heads, t.dim, t.keys = dst, q, w, heads, dim, keys
		runParts(t, parts, &t.join)
		t.dst, t.q, t.w, t.keys = nil, nil, nil, nil
		select {
		case scoreTasks <- t:
		default:
		}
		return
	}
	for j, key := range keys {
		var s float32
		for h := range heads {
			if d := Dot(q[h*dim:(h+1)*dim], key[:dim]); d > 0 {
				s += w[h] * d
			}
		}
		dst[j] = s
	}
}

// scoreTask is one parallel WeightedReLUScores call; parts split the keys
// (each key's score depends only on the query and that key).
type scoreTask struct {
	dst, q, w  []float32
	heads, dim int
	keys       [][]float32
	join       joiner
}

var scoreTasks = make(chan *scoreTask, 64)

func (t *scoreTask) runPart(p, parts int) {
	j0, j1 := partRange(len(t.keys), 4, p, parts)
	scoreKeys(t.dst[j0:j1], t.q, t.w, t.heads, t.dim, t.keys[j0:j1])
}

// scoreKeys is the assembly WeightedReLUScores over keys, four per tile,
// prefetching the next four (keys live in scattered cache slots).
func scoreKeys(dst, q, w []float32, heads, dim int, keys [][]float32) {
	if activeLevel() == levelAVX2 {
		scoreKeysAVX2(dst, q, w, heads, dim, keys)
		return
	}
	var out [4]float32
	n := len(keys)
	for j := 0; j < n; j += 4 {
		nj := min(4, n-j)
		if next := j + 4; next < n {
			nn := min(4, n-next)
			p := func(c int) *float32 { return &keys[next+min(c, nn-1)][0] }
			prefetchRows(p(0), p(1), p(2), p(3), 4*dim)
		}
		k := func(c int) *float32 { return &keys[j+min(c, nj-1)][0] }
		scoreTile4(&q[0], &w[0], heads, dim, k(0), k(1), k(2), k(3), &out)
		copy(dst[j:j+nj], out[:nj])
	}
}

// scoreKeysAVX2 scores four keys at a time with the AVX2 3×4 dot tiles;
// each key's heads are added in ascending order as in the reference
// (non-positive and NaN dot products skipped, products rounded).
func scoreKeysAVX2(dst, q, w []float32, heads, dim int, keys [][]float32) {
	var tile [24]float32
	n := len(keys)
	for j := 0; j < n; j += 4 {
		nj := min(4, n-j)
		if next := j + 4; next < n {
			nn := min(4, n-next)
			p := func(c int) *float32 { return &keys[next+min(c, nn-1)][0] }
			prefetchRows(p(0), p(1), p(2), p(3), 4*dim)
		}
		k := func(c int) *float32 { return &keys[j+min(c, nj-1)][0] }
		k0, k1, k2, k3 := k(0), k(1), k(2), k(3)
		var acc [4]float32
		for h := 0; h < heads; h += 3 {
			m := min(3, heads-h)
			dotTileF32(levelAVX2, m, &q[h*dim], dim, k0, k1, k2, k3, dim, &tile)
			for i := range m {
				for c := range nj {
					if d := tile[i*4+c]; d > 0 {
						acc[c] += w[h+i] * d
					}
				}
			}
		}
		copy(dst[j:j+nj], acc[:nj])
	}
}
