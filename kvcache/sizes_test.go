package kvcache

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/numfmt"
)

// The shared size definition must equal the records the cache really writes.
func TestSharedSizesMatchStoredRecords(t *testing.T) {
	if got := RowBytes(KVFP8DSMLA); got != numfmt.DSMLARecordBytes {
		t.Errorf("RowBytes(fp8_ds_mla) = %d, record is %d bytes", got, numfmt.DSMLARecordBytes)
	}
	if got := KeyBytes(IdxFP8, numfmt.IndexerKeyDim); got != numfmt.IndexerKeyBytes {
		t.Errorf("KeyBytes(fp8, %d) = %d, record is %d bytes", numfmt.IndexerKeyDim, got, numfmt.IndexerKeyBytes)
	}
	if got := KeyBytes(IdxFP8, 64); got != 0 {
		t.Errorf("KeyBytes(fp8, 64) = %d, want 0: fp8 records hold exactly %d values", got, numfmt.IndexerKeyDim)
	}
}

// A bf16 cache hands its rows out in place, and they widen to exactly what
// Row returns; other dtypes do not claim bf16 rows.
func TestBF16RowsInPlace(t *testing.T) {
	for _, dt := range []KVDType{KVF32, KVBF16, KVFP8DSMLA} {
		c, err := NewCache(1, 2, 4, dt, IdxF32, 0)
		if err != nil {
			t.Fatal(err)
		}
		lc := c.Layer(0)
		if got := lc.BF16Rows(); got != (dt == KVBF16) {
			t.Errorf("%s: BF16Rows %v", dt, got)
		}
		if dt != KVBF16 {
			continue
		}
		row := make([]float32, 576)
		for i := range row {
			row[i] = float32(i%17) * 0.37
		}
		lc.WriteRow(5, row)
		raw := lc.RowBF16(5)
		dec := lc.Row(5, make([]float32, 576))
		for i, h := range raw {
			if numfmt.F32FromBF16(h) != dec[i] {
				t.Fatalf("element %d: in place %v, Row %v", i, numfmt.F32FromBF16(h), dec[i])
			}
		}
	}
}

// fp8_ds_mla rows decoded through the vectorized tile decoder equal the
// scalar record decode bit for bit, on random rows with outliers.
func TestFP8RowDecodeMatchesScalar(t *testing.T) {
	c, err := NewCache(1, 4, 4, KVFP8DSMLA, IdxF32, 0)
	if err != nil {
		t.Fatal(err)
	}
	lc := c.Layer(0)
	row := make([]float32, 576)
	rec := make([]byte, numfmt.DSMLARecordBytes)
	want := make([]float32, 576)
	for slot := int32(0); slot < 16; slot++ {
		for i := range row {
			row[i] = float32((int(slot)*131+i*29)%97-48) * 0.013 * float32(1+i%7)
		}
		row[int(slot)*30] = 900 // an outlier tile
		lc.WriteRow(slot, row)
		numfmt.EncodeDSMLA(rec, row)
		numfmt.DecodeDSMLA(want, rec)
		got := lc.Row(slot, make([]float32, 576))
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("slot %d element %d: %v, scalar decode %v", slot, i, got[i], want[i])
			}
		}
	}
}

// DecodeKeys decodes a range of a slot list to exactly what Key gives each
// slot, and refuses caches whose keys are not fp8.
func TestDecodeKeysMatchesKey(t *testing.T) {
	const n = 200
	c, err := NewCache(1, 4, 64, KVBF16, IdxFP8, numfmt.IndexerKeyDim)
	if err != nil {
		t.Fatal(err)
	}
	lc := c.Layer(0)
	r := rand.New(rand.NewPCG(31, 4))
	key := make([]float32, numfmt.IndexerKeyDim)
	for s := range 4 * 64 {
		for i := range key {
			key[i] = float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(12)-6))
		}
		lc.WriteKey(int32(s), key)
	}
	slots := make([]int32, n)
	for j := range slots {
		slots[j] = int32(r.IntN(4 * 64))
	}
	const j0, j1 = 7, 150
	got := make([]float32, (j1-j0)*numfmt.IndexerKeyDim)
	lc.DecodeKeys(got, slots, j0, j1)
	checkRangeDecode(t, "DecodeKeys vs Key", got, numfmt.IndexerKeyDim, slots[j0:j1], lc.Key)
	f32, err := NewCache(1, 1, 4, KVBF16, IdxF32, numfmt.IndexerKeyDim)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if msg := fmt.Sprint(recover()); !strings.Contains(msg, "only fp8 keys are decoded") {
			t.Errorf("DecodeKeys on f32 keys: panic %q", msg)
		}
	}()
	f32.Layer(0).DecodeKeys(got, slots[:1], 0, 1)
}

// DecodeRows writes a range of a slot list exactly as Row reads each slot,
// for every row format.
func TestDecodeRowsMatchesRow(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 5))
	for _, dt := range []KVDType{KVF32, KVBF16, KVFP8DSMLA} {
		c, err := NewCache(1, 4, 16, dt, IdxF32, 0)
		if err != nil {
			t.Fatal(err)
		}
		lc := c.Layer(0)
		row := make([]float32, mla.RowDim)
		for s := range 4 * 16 {
			for i := range row {
				row[i] = float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(10)-5))
			}
			lc.WriteRow(int32(s), row)
		}
		slots := make([]int32, 50)
		for j := range slots {
			slots[j] = int32(r.IntN(4 * 16))
		}
		const j0, j1 = 3, 41
		got := make([]float32, (j1-j0)*mla.RowDim)
		lc.DecodeRows(got, slots, j0, j1)
		checkRangeDecode(t, string(dt)+": DecodeRows vs Row", got, mla.RowDim, slots[j0:j1], lc.Row)
	}
}

// checkRangeDecode fails t unless got holds, width values per slot, the
// bits one(slot, scratch) returns for every slot in turn.
func checkRangeDecode(t *testing.T, what string, got []float32, width int, slots []int32, one func(slot int32, scratch []float32) []float32) {
	t.Helper()
	for j, slot := range slots {
		want := one(slot, make([]float32, width))
		g := got[j*width : (j+1)*width]
		for i := range want {
			if math.Float32bits(g[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: slot %d value %d: %v, want %v", what, slot, i, g[i], want[i])
			}
		}
	}
}

// An fp8 cache's keys are exact in bf16, as KeysExactInBF16 vouches: every
// value Key and DecodeKeys give is a NaN or finite with its low sixteen bits
// zero, at scales from the smallest to the largest and with infinite, NaN
// and zero values among the written keys; an f32 cache does not vouch.
func TestFP8KeysExactInBF16(t *testing.T) {
	const dim = numfmt.IndexerKeyDim
	c, err := NewCache(1, 1, 8, KVBF16, IdxFP8, dim)
	if err != nil {
		t.Fatal(err)
	}
	lc := c.Layer(0)
	if !lc.KeysExactInBF16() {
		t.Fatal("an fp8 cache does not vouch for its keys")
	}
	r := rand.New(rand.NewPCG(37, 6))
	key := make([]float32, dim)
	for s, mag := range []float64{1e-30, 1e-4, 1, 3e5, 1e30, math.MaxFloat32, 1, 1} {
		for i := range key {
			key[i] = float32(r.NormFloat64() * mag)
		}
		switch s {
		case 6:
			key[0], key[1], key[2] = float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())
		case 7:
			clear(key)
		}
		lc.WriteKey(int32(s), key)
	}
	slots := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	got := make([]float32, len(slots)*dim)
	lc.DecodeKeys(got, slots, 0, len(slots))
	for s := range slots {
		got = append(got, lc.Key(int32(s), make([]float32, dim))...)
	}
	for i, v := range got {
		if b := math.Float32bits(v); !math.IsNaN(float64(v)) && (math.IsInf(float64(v), 0) || b&0xffff != 0) {
			t.Fatalf("key %d value %d is %v (bits %#08x): not a finite bf16 or a NaN", i/dim%len(slots), i%dim, v, b)
		}
	}
	f32, err := NewCache(1, 1, 8, KVBF16, IdxF32, dim)
	if err != nil {
		t.Fatal(err)
	}
	if f32.Layer(0).KeysExactInBF16() {
		t.Error("an f32 cache vouches for its keys")
	}
}
