package oracle

import (
	"strings"
	"testing"
)

// FuzzOptions checks the dtype-name parser: a name is either accepted and
// normalized to one of the documented dtypes, or refused with an error that
// quotes it.
func FuzzOptions(f *testing.F) {
	for _, s := range []string{"", "f32", "bf16", "fp8_ds_mla", "fp8", "FP8", "auto", "f32 "} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, kv, idx string) {
		for _, cfg := range configs {
			c := cfg.cfg()
			o, err := Options{KVDType: kv, IndexerDType: idx}.normalize(c)
			if err != nil {
				if !strings.Contains(err.Error(), "dtype") {
					t.Fatalf("refusal %q does not say which dtype", err)
				}
				continue
			}
			switch o.KVDType {
			case KVF32, KVBF16, KVFP8DSMLA:
			default:
				t.Fatalf("accepted kv dtype %q normalized to %q", kv, o.KVDType)
			}
			switch o.IndexerDType {
			case IndexerF32, IndexerFP8:
			default:
				t.Fatalf("accepted indexer dtype %q normalized to %q", idx, o.IndexerDType)
			}
			if kv != "" && o.KVDType != kv || idx != "" && o.IndexerDType != idx {
				t.Fatalf("options %q/%q normalized to %q/%q", kv, idx, o.KVDType, o.IndexerDType)
			}
			if o.KVDType == KVFP8DSMLA && c.KVLoraRank != 512 {
				t.Fatalf("fp8_ds_mla accepted for kv_lora_rank %d", c.KVLoraRank)
			}
		}
	})
}
