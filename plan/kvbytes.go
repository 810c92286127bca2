package plan

import (
	"fmt"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/numfmt"
)

// Cache dtypes of the MLA latent row (kv_lora_rank latent + qk_rope_head_dim
// RoPE key per token and layer) and of the indexer key.
const (
	DtypeF32      = "f32"        // 4 B per element
	DtypeBF16     = "bf16"       // 2 B per element
	DtypeFP8DSMLA = "fp8_ds_mla" // e4m3 latent + f32 scale per 128 + bf16 RoPE
	DtypeFP8      = "fp8"        // indexer key: e4m3 + f32 scale per 128
)

// fp8ScaleGroup is the number of e4m3 values that share one f32 scale in the
// fp8_ds_mla latent and in the fp8 indexer key.
const fp8ScaleGroup = numfmt.DSMLATile

// KVCacheDtypes lists the MLA row dtypes MLARowBytes accepts.
var KVCacheDtypes = []string{DtypeBF16, DtypeFP8DSMLA, DtypeF32}

// IndexerCacheDtypes lists the indexer key dtypes IndexerKeyBytes accepts.
var IndexerCacheDtypes = []string{DtypeFP8, DtypeBF16, DtypeF32}

// NormalizeKVDtype maps accepted spellings to the canonical KV dtype name
// ("auto" and "bfloat16" are bf16, "float32" is f32).
func NormalizeKVDtype(s string) string {
	switch s {
	case "auto", "bfloat16", "bf16":
		return DtypeBF16
	case "float32", "fp32", "f32":
		return DtypeF32
	}
	return s
}

// MLARowBytes is the size of one cached MLA row (one token, one layer):
// bf16 2·(L+R) = 1152 B and f32 4·(L+R) = 2304 B for L = 512, R = 64;
// fp8_ds_mla L e4m3 bytes + 4 B per 128 latents + 2·R RoPE bytes = 656 B.
func MLARowBytes(m *config.Model, kvDtype string) (int64, error) {
	return RowBytes(kvDtype, m.KVLoraRank, m.QKRopeHeadDim)
}

// RowBytes is MLARowBytes for a row of latent + rope elements: the one
// definition of an MLA cache row's size, used by the planner and by the
// engine's cache (kvcache.RowBytes).
func RowBytes(kvDtype string, latent, rope int) (int64, error) {
	l, r := int64(latent), int64(rope)
	switch NormalizeKVDtype(kvDtype) {
	case DtypeBF16:
		return 2 * (l + r), nil
	case DtypeF32:
		return 4 * (l + r), nil
	case DtypeFP8DSMLA:
		if l%fp8ScaleGroup != 0 {
			return 0, fmt.Errorf("kv cache dtype fp8_ds_mla needs kv_lora_rank divisible by %d (one f32 scale per %d latents), got %d; use --kv-cache-dtype bf16", fp8ScaleGroup, fp8ScaleGroup, l)
		}
		return l + 4*(l/fp8ScaleGroup) + 2*r, nil
	}
	return 0, fmt.Errorf("kv cache dtype %q is not supported; use one of %v", kvDtype, KVCacheDtypes)
}

// IndexerKeyBytes is the size of one cached indexer key (one token, one
// layer): fp8 d e4m3 bytes + 4 B per 128 = 132 B, bf16 2·d = 256 B, f32
// 4·d = 512 B for d = index_head_dim = 128. A model without an indexer
// (dense MLA) caches no key: 0.
func IndexerKeyBytes(m *config.Model, indexerDtype string) (int64, error) {
	if !m.Sparse() {
		return 0, nil
	}
	return KeyBytes(indexerDtype, m.IndexHeadDim)
}

// KeyBytes is IndexerKeyBytes for a key of dim elements: the one definition
// of an indexer key's size, used by the planner and by the engine's cache
// (kvcache.KeyBytes).
func KeyBytes(indexerDtype string, dim int) (int64, error) {
	d := int64(dim)
	switch NormalizeKVDtype(indexerDtype) {
	case DtypeFP8:
		if d%fp8ScaleGroup != 0 {
			return 0, fmt.Errorf("indexer cache dtype fp8 needs index_head_dim divisible by %d, got %d; use bf16 or f32", fp8ScaleGroup, d)
		}
		return d + 4*(d/fp8ScaleGroup), nil
	case DtypeBF16:
		return 2 * d, nil
	case DtypeF32:
		return 4 * d, nil
	}
	return 0, fmt.Errorf("indexer cache dtype %q is not supported; use one of %v", indexerDtype, IndexerCacheDtypes)
}

// KVSlotBytes is what one cached token costs the rank that owns it, over
// `layers` layers: layers × (MLA row + indexer key). Under DCP a token is
// cached on exactly one rank of its DCP group.
func KVSlotBytes(m *config.Model, kvDtype, indexerDtype string, layers int) (int64, error) {
	if layers <= 0 {
		return 0, fmt.Errorf("kv cache layers must be > 0, got %d", layers)
	}
	row, err := MLARowBytes(m, kvDtype)
	if err != nil {
		return 0, err
	}
	key, err := IndexerKeyBytes(m, indexerDtype)
	if err != nil {
		return 0, err
	}
	return int64(layers) * (row + key), nil
}

// KVBytesPerToken is the KV memory one logical token of context costs each
// rank on average: layers × (MLA row + indexer key) / DCP.
func KVBytesPerToken(m *config.Model, kvDtype, indexerDtype string, layers, dcp int) (float64, error) {
	if dcp < 1 {
		return 0, fmt.Errorf("decode context parallel size must be ≥ 1, got %d", dcp)
	}
	slot, err := KVSlotBytes(m, kvDtype, indexerDtype, layers)
	if err != nil {
		return 0, err
	}
	return float64(slot) / float64(dcp), nil
}

// CacheLayers is the number of layers that hold a KV cache: the decoder
// layers plus, when MTP speculative decoding runs, the next-n predict layers.
func CacheLayers(m *config.Model, speculative bool) int {
	if speculative {
		return m.NumLayers + m.NumNextNPredict
	}
	return m.NumLayers
}
