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
