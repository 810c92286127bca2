package numfmt

import (
	"encoding/binary"
	"fmt"
	"math"
)

// fp8_ds_mla record layout (DeepSeek-V3.2 sparse MLA KV cache, one token).
const (
	// DSMLARecordBytes is the size of one fp8_ds_mla token record.
	DSMLARecordBytes = 656
	// DSMLALatentDim is the number of e4m3 latent values (c_kv) in a record.
	DSMLALatentDim = 512
	// DSMLARopeDim is the number of bf16 RoPE values (k_pe) in a record.
	DSMLARopeDim = 64
	// DSMLATile is the number of latent values sharing one float32 scale.
	DSMLATile = 128

	dsmlaTiles       = DSMLALatentDim / DSMLATile
	dsmlaScaleOffset = DSMLALatentDim                  // 4 little-endian float32 scales
	dsmlaRopeOffset  = dsmlaScaleOffset + 4*dsmlaTiles // 64 little-endian bf16 values
	dsmlaRowDim      = DSMLALatentDim + DSMLARopeDim   // 576 float32 per row
	dsmlaScaleFloor  = float32(1e-4)                   // floor of amax/448
	e4m3Max          = float32(448)                    // largest finite e4m3 value
	indexerAmaxFloor = float32(1e-4)                   // floor of amax
)

// fp8 indexer key record layout (one token of the lightning indexer cache).
const (
	// IndexerKeyBytes is the size of one fp8 indexer key record.
	IndexerKeyBytes = 132
	// IndexerKeyDim is the number of e4m3 key values in a record.
	IndexerKeyDim = 128
)

// DSMLAScale returns the power-of-two scale of one fp8_ds_mla tile whose
// largest finite magnitude is amax: 2^ceil(log2(max(amax/448, 1e-4))).
func DSMLAScale(amax float32) float32 {
	return pow2Ceil(max(amax/e4m3Max, dsmlaScaleFloor))
}

// IndexerKeyScale returns the power-of-two ("ue8m0") scale of one indexer key
// whose largest finite magnitude is amax: 2^ceil(log2(max(amax, 1e-4)/448)).
func IndexerKeyScale(amax float32) float32 {
	return pow2Ceil(max(amax, indexerAmaxFloor) / e4m3Max)
}

// quantizeTile encodes xs/s into e4m3 codes. s is a
// power of two, so multiplying by 1/s equals dividing by s exactly.
// A tile whose largest magnitude is close to math.MaxFloat32 gets the scale
// 2^120 (amax/448 < 2^120 for every finite amax). There, e4m3 values of 256
// and above would decode to 2^128 = +Inf, so such tiles are clamped to ±240,
// the largest e4m3 value whose product with 2^120 is finite.
const (
	overflowScale = math.MaxFloat32 / 448
	overflowClamp = float32(240)
)

func quantizeTile(codes []byte, xs []float32, s float32) {
	inv := 1 / s
	codes = codes[:len(xs)]
	if s > overflowScale {
		for i, x := range xs {
			codes[i] = E4M3FromF32(min(max(x*inv, -overflowClamp), overflowClamp))
		}
		return
	}
	for i, x := range xs {
		codes[i] = E4M3FromF32(x * inv)
	}
}

// roundTile replaces every x in xs by decode(encode(x/s))·s, exactly as
// quantizeTile followed by a decode.
func roundTile(xs []float32, s float32) {
	inv := 1 / s
	if s > overflowScale {
		for i, x := range xs {
			xs[i] = e4m3Table[E4M3FromF32(min(max(x*inv, -overflowClamp), overflowClamp))] * s
		}
		return
	}
	for i, x := range xs {
		xs[i] = e4m3Table[E4M3FromF32(x*inv)] * s
	}
}

func checkLen(what string, got, want int) {
	if got < want {
		panic(fmt.Sprintf("numfmt: %s has %d elements, need at least %d", what, got, want))
	}
}

// EncodeDSMLA stores a 576-value row (512 latent values, then 64 RoPE
// values) into a 656-byte fp8_ds_mla record: per 128-value tile a
// power-of-two scale s = 2^ceil(log2(max(amax/448, 1e-4))) and the e4m3
// codes of x/s; the RoPE values as bf16. amax ignores NaN and ±Inf; NaN is
// stored as NaN and ±Inf saturate to ±448·s. Decoding never overflows: in
// a tile with magnitudes above 240·2^120 ≈ 3.19e38 values clamp to ±240·2^120. It panics if dst is shorter than
// DSMLARecordBytes or row shorter than 576.
func EncodeDSMLA(dst []byte, row []float32) {
	checkLen("fp8_ds_mla record", len(dst), DSMLARecordBytes)
	checkLen("fp8_ds_mla row", len(row), dsmlaRowDim)
	for j := range dsmlaTiles {
		tile := row[j*DSMLATile : (j+1)*DSMLATile]
		s := DSMLAScale(absMaxFinite(tile))
		quantizeTile(dst[j*DSMLATile:(j+1)*DSMLATile], tile, s)
		binary.LittleEndian.PutUint32(dst[dsmlaScaleOffset+4*j:], math.Float32bits(s))
	}
	rope := row[DSMLALatentDim:dsmlaRowDim]
	for i, f := range rope {
		binary.LittleEndian.PutUint16(dst[dsmlaRopeOffset+2*i:], BF16FromF32(f))
	}
}

// DecodeDSMLA loads a 656-byte fp8_ds_mla record into 576 float32 values:
// latent value d is e4m3(code d)·scale(d/128), exact for power-of-two
// scales; the RoPE values are the stored bf16 values. It panics if dst is
// shorter than 576 or rec shorter than DSMLARecordBytes.
func DecodeDSMLA(dst []float32, rec []byte) {
	DecodeDSMLATiles(dst, rec, decodeTile, widenRope)
}

// widenRope is the scalar rope decode: little-endian bf16 widened.
func widenRope(out []float32, src []byte) {
	for i := range out {
		out[i] = F32FromBF16(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// decodeTile is the scalar tile decode: e4m3 codes times the tile scale.
func decodeTile(out []float32, codes []byte, s float32) {
	for i, c := range codes {
		out[i] = e4m3Table[c] * s
	}
}

// DecodeDSMLATiles is DecodeDSMLA with the latent tiles widened by tile, which
// must write e4m3(codes[i])·scale to out[i] exactly as F32FromE4M3(codes[i])·scale,
// and the rope values by rope, which must write the little-endian bf16 at
// src[2i:2i+2] to out[i] exactly as F32FromBF16 (vectorized decoders, for
// example). The record layout stays here.
func DecodeDSMLATiles(dst []float32, rec []byte, tile func(out []float32, codes []byte, scale float32), rope func(out []float32, src []byte)) {
	checkLen("fp8_ds_mla row", len(dst), dsmlaRowDim)
	checkLen("fp8_ds_mla record", len(rec), DSMLARecordBytes)
	for j := range dsmlaTiles {
		s := math.Float32frombits(binary.LittleEndian.Uint32(rec[dsmlaScaleOffset+4*j:]))
		tile(dst[j*DSMLATile:(j+1)*DSMLATile], rec[j*DSMLATile:(j+1)*DSMLATile], s)
	}
	ropeDst := dst[DSMLALatentDim:dsmlaRowDim]
	rope(ropeDst, rec[dsmlaRopeOffset:dsmlaRopeOffset+2*len(ropeDst)])
}

// RoundDSMLA replaces row[:576] in place by what a store into an fp8_ds_mla
// record and a load back give, without materialising the record. It panics
// if row is shorter than 576.
func RoundDSMLA(row []float32) {
	checkLen("fp8_ds_mla row", len(row), dsmlaRowDim)
	for j := range dsmlaTiles {
		tile := row[j*DSMLATile : (j+1)*DSMLATile]
		roundTile(tile, DSMLAScale(absMaxFinite(tile)))
	}
	rope := row[DSMLALatentDim:dsmlaRowDim]
	for i, f := range rope {
		rope[i] = RoundBF16(f)
	}
}

// EncodeIndexerKey stores a 128-value indexer key into a 132-byte record:
// the e4m3 codes of k/s followed by the little-endian float32 scale
// s = 2^ceil(log2(max(amax, 1e-4)/448)). amax ignores NaN and ±Inf. It
// panics if dst is shorter than IndexerKeyBytes or k shorter than
// IndexerKeyDim.
func EncodeIndexerKey(dst []byte, k []float32) {
	checkLen("indexer key record", len(dst), IndexerKeyBytes)
	checkLen("indexer key", len(k), IndexerKeyDim)
	k = k[:IndexerKeyDim]
	s := IndexerKeyScale(absMaxFinite(k))
	quantizeTile(dst[:IndexerKeyDim], k, s)
	binary.LittleEndian.PutUint32(dst[IndexerKeyDim:], math.Float32bits(s))
}

// DecodeIndexerKey loads a 132-byte indexer key record into 128 float32
// values (code·scale). It panics if dst is shorter than IndexerKeyDim or rec
// shorter than IndexerKeyBytes.
func DecodeIndexerKey(dst []float32, rec []byte) {
	DecodeIndexerKeyTiles(dst, rec, decodeTile)
}

// DecodeIndexerKeyTiles is DecodeIndexerKey with the codes widened by tile
// (see DecodeDSMLATiles); the record layout stays here.
func DecodeIndexerKeyTiles(dst []float32, rec []byte, tile func(out []float32, codes []byte, scale float32)) {
	checkLen("indexer key", len(dst), IndexerKeyDim)
	checkLen("indexer key record", len(rec), IndexerKeyBytes)
	s := math.Float32frombits(binary.LittleEndian.Uint32(rec[IndexerKeyDim:]))
	tile(dst[:IndexerKeyDim], rec[:IndexerKeyDim], s)
}

// RoundIndexerKey replaces k[:128] in place by what a store into an indexer
// key record and a load back give. It panics if k is shorter than
// IndexerKeyDim.
func RoundIndexerKey(k []float32) {
	checkLen("indexer key", len(k), IndexerKeyDim)
	k = k[:IndexerKeyDim]
	roundTile(k, IndexerKeyScale(absMaxFinite(k)))
}
