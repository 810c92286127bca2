package kvcache

import (
	"fmt"

	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/numfmt"
)

// Cache holds, for every layer, the MLA rows and the indexer keys of this
// rank's KV blocks. Slot g is offset g%B of block g/B. All storage is
// allocated by NewCache; reads and writes never allocate.
type Cache struct {
	layers    []LayerCache
	blockSize int
	bytes     int64
}

// LayerCache is one layer's part of a Cache. It implements mla.KVSource (Row)
// and mla.KeySource (Key). Writes to distinct slots may run concurrently.
type LayerCache struct {
	slots int
	kv    KVDType
	// Exactly one of the row stores is non-nil, per kv.
	rowsF32  []float32 // [slots, RowDim]
	rowsBF16 []uint16  // [slots, RowDim]
	rowsFP8  []byte    // [slots, DSMLARecordBytes]

	idx      IndexerDType
	indexDim int // 0: the layer keeps no indexer keys
	keysF32  []float32
	keysFP8  []byte // [slots, IndexerKeyBytes]
}

var (
	_ mla.KVSource          = (*LayerCache)(nil)
	_ mla.DecodingKVSource  = (*LayerCache)(nil)
	_ mla.DecodingKeySource = (*LayerCache)(nil)
	_ mla.KeySource         = (*LayerCache)(nil)
)

// NewCache allocates the cache of one rank: layers × numBlocks blocks of
// blockSize tokens, MLA rows in format kv and, when indexDim > 0, indexer
// keys of indexDim values in format idx (indexDim 0 = a dense-MLA model
// without indexer; idx is then ignored).
func NewCache(layers, numBlocks, blockSize int, kv KVDType, idx IndexerDType, indexDim int) (*Cache, error) {
	switch {
	case layers < 1:
		return nil, fmt.Errorf("new KV cache: %d layers, need at least 1", layers)
	case numBlocks < 1:
		return nil, fmt.Errorf("new KV cache: %d blocks, need at least 1 (give the KV cache more memory)", numBlocks)
	case blockSize < 1:
		return nil, fmt.Errorf("new KV cache: block size %d, need at least 1 (use --block-size 64)", blockSize)
	case RowBytes(kv) == 0:
		return nil, fmt.Errorf("new KV cache: kv cache dtype %q is not supported (use --kv-cache-dtype %s)", kv, joinNames(kvDTypes))
	case indexDim < 0:
		return nil, fmt.Errorf("new KV cache: indexer key width %d, need 0 (no indexer) or more", indexDim)
	case indexDim > 0 && KeyBytes(idx, indexDim) == 0:
		if idx == IdxFP8 {
			return nil, fmt.Errorf("new KV cache: fp8 indexer keys hold %d values, the model's index_head_dim is %d (use indexer cache dtype f32)", numfmt.IndexerKeyDim, indexDim)
		}
		return nil, fmt.Errorf("new KV cache: indexer cache dtype %q is not supported (use one of %s)", idx, joinNames(indexerDTypes))
	}
	slots := numBlocks * blockSize
	c := &Cache{layers: make([]LayerCache, layers), blockSize: blockSize}
	c.bytes = int64(layers) * int64(slots) * int64(RowBytes(kv))
	if indexDim > 0 {
		c.bytes += int64(layers) * int64(slots) * int64(KeyBytes(idx, indexDim))
	}

	// One slab per store, cut into layers.
	var rowsF32, keysF32 []float32
	var rowsBF16 []uint16
	var rowsFP8, keysFP8 []byte
	switch kv {
	case KVF32:
		rowsF32 = make([]float32, layers*slots*mla.RowDim)
	case KVBF16:
		rowsBF16 = make([]uint16, layers*slots*mla.RowDim)
	case KVFP8DSMLA:
		rowsFP8 = make([]byte, layers*slots*numfmt.DSMLARecordBytes)
	}
	if indexDim > 0 {
		switch idx {
		case IdxF32:
			keysF32 = make([]float32, layers*slots*indexDim)
		case IdxFP8:
			keysFP8 = make([]byte, layers*slots*numfmt.IndexerKeyBytes)
		}
	}
	for i := range c.layers {
		lc := &c.layers[i]
		*lc = LayerCache{slots: slots, kv: kv, idx: idx, indexDim: indexDim}
		lc.rowsF32 = layerPart(rowsF32, i, slots*mla.RowDim)
		lc.rowsBF16 = layerPart(rowsBF16, i, slots*mla.RowDim)
		lc.rowsFP8 = layerPart(rowsFP8, i, slots*numfmt.DSMLARecordBytes)
		lc.keysF32 = layerPart(keysF32, i, slots*indexDim)
		lc.keysFP8 = layerPart(keysFP8, i, slots*numfmt.IndexerKeyBytes)
	}
	return c, nil
}

// layerPart is layer i's n-element part of a slab (nil for a nil slab).
func layerPart[T any](slab []T, i, n int) []T {
	if slab == nil {
		return nil
	}
	return slab[i*n : (i+1)*n : (i+1)*n]
}

// Layer returns layer i's cache.
func (c *Cache) Layer(i int) *LayerCache { return &c.layers[i] }

// Layers is the number of layers.
func (c *Cache) Layers() int { return len(c.layers) }

// BlockSize is the number of tokens per block.
func (c *Cache) BlockSize() int { return c.blockSize }

// Bytes is the storage held by the cache (rows and keys of all layers).
func (c *Cache) Bytes() int64 { return c.bytes }

// Slots is the number of token slots per layer (blocks × block size).
func (lc *LayerCache) Slots() int { return lc.slots }

// checkSlot panics unless 0 ≤ slot < Slots.
func (lc *LayerCache) checkSlot(slot int32) {
	if slot < 0 || int(slot) >= lc.slots {
		panic(fmt.Sprintf("kvcache: slot %d outside a cache of %d slots", slot, lc.slots))
	}
}

// WriteRow stores a RowDim-wide row (latent | rope) at slot, rounding it to
// the cache format. A negative slot (a position another rank owns, or
// padding) is skipped.
func (lc *LayerCache) WriteRow(slot int32, row []float32) {
	if slot < 0 {
		return
	}
	lc.checkSlot(slot)
	row = row[:mla.RowDim]
	switch lc.kv {
	case KVF32:
		copy(lc.rowsF32[int(slot)*mla.RowDim:], row)
	case KVBF16:
		numfmt.F32sToBF16(lc.rowsBF16[int(slot)*mla.RowDim:], row)
	case KVFP8DSMLA:
		numfmt.EncodeDSMLA(lc.rowsFP8[int(slot)*numfmt.DSMLARecordBytes:], row)
	}
}

// BF16Rows reports whether this cache stores MLA rows as bf16, which the fast
// attention path then reads in place through RowBF16.
func (lc *LayerCache) BF16Rows() bool { return lc.rowsBF16 != nil }

// RowBF16 is the bf16 row stored at slot, in place (a view that must not be
// modified); only for a bf16 cache (BF16Rows).
func (lc *LayerCache) RowBF16(slot int32) []uint16 {
	off := int(slot) * mla.RowDim
	return lc.rowsBF16[off : off+mla.RowDim : off+mla.RowDim]
}

// Row returns the dequantized row at slot. For f32 caches it is a view of the
// cache; otherwise it is decoded into scratch (len ≥ RowDim).
func (lc *LayerCache) Row(slot int32, scratch []float32) []float32 {
	lc.checkSlot(slot)
	off := int(slot) * mla.RowDim
	switch lc.kv {
	case KVF32:
		return lc.rowsF32[off : off+mla.RowDim : off+mla.RowDim]
	case KVBF16:
		numfmt.BF16ToF32s(scratch, lc.rowsBF16[off:off+mla.RowDim])
	case KVFP8DSMLA:
		numfmt.DecodeDSMLATiles(scratch, lc.rowsFP8[int(slot)*numfmt.DSMLARecordBytes:], kernels.DecodeE4M3Scaled, kernels.WidenBF16)
	}
	return scratch[:mla.RowDim]
}

// DecodesRows reports whether Row decodes rows (bf16 and fp8_ds_mla caches)
// rather than returning views (f32), for mla.DecodingKVSource.
func (lc *LayerCache) DecodesRows() bool { return lc.kv != KVF32 }

// Record layouts of the quantized stores, for kernels.DecodeRecords, and how
// many records ahead of the one it decodes a DecodeRows or DecodeKeys call
// prefetches (a few memory latencies of decode work).
var (
	dsmlaLayout = kernels.RecordLayout{Bytes: numfmt.DSMLARecordBytes, Tiles: numfmt.DSMLALatentDim / numfmt.DSMLATile,
		TileCodes: numfmt.DSMLATile, Rope: numfmt.DSMLARopeDim}
	keyLayout = kernels.RecordLayout{Bytes: numfmt.IndexerKeyBytes, Tiles: 1, TileCodes: numfmt.IndexerKeyDim}
)

const (
	rowsAhead = 8
	keysAhead = 16
)

// DecodeRows writes the rows of slots[j0:j1] into dst (row j0+i at
// dst[i·RowDim:]), the values Row gives (mla.DecodingKVSource):
// fp8_ds_mla records in one kernel call that prefetches the records of the
// slots after them. It panics on a slot outside the cache.
func (lc *LayerCache) DecodeRows(dst []float32, slots []int32, j0, j1 int) {
	if lc.kv == KVFP8DSMLA {
		kernels.DecodeRecords(dst, lc.rowsFP8, dsmlaLayout, slots, j0, j1, rowsAhead)
		return
	}
	for j := j0; j < j1; j++ {
		to := dst[(j-j0)*mla.RowDim : (j-j0+1)*mla.RowDim]
		if got := lc.Row(slots[j], to); &got[0] != &to[0] {
			copy(to, got)
		}
	}
}

// DecodesKeys reports whether Key decodes keys (fp8) rather than returning
// views (f32), for mla.DecodingKeySource.
func (lc *LayerCache) DecodesKeys() bool { return lc.fp8Keys() }

// fp8Keys reports whether this cache keeps fp8 indexer keys.
func (lc *LayerCache) fp8Keys() bool { return lc.idx == IdxFP8 && lc.indexDim > 0 }

// KeysExactInBF16 reports whether every key Key and DecodeKeys give is
// exact in bf16 (mla.BF16Keys): fp8 keys are, e4m3 codes (four significant
// bits, no infinity) times a power-of-two scale of 2^-22 to 2^120, with
// codes of 256 and more never stored at the largest scale.
func (lc *LayerCache) KeysExactInBF16() bool { return lc.fp8Keys() }

// DecodeKeys decodes the fp8 indexer keys of slots[j0:j1] into dst (key
// j0+i at dst[i·128:]), the values Key gives, in one kernel call that
// prefetches the records of the slots after them (mla.DecodingKeySource).
// It panics on a cache without fp8 keys or a slot outside the cache.
func (lc *LayerCache) DecodeKeys(dst []float32, slots []int32, j0, j1 int) {
	if !lc.DecodesKeys() {
		panic(fmt.Sprintf("kvcache: DecodeKeys on a cache with %s indexer keys of width %d; only fp8 keys are decoded", lc.idx, lc.indexDim))
	}
	kernels.DecodeRecords(dst, lc.keysFP8, keyLayout, slots, j0, j1, keysAhead)
}

// checkKeys panics if the layer keeps no indexer keys.
func (lc *LayerCache) checkKeys() {
	if lc.indexDim == 0 {
		panic("kvcache: this cache keeps no indexer keys (built with index width 0)")
	}
}

// WriteKey stores an indexer key (the cache's index width) at slot, rounding
// it to the key format. A negative slot is skipped.
func (lc *LayerCache) WriteKey(slot int32, key []float32) {
	if slot < 0 {
		return
	}
	lc.checkKeys()
	lc.checkSlot(slot)
	key = key[:lc.indexDim]
	switch lc.idx {
	case IdxF32:
		copy(lc.keysF32[int(slot)*lc.indexDim:], key)
	case IdxFP8:
		numfmt.EncodeIndexerKey(lc.keysFP8[int(slot)*numfmt.IndexerKeyBytes:], key)
	}
}

// Key returns the dequantized indexer key at slot. For f32 keys it is a view
// of the cache; otherwise it is decoded into scratch (len ≥ the index width).
func (lc *LayerCache) Key(slot int32, scratch []float32) []float32 {
	lc.checkKeys()
	lc.checkSlot(slot)
	if lc.idx == IdxF32 {
		off := int(slot) * lc.indexDim
		return lc.keysF32[off : off+lc.indexDim : off+lc.indexDim]
	}
	numfmt.DecodeIndexerKeyTiles(scratch, lc.keysFP8[int(slot)*numfmt.IndexerKeyBytes:], kernels.DecodeE4M3Scaled)
	return scratch[:lc.indexDim]
}

// CopyBlock copies every layer's rows and indexer keys of block src into
// block dst (all BlockSize slots of this rank's block). It is the
// copy-on-write step of a forked sequence: the blocks are distinct ids the
// caller owns, and no step reads or writes either while it copies.
func (c *Cache) CopyBlock(dst, src int32) error {
	nb := int32(c.layers[0].slots / c.blockSize)
	if src < 0 || src >= nb || dst < 0 || dst >= nb || src == dst {
		return fmt.Errorf("copy KV block %d to %d: ids must be distinct and in [0, %d)", src, dst, nb)
	}
	B := c.blockSize
	for i := range c.layers {
		lc := &c.layers[i]
		copyBlock(lc.rowsF32, int(dst), int(src), B*mla.RowDim)
		copyBlock(lc.rowsBF16, int(dst), int(src), B*mla.RowDim)
		copyBlock(lc.rowsFP8, int(dst), int(src), B*numfmt.DSMLARecordBytes)
		copyBlock(lc.keysF32, int(dst), int(src), B*lc.indexDim)
		copyBlock(lc.keysFP8, int(dst), int(src), B*numfmt.IndexerKeyBytes)
	}
	return nil
}

// copyBlock copies the n-element block src of store over block dst (a nil
// store holds nothing).
func copyBlock[T any](store []T, dst, src, n int) {
	if store == nil || n == 0 {
		return
	}
	copy(store[dst*n:(dst+1)*n], store[src*n:(src+1)*n])
}
