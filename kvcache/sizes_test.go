package kvcache

import (
	"math"
	"testing"

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
