package engine

import (
	"strings"
	"testing"

	"github.com/cpmla/cpmla/plan"
)

// Without --kv-cache-memory the cache gets DefaultKVCacheMemory (rounded
// down to whole blocks, at least one max-model-len request) whatever the
// host leaves, and what the budget leaves where that is less; the start-up
// table says which.
func TestSizeKVDefaultIsAFixedSpace(t *testing.T) {
	cfg := fakeModel(t)
	o := Options{MaxNumBatchedTokens: 32, MaxNumSeqs: 4, MaxModelLen: 64, BlockSize: 16}.WithDefaults(cfg)
	slot, err := o.SlotBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc := o.scheduler(1)
	lb := int64(sc.LocalBlockSize())
	defTokens := DefaultKVCacheMemory / slot / lb * lb
	for _, tc := range []struct {
		name       string
		limit      int64
		kv         int64
		wantTokens func(budget int64) int64
		wantCapped bool
		wantNote   string
	}{
		{name: "large host", limit: 64 << 30, wantTokens: func(int64) int64 { return defTokens }, wantNote: "(the default KV space " + plan.FormatBytes(DefaultKVCacheMemory) + ")"},
		{name: "small host", limit: 1 << 30, wantTokens: func(b int64) int64 { return b }, wantCapped: true, wantNote: "(the KV budget, less than the default " + plan.FormatBytes(DefaultKVCacheMemory) + ")"},
		{name: "explicit", limit: 64 << 30, kv: 8 << 30, wantTokens: func(int64) int64 { return (8 << 30) / slot / lb * lb }, wantNote: "(--kv-cache-memory 8589934592)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := o
			o.MemoryLimit, o.KVCacheMemory = tc.limit, tc.kv
			mem := &Memory{WeightBytes: 100 << 20}
			if err := sizeKV(o, sc, slot, mem); err != nil {
				t.Fatal(err)
			}
			want := tc.wantTokens(mem.Result.KVTokensPerRank)
			if got := int64(mem.NumBlocks) * lb; got != want {
				t.Errorf("%d KV tokens, want %d (budget %d, default %d)", got, want, mem.Result.KVTokensPerRank, defTokens)
			}
			if mem.KVDefaultCapped != tc.wantCapped {
				t.Errorf("KVDefaultCapped = %v, want %v", mem.KVDefaultCapped, tc.wantCapped)
			}
			if mem.KVBytes != int64(mem.NumBlocks)*lb*slot || (tc.kv == 0 && mem.KVBytes > DefaultKVCacheMemory) {
				t.Errorf("KV bytes %d for %d blocks of %d × %d B", mem.KVBytes, mem.NumBlocks, lb, slot)
			}
			var sb strings.Builder
			if err := mem.WriteTable(&sb); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(sb.String(), tc.wantNote) {
				t.Errorf("start-up table lacks %q:\n%s", tc.wantNote, sb.String())
			}
		})
	}
	// One max-model-len request is the floor of the default, even when it
	// is more than DefaultKVCacheMemory.
	long := o
	long.MemoryLimit = 1 << 40
	long.MaxModelLen = int(2*DefaultKVCacheMemory/slot) + 16
	lsc := long.scheduler(1)
	mem := &Memory{WeightBytes: 100 << 20}
	if err := sizeKV(long, lsc, slot, mem); err != nil {
		t.Fatal(err)
	}
	if want := lsc.BlocksFor(long.MaxModelLen); mem.NumBlocks != want {
		t.Errorf("%d blocks for max-model-len %d, want the %d of one request", mem.NumBlocks, long.MaxModelLen, want)
	}
}
