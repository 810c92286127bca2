package plan

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/config"
)

func mustModel(t testing.TB, name string) *config.Model {
	t.Helper()
	m, err := config.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The row sizes below are the documented layouts: 576 = 512 latent + 64 RoPE
// values; fp8_ds_mla = 512 e4m3 B + 4 f32 scales (16 B) + 64 bf16 (128 B);
// the fp8 indexer key = 128 e4m3 B + one f32 scale.
func TestKVRowBytes(t *testing.T) {
	m := mustModel(t, "glm-5")
	rows := []struct {
		dtype string
		want  int64
	}{
		{"bf16", 576 * 2},
		{"auto", 576 * 2},
		{"f32", 576 * 4},
		{"fp8_ds_mla", 512 + 4*4 + 64*2},
	}
	for _, r := range rows {
		got, err := MLARowBytes(m, r.dtype)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r.want, got); diff != "" {
			t.Errorf("MLARowBytes(%s) (-want +got):\n%s", r.dtype, diff)
		}
	}
	keys := []struct {
		dtype string
		want  int64
	}{{"fp8", 128 + 4}, {"bf16", 128 * 2}, {"f32", 128 * 4}}
	for _, k := range keys {
		got, err := IndexerKeyBytes(m, k.dtype)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(k.want, got); diff != "" {
			t.Errorf("IndexerKeyBytes(%s) (-want +got):\n%s", k.dtype, diff)
		}
	}
	// The documented constants, so a layout change cannot pass silently.
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"bf16 row", mustBytes(MLARowBytes(m, "bf16")), 1152},
		{"fp8_ds_mla row", mustBytes(MLARowBytes(m, "fp8_ds_mla")), 656},
		{"f32 row", mustBytes(MLARowBytes(m, "f32")), 2304},
		{"fp8 key", mustBytes(IndexerKeyBytes(m, "fp8")), 132},
		{"f32 key", mustBytes(IndexerKeyBytes(m, "f32")), 512},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d B, want %d B", c.name, c.got, c.want)
		}
	}
}

func mustBytes(v int64, err error) int64 {
	if err != nil {
		panic(err)
	}
	return v
}

func TestKVSlotAndPerTokenBytes(t *testing.T) {
	glm := mustModel(t, "glm-5")
	dense := mustModel(t, "glm-5")
	dense.IndexTopK, dense.IndexNHeads = 0, 0
	tests := []struct {
		name       string
		m          *config.Model
		kv, idx    string
		layers     int
		dcp        int
		wantSlot   int64
		wantPerTok float64
	}{
		{"glm-5 fp8_ds_mla+fp8 DCP4", glm, "fp8_ds_mla", "fp8", 78, 4, 78 * (656 + 132), 78 * (656 + 132) / 4.0},
		{"glm-5 bf16+fp8 DCP1", glm, "bf16", "fp8", 78, 1, 78 * (1152 + 132), 78 * (1152 + 132)},
		{"glm-5 with MTP layer, DCP3", glm, "bf16", "fp8", 79, 3, 79 * (1152 + 132), 79 * (1152 + 132) / 3.0},
		{"dense model caches no indexer key", dense, "f32", "fp8", 2, 2, 2 * 2304, 2304},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot, err := KVSlotBytes(tt.m, tt.kv, tt.idx, tt.layers)
			if err != nil {
				t.Fatal(err)
			}
			per, err := KVBytesPerToken(tt.m, tt.kv, tt.idx, tt.layers, tt.dcp)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]any{tt.wantSlot, tt.wantPerTok}, []any{slot, per}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if got := CacheLayers(glm, true); got != glm.NumLayers+glm.NumNextNPredict {
		t.Errorf("CacheLayers(speculative) = %d, want %d", got, glm.NumLayers+glm.NumNextNPredict)
	}
}

func TestKVBytesRefusals(t *testing.T) {
	m := mustModel(t, "glm-5")
	odd := mustModel(t, "glm-5")
	odd.KVLoraRank, odd.IndexHeadDim = 500, 100
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"unknown kv dtype", second(MLARowBytes(m, "int4")), "use one of"},
		{"fp8_ds_mla needs 128-divisible latent", second(MLARowBytes(odd, "fp8_ds_mla")), "use --kv-cache-dtype bf16"},
		{"unknown indexer dtype", second(IndexerKeyBytes(m, "fp4")), "use one of"},
		{"fp8 key needs 128-divisible dim", second(IndexerKeyBytes(odd, "fp8")), "use bf16 or f32"},
		{"zero layers", second(KVSlotBytes(m, "bf16", "fp8", 0)), "layers must be > 0"},
		{"zero dcp", second(KVBytesPerToken(m, "bf16", "fp8", 1, 0)), "must be ≥ 1"},
	}
	for _, tt := range tests {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, tt.err, tt.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }
