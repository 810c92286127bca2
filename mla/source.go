package mla

import "fmt"

// Widths of one MLA cache row.
const (
	LatentDim = 512                 // kv_lora_rank: normalized latent c_kv (= the value)
	RopeDim   = 64                  // qk_rope_head_dim: RoPE'd key k_pe shared by all heads
	RowDim    = LatentDim + RopeDim // one cache row: [c_kv | k_pe]
)

// KVSource yields cache rows (RowDim float32: latent | rope), dequantized, by
// slot. scratch has len ≥ RowDim and may back the result; the result may also
// be a view of the source's own storage, so callers must not modify it. The
// result is valid until the next call with the same scratch.
type KVSource interface {
	Row(slot int32, scratch []float32) []float32
}

// DenseKV is an in-memory [n, RowDim] row-major buffer whose slot is the row
// index. It implements KVSource without copying. Converting it to a KVSource
// boxes the slice header (one small allocation), so convert once, outside
// per-step loops.
type DenseKV []float32

// Row returns row slot of the buffer (a view; scratch is unused).
func (kv DenseKV) Row(slot int32, _ []float32) []float32 {
	off := int(slot) * RowDim
	if slot < 0 || off+RowDim > len(kv) {
		panic(fmt.Sprintf("mla: slot %d outside a dense KV buffer of %d rows", slot, len(kv)/RowDim))
	}
	return kv[off : off+RowDim : off+RowDim]
}

// KeySource yields lightning-indexer keys by slot. scratch has len ≥ the key
// width and may back the result; as for KVSource the result may be a view and
// must not be modified.
type KeySource interface {
	Key(slot int32, scratch []float32) []float32
}

// DenseKeys is an in-memory [n, Dim] row-major key buffer whose slot is the
// row index. It implements KeySource without copying; as with DenseKV,
// convert it to a KeySource once, outside per-step loops.
type DenseKeys struct {
	Dim  int
	Data []float32
}

// Key returns key slot of the buffer (a view; scratch is unused).
func (k DenseKeys) Key(slot int32, _ []float32) []float32 {
	off := int(slot) * k.Dim
	if slot < 0 || off+k.Dim > len(k.Data) {
		panic(fmt.Sprintf("mla: slot %d outside a dense key buffer of %d keys", slot, len(k.Data)/max(k.Dim, 1)))
	}
	return k.Data[off : off+k.Dim : off+k.Dim]
}
