package kernels

import (
	"fmt"

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
