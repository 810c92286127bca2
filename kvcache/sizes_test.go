package kvcache

import (
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
