// Package numfmt holds the storage number formats of the engine and their
// exact conversions to and from float32:
//
//   - bfloat16 (weights, KV cache rows, RoPE parts of fp8 records),
//   - float8_e4m3fn (OCP FP8, bias 7, no infinities, max 448, NaN = 0x7F/0xFF),
//   - the fp8_ds_mla KV cache record (656 bytes per token: 512 e4m3 latent
//     values, 4 float32 power-of-two scales, 64 bf16 RoPE values),
//   - the fp8 indexer key record (132 bytes per token: 128 e4m3 values and one
//     float32 power-of-two scale),
//   - block-scaled fp8 weights, as DeepSeek-V3 and GLM-5 checkpoints store
//     them: e4m3 codes and one float32 scale (weight_scale_inv, multiplied
//     despite its name) per 128×128 block; QuantizeE4M3Blocks makes them
//     with scale = amax/448 (at least MinWeightScale, which an all-zero
//     block gets) and refuses NaN and infinite weights.
//
// Every conversion is deterministic and bit-exact with respect to its
// definition: float32 → bf16 and float32 → e4m3 round to nearest, ties to
// even; e4m3 encoding saturates to ±448 (the value is clamped before
// rounding, as DeepSeek's act_quant and CUDA's SATFINITE conversion do), so
// no finite input and no infinity ever becomes NaN. A NaN input keeps its
// sign: +NaN encodes to 0x7F and −NaN to 0xFF; both decode to NaN.
//
// Record scales are powers of two ("ue8m0"), so dequantisation (code × scale)
// is exact in float32 and a store followed by a load (Round*) is idempotent.
// Weight block scales are not: a weight's value is defined as code × scale
// rounded once to float32 (DequantizeE4M3Blocks), and every consumer
// (kernels.Matrix, the oracle) must use exactly that product.
//
// The package must never allocate in a conversion, never depend on another
// package of the engine, and never change a format's byte layout: caches,
// checkpoints and other ranks read these bytes.
package numfmt
