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

// recordsAhead is how many records ahead of the one it decodes
// DecodeE4M3Records prefetches.
const recordsAhead = 16

// DecodeE4M3Records decodes the records of slots[j0:j1] from a flat store
// (an fp8 indexer key cache): the record of slot s is base[s·recBytes:],
// codes e4m3 codes followed by a little-endian float32 scale, and the record
// of slots[j] goes to dst[(j−j0)·codes : (j−j0+1)·codes] with the values
// DecodeE4M3Scaled gives for its codes and scale (the same bits). While it
// decodes, it prefetches the records of the slots up to recordsAhead
// further on, past j1 too, so that consecutive calls over a list of slots
// keep the memory system busy. One call decodes the whole range: callers
// bound it (a gather chunk). It panics on a slot outside the store or sizes
// that do not fit.
func DecodeE4M3Records(dst []float32, base []byte, recBytes, codes int, slots []int32, j0, j1 int) {
	if j0 < 0 || j1 < j0 || j1 > len(slots) || codes < 0 || recBytes < codes+4 || len(dst) < (j1-j0)*codes {
		panic(fmt.Sprintf("kernels: DecodeE4M3Records: slots[%d:%d] of %d, records of %d bytes holding %d codes and a scale, len(dst)=%d (needs %d)",
			j0, j1, len(slots), recBytes, codes, len(dst), (j1-j0)*codes))
	}
	for j, s := range slots[j0:j1] {
		if s < 0 || (int(s)+1)*recBytes > len(base) {
			panic(fmt.Sprintf("kernels: DecodeE4M3Records: slot %d (entry %d) is outside a store of %d records", s, j0+j, len(base)/recBytes))
		}
	}
	n := j1 - j0
	if n == 0 {
		return
	}
	if decodeE4M3RecordsFast(dst, base, recBytes, codes, slots[j0:], n) {
		return
	}
	for j, s := range slots[j0:j1] {
		rec := base[int(s)*recBytes : (int(s)+1)*recBytes]
		scale := math.Float32frombits(binary.LittleEndian.Uint32(rec[codes:]))
		DecodeE4M3Scaled(dst[j*codes:(j+1)*codes], rec[:codes], scale)
	}
}
