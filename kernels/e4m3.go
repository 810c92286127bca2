package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cpmla/cpmla/numfmt"
)

// DecodeE4M3Scaled writes e4m3(src[i])·scale to dst[i]: the latent tile of an
// fp8_ds_mla cache row (or an fp8 indexer key) widened in one pass. The
// values equal numfmt.F32FromE4M3(src[i])·scale exactly (one float32
// rounding of the product; NaN codes give NaN), on every implementation.
func DecodeE4M3Scaled(dst []float32, src []byte, scale float32) {
	if len(dst) < len(src) {
		panic(fmt.Sprintf("kernels: DecodeE4M3Scaled: len(dst)=%d < len(src)=%d", len(dst), len(src)))
	}
	i := decodeE4M3Fast(dst, src, scale)
	for ; i < len(src); i++ {
		dst[i] = numfmt.F32FromE4M3(src[i]) * scale
	}
}

// WidenBF16 writes to dst[i] the bf16 value stored little-endian at
// src[2i:2i+2] (the rope part of an fp8_ds_mla record), widened exactly to
// float32 — numfmt.F32FromBF16 of the half word, NaN payloads included — on
// every implementation. It panics if src has an odd length or dst is
// shorter than len(src)/2.
func WidenBF16(dst []float32, src []byte) {
	if len(src)%2 != 0 || len(dst) < len(src)/2 {
		panic(fmt.Sprintf("kernels: WidenBF16: %d bytes need an even length and len(dst) ≥ %d; got len(dst)=%d", len(src), len(src)/2, len(dst)))
	}
	i := widenBF16Fast(dst, src)
	for ; 2*i < len(src); i++ {
		dst[i] = numfmt.F32FromBF16(uint16(src[2*i]) | uint16(src[2*i+1])<<8)
	}
}

// RecordLayout is the layout of one record of a quantized cache: Tiles
// tiles of TileCodes e4m3 codes, then Tiles little-endian float32 scales
// (one per tile), then Rope little-endian bf16 values, in a record of Bytes
// bytes. An fp8 indexer key is {132, 1, 128, 0}; an fp8_ds_mla row is
// {656, 4, 128, 64}.
type RecordLayout struct{ Bytes, Tiles, TileCodes, Rope int }

// Values is the number of float32 values one record decodes to.
func (r RecordLayout) Values() int { return r.Tiles*r.TileCodes + r.Rope }

// DecodeRecords decodes the records of slots[j0:j1] from a flat store whose
// record of slot s is base[s·layout.Bytes:]: the record of slots[j] goes to
// dst[(j−j0)·V : (j−j0+1)·V] (V = layout.Values()), tile t as
// DecodeE4M3Scaled gives its codes at scale t and then the bf16 values as
// WidenBF16 gives them — the same bits. While it decodes, it prefetches the
// records of the slots up to ahead entries further on, past j1 too, so that
// consecutive calls over one list of slots keep the memory system busy. One
// call decodes the whole range: callers bound it (a block of rows, a chunk
// of keys). It panics on a slot outside the store or a layout that does not
// fit its record.
func DecodeRecords(dst []float32, base []byte, layout RecordLayout, slots []int32, j0, j1, ahead int) {
	lt := layout
	v := lt.Values()
	if j0 < 0 || j1 < j0 || j1 > len(slots) || lt.Tiles < 0 || lt.TileCodes < 0 || lt.Rope < 0 || ahead < 0 ||
		lt.Bytes < lt.Tiles*(lt.TileCodes+4)+2*lt.Rope || len(dst) < (j1-j0)*v {
		panic(fmt.Sprintf("kernels: DecodeRecords: slots[%d:%d] of %d, %d-byte records holding %d tiles of %d codes, their scales and %d bf16 values, len(dst)=%d (needs %d), %d ahead",
			j0, j1, len(slots), lt.Bytes, lt.Tiles, lt.TileCodes, lt.Rope, len(dst), (j1-j0)*v, ahead))
	}
	for j, s := range slots[j0:j1] {
		if s < 0 || (int(s)+1)*lt.Bytes > len(base) {
			panic(fmt.Sprintf("kernels: DecodeRecords: slot %d (entry %d) is outside a store of %d records", s, j0+j, len(base)/lt.Bytes))
		}
	}
	n := j1 - j0
	if n == 0 || v == 0 {
		return
	}
	if decodeRecordsFast(dst, base, lt, slots[j0:], n, ahead) {
		return
	}
	codes := lt.Tiles * lt.TileCodes
	for j, s := range slots[j0:j1] {
		rec := base[int(s)*lt.Bytes : (int(s)+1)*lt.Bytes]
		out := dst[j*v : (j+1)*v]
		for t := range lt.Tiles {
			scale := math.Float32frombits(binary.LittleEndian.Uint32(rec[codes+4*t:]))
			DecodeE4M3Scaled(out[t*lt.TileCodes:(t+1)*lt.TileCodes], rec[t*lt.TileCodes:(t+1)*lt.TileCodes], scale)
		}
		rope := codes + 4*lt.Tiles
		WidenBF16(out[codes:v], rec[rope:rope+2*lt.Rope])
	}
}
