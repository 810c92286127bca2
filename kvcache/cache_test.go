package kvcache

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/numfmt"
)

func randRow(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// TestCacheRoundTrip: what a layer returns is the written row rounded by the
// format's own definition (f32 exact, bf16 = RoundBF16, fp8_ds_mla =
// RoundDSMLA; keys f32 exact, fp8 = RoundIndexerKey), for every layer and
// independent of the other layers' contents.
func TestCacheRoundTrip(t *testing.T) {
	tests := []struct {
		kv       KVDType
		idx      IndexerDType
		roundRow func([]float32)
		roundKey func([]float32)
	}{
		{KVF32, IdxF32, func([]float32) {}, func([]float32) {}},
		{KVBF16, IdxFP8, func(r []float32) {
			for i := range r {
				r[i] = numfmt.RoundBF16(r[i])
			}
		}, numfmt.RoundIndexerKey},
		{KVFP8DSMLA, IdxFP8, numfmt.RoundDSMLA, numfmt.RoundIndexerKey},
	}
	const layers, blocks, bs, dim = 2, 3, 4, 128
	for k, tc := range tests {
		t.Run(string(tc.kv)+"/"+string(tc.idx), func(t *testing.T) {
			c, err := NewCache(layers, blocks, bs, tc.kv, tc.idx, dim)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(10, uint64(k)))
			slots := blocks * bs
			wantRows := make([][]float32, layers*slots)
			wantKeys := make([][]float32, layers*slots)
			for l := range layers {
				for s := range slots {
					row, key := randRow(rng, mla.RowDim), randRow(rng, dim)
					c.Layer(l).WriteRow(int32(s), row)
					c.Layer(l).WriteKey(int32(s), key)
					tc.roundRow(row)
					tc.roundKey(key)
					wantRows[l*slots+s], wantKeys[l*slots+s] = row, key
				}
			}
			scratch := make([]float32, mla.RowDim)
			for l := range layers {
				for s := range slots {
					if d := cmp.Diff(wantRows[l*slots+s], c.Layer(l).Row(int32(s), scratch)); d != "" {
						t.Fatalf("layer %d slot %d row (-want +got):\n%s", l, s, d)
					}
					if d := cmp.Diff(wantKeys[l*slots+s], c.Layer(l).Key(int32(s), scratch)); d != "" {
						t.Fatalf("layer %d slot %d key (-want +got):\n%s", l, s, d)
					}
				}
			}
		})
	}
}

// TestCacheBytes checks the per-token sizes of the spec's table (§6):
// f32 2304, bf16 1152, fp8_ds_mla 656, indexer fp8 132, indexer f32 512.
func TestCacheBytes(t *testing.T) {
	tests := []struct {
		kv               KVDType
		idx              IndexerDType
		dim              int
		rowB, keyB, want int64
	}{
		{KVF32, IdxF32, 128, 2304, 512, 0},
		{KVBF16, IdxFP8, 128, 1152, 132, 0},
		{KVFP8DSMLA, IdxFP8, 128, 656, 132, 0},
		{KVFP8DSMLA, "", 0, 656, 0, 0},
	}
	const layers, blocks, bs = 3, 5, 16
	for _, tc := range tests {
		c, err := NewCache(layers, blocks, bs, tc.kv, tc.idx, tc.dim)
		if err != nil {
			t.Fatal(err)
		}
		if got := int64(RowBytes(tc.kv)); got != tc.rowB {
			t.Errorf("RowBytes(%s) = %d, want %d", tc.kv, got, tc.rowB)
		}
		want := int64(layers*blocks*bs) * (tc.rowB + tc.keyB)
		if got := c.Bytes(); got != want {
			t.Errorf("%s+%s: Bytes() = %d, want %d", tc.kv, tc.idx, got, want)
		}
		if c.BlockSize() != bs || c.Layers() != layers || c.Layer(layers-1).Slots() != blocks*bs {
			t.Errorf("shape: block size %d, layers %d, slots %d", c.BlockSize(), c.Layers(), c.Layer(0).Slots())
		}
	}
}

func TestNewCacheRefusals(t *testing.T) {
	tests := []struct {
		name                    string
		layers, blocks, bs, dim int
		kv                      KVDType
		idx                     IndexerDType
		want                    []string
	}{
		{"no layers", 0, 1, 1, 0, KVF32, "", []string{"0 layers"}},
		{"no blocks", 1, 0, 1, 0, KVF32, "", []string{"0 blocks"}},
		{"no block size", 1, 1, 0, 0, KVF32, "", []string{"block size 0", "--block-size"}},
		{"unknown kv dtype", 1, 1, 1, 0, "fp16", "", []string{`"fp16"`, "f32, bf16, fp8_ds_mla"}},
		{"fp8 keys of 64", 1, 1, 1, 64, KVF32, IdxFP8, []string{"128", "64", "f32"}},
		{"unknown key dtype", 1, 1, 1, 128, KVF32, "int8", []string{`"int8"`, "f32, fp8"}},
		{"negative key width", 1, 1, 1, -1, KVF32, IdxF32, []string{"-1"}},
	}
	for _, tc := range tests {
		_, err := NewCache(tc.layers, tc.blocks, tc.bs, tc.kv, tc.idx, tc.dim)
		if err == nil {
			t.Errorf("%s: NewCache accepted it", tc.name)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not mention %q", tc.name, err, s)
			}
		}
	}
}

// TestCacheSlotChecks: negative slots (positions owned elsewhere, padding)
// are skipped on write; slots past the cache and keys of a keyless cache are
// refused.
func TestCacheSlotChecks(t *testing.T) {
	c, err := NewCache(1, 1, 2, KVF32, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	lc := c.Layer(0)
	row := make([]float32, mla.RowDim)
	for i := range row {
		row[i] = 1
	}
	lc.WriteRow(-1, row)
	if d := cmp.Diff(make([]float32, 2*mla.RowDim), lc.rowsF32); d != "" {
		t.Errorf("write to slot -1 changed the cache:\n%s", d)
	}
	for name, fn := range map[string]func(){
		"row past the end":   func() { lc.Row(2, nil) },
		"write past the end": func() { lc.WriteRow(2, row) },
		"key of keyless":     func() { lc.Key(0, row) },
		"negative row read":  func() { lc.Row(-1, row) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}()
	}
}

// TestSparseAttentionOverCache: attention over a quantized layer equals
// attention over a dense buffer holding the same rounded rows, so the cache
// is a drop-in mla.KVSource.
func TestSparseAttentionOverCache(t *testing.T) {
	const heads, topk, blocks, bs = 4, 200, 4, 64
	rng := rand.New(rand.NewPCG(11, 0))
	// More selected rows than one kernel block (128), in random order, with
	// −1 entries.
	indices := make([]int32, topk)
	for j, p := range rng.Perm(blocks * bs)[:topk] {
		if j%7 == 3 {
			p = -1
		}
		indices[j] = int32(p)
	}
	for _, kv := range []KVDType{KVF32, KVBF16, KVFP8DSMLA} {
		c, err := NewCache(1, blocks, bs, kv, IdxF32, 128)
		if err != nil {
			t.Fatal(err)
		}
		dense := make(mla.DenseKV, blocks*bs*mla.RowDim)
		scratch := make([]float32, mla.RowDim)
		for s := range blocks * bs {
			c.Layer(0).WriteRow(int32(s), randRow(rng, mla.RowDim))
			copy(dense[s*mla.RowDim:], c.Layer(0).Row(int32(s), scratch))
		}
		q := randRow(rng, heads*mla.RowDim)
		want, got := make([]float32, heads*mla.LatentDim), make([]float32, heads*mla.LatentDim)
		wantLSE, gotLSE := make([]float32, heads), make([]float32, heads)
		mla.SparseAttention(want, wantLSE, nil, q, 1, heads, dense, indices, topk, nil, 0.0625, nil)
		mla.SparseAttention(got, gotLSE, nil, q, 1, heads, c.Layer(0), indices, topk, nil, 0.0625, nil)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: out over the cache differs from the dense rows (-want +got):\n%s", kv, d)
		}
		if d := cmp.Diff(wantLSE, gotLSE); d != "" {
			t.Errorf("%s: lse differs (-want +got):\n%s", kv, d)
		}
	}
}

// TestAttentionOverQuantizedCacheDoesNotAllocate: sparse attention over
// fp8_ds_mla rows and indexer scoring over fp8 keys (decoded a block or
// chunk at a time, on one and two threads) allocate nothing once warm.
func TestAttentionOverQuantizedCacheDoesNotAllocate(t *testing.T) {
	const heads, topk, ih, dim, nkeys = 8, 700, 4, 128, 1500
	c, err := NewCache(1, 32, 64, KVFP8DSMLA, IdxFP8, dim)
	if err != nil {
		t.Fatal(err)
	}
	lc := c.Layer(0)
	rng := rand.New(rand.NewPCG(13, 0))
	for s := range nkeys {
		lc.WriteRow(int32(s), randRow(rng, mla.RowDim))
		lc.WriteKey(int32(s), randRow(rng, dim))
	}
	indices := make([]int32, topk)
	for j, p := range rng.Perm(nkeys)[:topk] {
		indices[j] = int32(p)
	}
	slots := make([]int32, nkeys)
	for j := range slots {
		slots[j] = int32(j)
	}
	q := randRow(rng, heads*mla.RowDim)
	out, lse := make([]float32, heads*mla.LatentDim), make([]float32, heads)
	ws := mla.NewWorkspace(topk, heads)
	iq, iw := randRow(rng, ih*dim), randRow(rng, ih)
	scores := make([]float32, nkeys)
	isc := mla.NewIndexerScratch(ih, dim)
	ends := []int32{nkeys}
	var kv mla.KVSource = lc
	var keys mla.KeySource = lc
	for _, threads := range []int{1, 2} {
		prev := kernels.SetThreads(threads)
		if a := testing.AllocsPerRun(10, func() {
			mla.SparseAttention(out, lse, nil, q, 1, heads, kv, indices, topk, nil, 0.0625, ws)
			mla.IndexerScoresScratch(isc, scores, iq, iw, 1, ih, dim, keys, slots, ends)
		}); a != 0 {
			t.Errorf("%d threads: %v allocations per call", threads, a)
		}
		kernels.SetThreads(prev)
	}
}

// TestCacheDoesNotAllocate: reads and writes on the hot path are allocation-free.
func TestCacheDoesNotAllocate(t *testing.T) {
	c, err := NewCache(1, 2, 4, KVFP8DSMLA, IdxFP8, 128)
	if err != nil {
		t.Fatal(err)
	}
	lc := c.Layer(0)
	row := randRow(rand.New(rand.NewPCG(12, 0)), mla.RowDim)
	scratch := make([]float32, mla.RowDim)
	if a := testing.AllocsPerRun(20, func() {
		lc.WriteRow(5, row)
		lc.Row(5, scratch)
		lc.WriteKey(5, row[:128])
		lc.Key(5, scratch)
	}); a != 0 {
		t.Errorf("cache read/write allocates %v times", a)
	}
}

func TestPool(t *testing.T) {
	p := NewPool(4)
	ids, err := p.Alloc(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int32{0, 1, 2}, ids); d != "" {
		t.Errorf("fresh pool ids (-want +got):\n%s", d)
	}
	// Exhaustion takes nothing and says why.
	before := append([]int32(nil), ids...)
	ids, err = p.Alloc(2, ids)
	if !errors.Is(err, ErrOutOfBlocks) || !strings.Contains(err.Error(), "1 of 4 free") {
		t.Fatalf("Alloc(2) with 1 free: %v", err)
	}
	if d := cmp.Diff(before, ids); d != "" || p.FreeCount() != 1 {
		t.Errorf("failed Alloc changed state: free %d, ids diff:\n%s", p.FreeCount(), d)
	}
	p.Free(ids[:2])
	if p.FreeCount() != 3 || p.Capacity() != 4 {
		t.Errorf("after free: %d free of %d", p.FreeCount(), p.Capacity())
	}
	all, err := p.Alloc(3, ids[2:])
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int32{0, 1, 2, 3}, all, cmpopts.SortSlices(func(a, b int32) bool { return a < b })); d != "" {
		t.Errorf("ids are not the 4 distinct blocks (-want +got):\n%s", d)
	}
	if got, err := p.Alloc(0, nil); err != nil || len(got) != 0 {
		t.Errorf("Alloc(0) = %v, %v", got, err)
	}
	if _, err := p.Alloc(-1, nil); err == nil {
		t.Error("Alloc(-1) accepted")
	}
}

// TestPoolFreeRefusesBadIDs: double frees and unknown ids panic and leave
// the pool unchanged.
func TestPoolFreeRefusesBadIDs(t *testing.T) {
	for name, bad := range map[string][]int32{
		"twice in one call": {1, 0, 1},
		"out of range":      {0, 9},
		"never allocated":   {3},
	} {
		p := NewPool(4)
		if _, err := p.Alloc(2, nil); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Free(%v) did not panic", name, bad)
				}
			}()
			p.Free(bad)
		}()
		if p.FreeCount() != 2 {
			t.Errorf("%s: free count %d after refused Free, want 2", name, p.FreeCount())
		}
		p.Free([]int32{0, 1}) // still allocated, so this must succeed
	}
}

func TestParseDTypes(t *testing.T) {
	for _, s := range []string{"f32", "bf16", "fp8_ds_mla"} {
		if d, err := ParseKVDType(s); err != nil || string(d) != s || RowBytes(d) == 0 {
			t.Errorf("ParseKVDType(%q) = %q, %v", s, d, err)
		}
	}
	for _, s := range []string{"f32", "fp8"} {
		if d, err := ParseIndexerDType(s); err != nil || string(d) != s || KeyBytes(d, 128) == 0 {
			t.Errorf("ParseIndexerDType(%q) = %q, %v", s, d, err)
		}
	}
	for _, s := range []string{"", "auto", "fp8", "FP32", "bf16 "} {
		if _, err := ParseKVDType(s); err == nil || !strings.Contains(err.Error(), "f32, bf16, fp8_ds_mla") {
			t.Errorf("ParseKVDType(%q) = %v, want a refusal listing the formats", s, err)
		}
	}
}

func FuzzParseKVDType(f *testing.F) {
	for _, s := range []string{"f32", "bf16", "fp8_ds_mla", "fp8", "", "auto"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseKVDType(s)
		if err != nil {
			if d != "" || !strings.Contains(err.Error(), "--kv-cache-dtype") {
				t.Fatalf("ParseKVDType(%q) = %q, %v", s, d, err)
			}
			return
		}
		if string(d) != s || RowBytes(d) <= 0 {
			t.Fatalf("ParseKVDType(%q) = %q with %d bytes per row", s, d, RowBytes(d))
		}
	})
}

func FuzzParseIndexerDType(f *testing.F) {
	for _, s := range []string{"f32", "fp8", "fp8_ds_mla", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseIndexerDType(s)
		if err != nil {
			if d != "" || !strings.Contains(err.Error(), "f32, fp8") {
				t.Fatalf("ParseIndexerDType(%q) = %q, %v", s, d, err)
			}
			return
		}
		if string(d) != s || KeyBytes(d, numfmt.IndexerKeyDim) <= 0 {
			t.Fatalf("ParseIndexerDType(%q) = %q", s, d)
		}
	})
}

// TestCopyBlock: after CopyBlock(dst, src) every layer's slots of dst read
// back what was written to the same offsets of src, in every format, and
// the other blocks are untouched.
func TestCopyBlock(t *testing.T) {
	const layers, blocks, bs, dim = 2, 4, 4, 128
	for k, dt := range []struct {
		kv  KVDType
		idx IndexerDType
	}{{KVF32, IdxF32}, {KVBF16, IdxFP8}, {KVFP8DSMLA, IdxFP8}} {
		t.Run(string(dt.kv), func(t *testing.T) {
			c, err := NewCache(layers, blocks, bs, dt.kv, dt.idx, dim)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(11, uint64(k)))
			for l := range layers {
				for s := range blocks * bs {
					c.Layer(l).WriteRow(int32(s), randRow(rng, mla.RowDim))
					c.Layer(l).WriteKey(int32(s), randRow(rng, dim))
				}
			}
			read := func(l, s int) ([]float32, []float32) {
				return c.Layer(l).Row(int32(s), make([]float32, mla.RowDim)), c.Layer(l).Key(int32(s), make([]float32, dim))
			}
			untouched := map[[2]int][2][]float32{}
			for l := range layers {
				for s := range blocks * bs {
					if s/bs != 3 {
						r, kk := read(l, s)
						untouched[[2]int{l, s}] = [2][]float32{r, kk}
					}
				}
			}
			if err := c.CopyBlock(3, 1); err != nil {
				t.Fatal(err)
			}
			for l := range layers {
				for off := range bs {
					wr, wk := read(l, 1*bs+off)
					gr, gk := read(l, 3*bs+off)
					if d := cmp.Diff(wr, gr); d != "" {
						t.Fatalf("layer %d offset %d row (-src +dst):\n%s", l, off, d)
					}
					if d := cmp.Diff(wk, gk); d != "" {
						t.Fatalf("layer %d offset %d key (-src +dst):\n%s", l, off, d)
					}
				}
			}
			for ls, want := range untouched {
				r, kk := read(ls[0], ls[1])
				if !cmp.Equal(want[0], r) || !cmp.Equal(want[1], kk) {
					t.Fatalf("layer %d slot %d changed by the copy", ls[0], ls[1])
				}
			}
			for _, bad := range [][2]int32{{1, 1}, {-1, 0}, {0, blocks}} {
				if err := c.CopyBlock(bad[0], bad[1]); err == nil {
					t.Errorf("CopyBlock(%d, %d) accepted", bad[0], bad[1])
				}
			}
		})
	}
}
