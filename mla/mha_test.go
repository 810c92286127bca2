package mla

import (
	"math"
	"math/rand/v2"
	"testing"
)

// matVec returns W x for W [rows, cols] row-major, in float64 rounded to float32.
func matVec(w []float32, rows, cols int, x []float32) []float32 {
	y := make([]float32, rows)
	for i := range rows {
		var s float64
		for k := range cols {
			s += float64(w[i*cols+k]) * float64(x[k])
		}
		y[i] = float32(s)
	}
	return y
}

// matTVec returns Wᵀ x for W [rows, cols] row-major.
func matTVec(w []float32, rows, cols int, x []float32) []float32 {
	y := make([]float64, cols)
	for i := range rows {
		for k := range cols {
			y[k] += float64(w[i*cols+k]) * float64(x[i])
		}
	}
	return toF32(y)
}

// TestMHAEqualsAbsorbed builds random W_UK / W_UV and checks that the causal
// MHA form over up-projected keys equals the absorbed sparse form over cache
// rows (q_nope absorbed through W_UK, output mapped through W_UV), with and
// without a top-k selection mask.
func TestMHAEqualsAbsorbed(t *testing.T) {
	tests := []struct {
		name              string
		t, s, h, dn, dv   int
		offset            int
		scale             float32
		selectProbability float64 // 1 = dense causal
	}{
		{"glm5 dims prefill", 6, 6, 2, 192, 256, 0, 0.0625, 1},
		{"v32 dims chunk at end", 4, 11, 3, 128, 128, 7, 0.1352337789, 1},
		{"topk mask", 5, 12, 2, 192, 256, 7, 0.0625, 0.5},
		{"decode row", 1, 9, 4, 128, 128, 8, 0.0625, 1},
	}
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(k)))
			wUK := make([][]float32, tc.h) // [dn, 512] per head
			wUV := make([][]float32, tc.h) // [dv, 512] per head
			for hd := range tc.h {
				wUK[hd] = randVec(rng, tc.dn*LatentDim)
				wUV[hd] = randVec(rng, tc.dv*LatentDim)
			}
			c := randVec(rng, tc.s*LatentDim)
			kPe := randVec(rng, tc.s*RopeDim)
			qNope := randVec(rng, tc.t*tc.h*tc.dn)
			qPe := randVec(rng, tc.t*tc.h*RopeDim)
			selected := make([][]bool, tc.t)
			for i := range selected {
				selected[i] = make([]bool, tc.s)
				for j := range tc.s {
					selected[i][j] = rng.Float64() < tc.selectProbability
				}
			}
			keep := func(i, j int) bool { return selected[i][j] }

			// MHA form: up-project every key.
			kNope := make([]float32, tc.s*tc.h*tc.dn)
			v := make([]float32, tc.s*tc.h*tc.dv)
			for j := range tc.s {
				for hd := range tc.h {
					copy(kNope[(j*tc.h+hd)*tc.dn:], matVec(wUK[hd], tc.dn, LatentDim, c[j*LatentDim:(j+1)*LatentDim]))
					copy(v[(j*tc.h+hd)*tc.dv:], matVec(wUV[hd], tc.dv, LatentDim, c[j*LatentDim:(j+1)*LatentDim]))
				}
			}
			mhaOut := make([]float32, tc.t*tc.h*tc.dv)
			mhaLSE := make([]float32, tc.t*tc.h)
			MHACausal(mhaOut, mhaLSE, qNope, qPe, kNope, kPe, v, tc.t, tc.s, tc.h, tc.dn, RopeDim, tc.dv, tc.offset, tc.scale, keep)

			// Absorbed form: cache rows [c | k_pe], queries [W_UKᵀ q_nope | q_pe].
			kv := make(DenseKV, tc.s*RowDim)
			for j := range tc.s {
				copy(kv[j*RowDim:], c[j*LatentDim:(j+1)*LatentDim])
				copy(kv[j*RowDim+LatentDim:], kPe[j*RopeDim:(j+1)*RopeDim])
			}
			q := make([]float32, tc.t*tc.h*RowDim)
			for i := range tc.t {
				for hd := range tc.h {
					base := (i*tc.h + hd) * RowDim
					copy(q[base:], matTVec(wUK[hd], tc.dn, LatentDim, qNope[(i*tc.h+hd)*tc.dn:(i*tc.h+hd+1)*tc.dn]))
					copy(q[base+LatentDim:], qPe[(i*tc.h+hd)*RopeDim:(i*tc.h+hd+1)*RopeDim])
				}
			}
			indices := filledInt32(tc.t*tc.s, -1)
			for i := range tc.t {
				for j := range min(tc.offset+i+1, tc.s) {
					if selected[i][j] {
						indices[i*tc.s+j] = int32(j)
					}
				}
			}
			latent := make([]float32, tc.t*tc.h*LatentDim)
			absLSE := make([]float32, tc.t*tc.h)
			SparseAttention(latent, absLSE, nil, q, tc.t, tc.h, kv, indices, tc.s, nil, tc.scale, nil)
			absOut := make([]float32, tc.t*tc.h*tc.dv)
			for i := range tc.t {
				for hd := range tc.h {
					copy(absOut[(i*tc.h+hd)*tc.dv:], matVec(wUV[hd], tc.dv, LatentDim, latent[(i*tc.h+hd)*LatentDim:(i*tc.h+hd+1)*LatentDim]))
				}
			}
			diffF32(t, "out (MHA vs absorbed)", mhaOut, absOut, approx(1e-3, 1e-5))
			diffF32(t, "lse (MHA vs absorbed)", mhaLSE, absLSE, approx(1e-5, 1e-5))
		})
	}
}

// TestMHANoVisibleKey: a query whose selection rejects every visible key gets
// out 0 and lse −Inf.
func TestMHANoVisibleKey(t *testing.T) {
	const s, h, dn, dr, dv = 3, 2, 4, 2, 3
	rng := rand.New(rand.NewPCG(4, 0))
	out := filled(2*h*dv, float32(math.NaN()))
	lse := make([]float32, 2*h)
	MHACausal(out, lse, randVec(rng, 2*h*dn), randVec(rng, 2*h*dr), randVec(rng, s*h*dn), randVec(rng, s*dr), randVec(rng, s*h*dv),
		2, s, h, dn, dr, dv, 1, 1, func(i, j int) bool { return i == 1 })
	negInf := float32(math.Inf(-1))
	diffF32(t, "lse", []float32{negInf, negInf, lse[2], lse[3]}, lse, approx(0, 0))
	diffF32(t, "out of query 0", make([]float32, h*dv), out[:h*dv], approx(0, 0))
	for _, x := range append(lse[2:], out[h*dv:]...) {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("query 1 sees keys but has %v", x)
		}
	}
}

func filledInt32(n int, v int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = v
	}
	return s
}
