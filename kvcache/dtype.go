package kvcache

import (
	"fmt"
	"strings"

	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/numfmt"
	"github.com/cpmla/cpmla/plan"
)

// KVDType is the storage format of MLA cache rows (--kv-cache-dtype).
type KVDType string

// MLA cache row formats.
const (
	KVF32      KVDType = "f32"        // 576 float32, 2304 B/token
	KVBF16     KVDType = "bf16"       // 576 bfloat16, 1152 B/token
	KVFP8DSMLA KVDType = "fp8_ds_mla" // 512 e4m3 + 4 f32 scales + 64 bf16, 656 B/token
)

var kvDTypes = []KVDType{KVF32, KVBF16, KVFP8DSMLA}

// ParseKVDType reads a --kv-cache-dtype value. It refuses anything but the
// formats above, listing them.
func ParseKVDType(s string) (KVDType, error) {
	for _, d := range kvDTypes {
		if s == string(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("kv cache dtype %q is not supported (use --kv-cache-dtype %s)", s, joinNames(kvDTypes))
}

// IndexerDType is the storage format of lightning-indexer keys.
type IndexerDType string

// Indexer key formats.
const (
	IdxF32 IndexerDType = "f32" // dim float32
	IdxFP8 IndexerDType = "fp8" // 128 e4m3 + 1 f32 power-of-two scale, 132 B/token
)

var indexerDTypes = []IndexerDType{IdxF32, IdxFP8}

// ParseIndexerDType reads an indexer key cache dtype. It refuses anything but
// the formats above, listing them.
func ParseIndexerDType(s string) (IndexerDType, error) {
	for _, d := range indexerDTypes {
		if s == string(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("indexer cache dtype %q is not supported (use one of %s)", s, joinNames(indexerDTypes))
}

func joinNames[T ~string](names []T) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// RowBytes is the size of one token's MLA cache row in format d, or 0 for an
// unknown format. Sizes come from plan.RowBytes, the one definition the
// planner and the memory budget share.
func RowBytes(d KVDType) int {
	switch d {
	case KVF32, KVBF16, KVFP8DSMLA:
		n, err := plan.RowBytes(string(d), mla.LatentDim, mla.RopeDim)
		if err != nil {
			return 0
		}
		return int(n)
	}
	return 0
}

// KeyBytes is the size of one token's indexer key of width dim in format d,
// or 0 when the format cannot store such a key (fp8 records hold exactly
// numfmt.IndexerKeyDim values). Sizes come from plan.KeyBytes, the one
// definition the planner and the memory budget share.
func KeyBytes(d IndexerDType, dim int) int {
	switch {
	case dim < 0:
		return 0
	case d == IdxF32, d == IdxFP8 && dim == numfmt.IndexerKeyDim:
		n, err := plan.KeyBytes(string(d), dim)
		if err != nil {
			return 0
		}
		return int(n)
	}
	return 0
}
