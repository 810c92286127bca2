package mla

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/cpmla/cpmla/kernels"
	"github.com/google/go-cmp/cmp"
)

// withImpl runs f under the named kernels implementation.
func withImpl(t *testing.T, name string, f func()) {
	t.Helper()
	prev, err := kernels.SetImpl(name)
	if err != nil {
		t.Fatal(err)
	}
	defer kernels.SetImpl(prev)
	f()
}

func bits(x []float32) []uint32 {
	b := make([]uint32, len(x))
	for i, v := range x {
		b[i] = math.Float32bits(v)
	}
	return b
}

// TestSparseAttentionFastMatchesReference: on randomized shapes with −1
// entries anywhere, topkLen cut-offs, empty rows and NaN in every slot no
// valid entry names, the fast path agrees with the reference within float32
// rounding, and each query row has the same bits computed alone.
func TestSparseAttentionFastMatchesReference(t *testing.T) {
	if !kernels.Accelerated() {
		t.Skip("kernels run the reference (CPMLA_KERNELS=ref); nothing to compare")
	}
	fast := kernels.Impl()
	tests := []struct {
		name                  string
		rows, heads, topk, kv int
	}{
		{"glm5 heads, decode", 1, 64, 300, 700},
		{"prefill rows, odd heads", 5, 7, 33, 80},
		{"top-k beyond a block", 3, 16, 260, 400},
		{"one key", 2, 4, 1, 3},
	}
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(20, uint64(k)))
			kv := DenseKV(filled(tc.kv*RowDim, float32(math.NaN())))
			indices := make([]int32, tc.rows*tc.topk)
			topkLen := make([]int32, tc.rows)
			for r := range tc.rows {
				topkLen[r] = int32(rng.IntN(tc.topk + 2))
				if r == tc.rows-1 && tc.rows > 1 {
					topkLen[r] = 0 // a row that sees nothing
				}
				for j, p := range rng.Perm(tc.kv)[:tc.topk] {
					if rng.IntN(5) == 0 {
						p = -1 - rng.IntN(3)
					}
					indices[r*tc.topk+j] = int32(p)
					if p >= 0 && j < int(topkLen[r]) {
						copy(kv[p*RowDim:(p+1)*RowDim], randVec(rng, RowDim))
					}
				}
			}
			q := randVec(rng, tc.rows*tc.heads*RowDim)
			run := func(impl string, rows int, q []float32, indices, topkLen []int32) (out, lse, maxL []float32) {
				out = make([]float32, rows*tc.heads*LatentDim)
				lse = make([]float32, rows*tc.heads)
				maxL = make([]float32, rows*tc.heads)
				withImpl(t, impl, func() {
					SparseAttention(out, lse, maxL, q, rows, tc.heads, kv, indices, tc.topk, topkLen, 0.0625, NewWorkspace(tc.topk, tc.heads))
				})
				return out, lse, maxL
			}
			refOut, refLSE, refMax := run("ref", tc.rows, q, indices, topkLen)
			out, lse, maxL := run(fast, tc.rows, q, indices, topkLen)
			diffF32(t, "out", refOut, out, approx(1e-4, 1e-5))
			diffF32(t, "lse", refLSE, lse, approx(1e-5, 1e-5))
			diffF32(t, "maxLogits", refMax, maxL, approx(1e-5, 1e-5))
			for r := range tc.rows {
				o1, l1, m1 := run(fast, 1, q[r*tc.heads*RowDim:(r+1)*tc.heads*RowDim], indices[r*tc.topk:(r+1)*tc.topk], topkLen[r:r+1])
				hd := tc.heads
				want := append(append(append([]float32{}, out[r*hd*LatentDim:(r+1)*hd*LatentDim]...), lse[r*hd:(r+1)*hd]...), maxL[r*hd:(r+1)*hd]...)
				got := append(append(o1, l1...), m1...)
				if d := cmp.Diff(bits(want), bits(got)); d != "" {
					t.Errorf("row %d alone vs in the batch (-batch +alone):\n%s", r, d)
				}
			}
		})
	}
}

// TestIndexerScoresFastMatchesReference: the fast scores agree with the
// reference, keys past every bound are never read (they are NaN), and each
// query's scores have the same bits computed alone.
func TestIndexerScoresFastMatchesReference(t *testing.T) {
	if !kernels.Accelerated() {
		t.Skip("kernels run the reference (CPMLA_KERNELS=ref); nothing to compare")
	}
	fast := kernels.Impl()
	tests := []struct {
		name             string
		t, heads, dim, n int
	}{
		{"glm5 indexer decode", 2, 32, 128, 300},
		{"prefill chunk", 6, 8, 128, 150},
		{"heads not a multiple of four", 3, 6, 64, 70},
		{"dim with a tail", 2, 4, 40, 20},
	}
	for k, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(21, uint64(k)))
			ends := make([]int32, tc.t)
			var maxEnd int32
			for i := range ends {
				ends[i] = int32(rng.IntN(tc.n - 3))
				maxEnd = max(maxEnd, ends[i])
			}
			perm := rng.Perm(tc.n + 5)
			slots := make([]int32, tc.n)
			data := filled((tc.n+5)*tc.dim, float32(math.NaN()))
			for j := range slots {
				slots[j] = int32(perm[j])
				if j < int(maxEnd) {
					copy(data[perm[j]*tc.dim:], randVec(rng, tc.dim))
				}
			}
			keys := DenseKeys{Dim: tc.dim, Data: data}
			q := randVec(rng, tc.t*tc.heads*tc.dim)
			w := randVec(rng, tc.t*tc.heads)
			run := func(impl string, t0, t1 int) []float32 {
				s := make([]float32, (t1-t0)*tc.n)
				withImpl(t, impl, func() {
					IndexerScores(s, q[t0*tc.heads*tc.dim:t1*tc.heads*tc.dim], w[t0*tc.heads:t1*tc.heads], t1-t0, tc.heads, tc.dim, keys, slots, ends[t0:t1])
				})
				return s
			}
			ref := run("ref", 0, tc.t)
			got := run(fast, 0, tc.t)
			diffF32(t, "scores", ref, got, approx(1e-4, 1e-5))
			for i := range tc.t {
				if d := cmp.Diff(bits(got[i*tc.n:(i+1)*tc.n]), bits(run(fast, i, i+1))); d != "" {
					t.Errorf("query %d alone vs in the block (-block +alone):\n%s", i, d)
				}
			}
		})
	}
}

// TestSparseAttentionBF16Source: a bf16 source read in place gives exactly
// the bits of the same rows widened into a DenseKV, under the reference and
// the fast path, with −1 entries and NaN in every slot no valid entry names.
func TestSparseAttentionBF16Source(t *testing.T) {
	const rows, heads, topk, nkv = 3, 16, 150, 400
	rng := rand.New(rand.NewPCG(22, 0))
	kvB := make(DenseKVBF16, nkv*RowDim)
	for i := range kvB {
		kvB[i] = 0x7fc0 // NaN unless a valid entry names the slot
	}
	indices := make([]int32, rows*topk)
	for r := range rows {
		for j, p := range rng.Perm(nkv)[:topk] {
			if rng.IntN(6) == 0 {
				p = -1
			}
			indices[r*topk+j] = int32(p)
			if p >= 0 {
				for c, v := range randVec(rng, RowDim) {
					kvB[p*RowDim+c] = uint16(math.Float32bits(v) >> 16)
				}
			}
		}
	}
	kvF := make(DenseKV, len(kvB))
	for i, h := range kvB {
		kvF[i] = math.Float32frombits(uint32(h) << 16)
	}
	q := randVec(rng, rows*heads*RowDim)
	topkLen := []int32{topk, topk / 3, 0}
	for _, impl := range []string{"ref", kernels.Impl()} {
		run := func(src KVSource) []float32 {
			out := make([]float32, rows*heads*LatentDim)
			lse := make([]float32, rows*heads)
			maxL := make([]float32, rows*heads)
			withImpl(t, impl, func() {
				SparseAttention(out, lse, maxL, q, rows, heads, src, indices, topk, topkLen, 0.0625, NewWorkspace(topk, heads))
			})
			return append(append(out, lse...), maxL...)
		}
		if d := cmp.Diff(bits(run(kvF)), bits(run(kvB))); d != "" {
			t.Errorf("%s: widened f32 rows vs bf16 rows in place (-f32 +bf16):\n%s", impl, d)
		}
	}
}

// decodingSource is a DecodingKVSource over bf16 rows that Row widens into
// the caller's scratch, counting the rows it decodes and the DecodeRows
// calls.
type decodingSource struct {
	rows             DenseKVBF16
	decoded, batches atomic.Int64 // Row and DecodeRows run on several threads
}

func (s *decodingSource) Row(slot int32, scratch []float32) []float32 {
	s.decoded.Add(1)
	return s.rows.Row(slot, scratch)
}
func (s *decodingSource) DecodesRows() bool { return true }
func (s *decodingSource) DecodeRows(dst []float32, slots []int32, j0, j1 int) {
	for j := j0; j < j1; j++ {
		s.Row(slots[j], dst[(j-j0)*RowDim:(j-j0+1)*RowDim])
	}
	s.batches.Add(1)
}

// TestSparseAttentionDecodingSource: rows decoded by the source a block at a
// time inside the kernel give exactly the bits of the same rows in a DenseKV,
// under the reference and the fast path and on one and two threads, with −1
// entries, shortened rows and more selected rows than one kernel block; every
// valid row is decoded once per query row.
func TestSparseAttentionDecodingSource(t *testing.T) {
	const rows, heads, topk, nkv = 3, 16, 300, 700
	rng := rand.New(rand.NewPCG(23, 0))
	src := &decodingSource{rows: make(DenseKVBF16, nkv*RowDim)}
	for i := range src.rows {
		src.rows[i] = 0x7fc0 // NaN unless a valid entry names the slot
	}
	indices := make([]int32, rows*topk)
	for r := range rows {
		for j, p := range rng.Perm(nkv)[:topk] {
			if rng.IntN(6) == 0 {
				p = -1
			}
			indices[r*topk+j] = int32(p)
			if p >= 0 {
				for c, v := range randVec(rng, RowDim) {
					src.rows[p*RowDim+c] = uint16(math.Float32bits(v) >> 16)
				}
			}
		}
	}
	topkLen := []int32{topk, topk / 3, 0}
	valid := 0
	for r, lim := range topkLen {
		for _, p := range indices[r*topk : r*topk+int(lim)] {
			if p >= 0 {
				valid++
			}
		}
	}
	dense := make(DenseKV, len(src.rows))
	for i, h := range src.rows {
		dense[i] = math.Float32frombits(uint32(h) << 16)
	}
	q := randVec(rng, rows*heads*RowDim)
	for _, impl := range []string{"ref", kernels.Impl()} {
		for _, threads := range []int{1, 2} {
			run := func(kv KVSource) []float32 {
				out := make([]float32, rows*heads*LatentDim)
				lse := make([]float32, rows*heads)
				maxL := make([]float32, rows*heads)
				withImpl(t, impl, func() {
					defer kernels.SetThreads(kernels.SetThreads(threads))
					SparseAttention(out, lse, maxL, q, rows, heads, kv, indices, topk, topkLen, 0.0625, NewWorkspace(topk, heads))
				})
				return append(append(out, lse...), maxL...)
			}
			src.decoded.Store(0)
			if d := cmp.Diff(bits(run(dense)), bits(run(src))); d != "" {
				t.Errorf("%s, %d threads: dense rows vs decoded rows (-dense +decoded):\n%s", impl, threads, d)
			}
			if n := src.decoded.Load(); n != int64(valid) {
				t.Errorf("%s, %d threads: %d rows decoded, want each of the %d valid entries once", impl, threads, n, valid)
			}
		}
	}
	if kernels.Impl() != "ref" && src.batches.Load() == 0 {
		t.Error("the fast path never decoded a block of rows")
	}
}

// decodingKeys is a DecodingKeySource over dense keys that Key copies into
// the caller's scratch, counting the keys DecodeKeys decodes.
type decodingKeys struct {
	keys    DenseKeys
	decoded atomic.Int64 // DecodeKeys runs on several threads
}

func (s *decodingKeys) Key(slot int32, scratch []float32) []float32 {
	return scratch[:copy(scratch, s.keys.Key(slot, nil))]
}
func (s *decodingKeys) DecodesKeys() bool { return true }
func (s *decodingKeys) DecodeKeys(dst []float32, slots []int32, j0, j1 int) {
	d := s.keys.Dim
	for j := j0; j < j1; j++ {
		s.Key(slots[j], dst[(j-j0)*d:(j-j0+1)*d])
	}
	s.decoded.Add(int64(j1 - j0))
}

// TestIndexerScoresDecodingSource: keys decoded into scratch a chunk at a
// time score exactly as the same keys read in place, over more keys
// than one gather chunk, under the reference and the fast path and on one
// and two threads.
func TestIndexerScoresDecodingSource(t *testing.T) {
	const tq, heads, dim, n = 3, 32, 128, 700
	rng := rand.New(rand.NewPCG(24, 0))
	dense := DenseKeys{Dim: dim, Data: randVec(rng, (n+9)*dim)}
	src := &decodingKeys{keys: dense}
	slots := make([]int32, n)
	for j, p := range rng.Perm(n + 9)[:n] {
		slots[j] = int32(p)
	}
	ends := []int32{n, 257, 0}
	q := randVec(rng, tq*heads*dim)
	w := randVec(rng, tq*heads)
	for _, impl := range []string{"ref", kernels.Impl()} {
		for _, threads := range []int{1, 2} {
			run := func(keys KeySource) []float32 {
				s := make([]float32, tq*n)
				withImpl(t, impl, func() {
					defer kernels.SetThreads(kernels.SetThreads(threads))
					IndexerScoresScratch(NewIndexerScratch(heads, dim), s, q, w, tq, heads, dim, keys, slots, ends)
				})
				return s
			}
			if d := cmp.Diff(bits(run(dense)), bits(run(src))); d != "" {
				t.Errorf("%s, %d threads: keys in place vs decoded (-in place +decoded):\n%s", impl, threads, d)
			}
		}
	}
	if kernels.Impl() != "ref" && src.decoded.Load() == 0 {
		t.Error("the fast path never decoded a chunk of keys")
	}
}
