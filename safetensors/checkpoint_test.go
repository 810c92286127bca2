package safetensors

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// shardTensors is a mix of sizes: 40-byte F32 tensors, one 400-byte tensor
// larger than the shard limit used below, and small BF16/U8 tensors.
func shardTensors() []Tensor {
	var ts []Tensor
	for i := range 6 {
		v := make([]float32, 10)
		for j := range v {
			v[j] = float32(i*100 + j)
		}
		ts = append(ts, FromF32(fmt.Sprintf("layers.%d.w", i), []int{2, 5}, v))
	}
	ts = append(ts, FromF32("big", []int{100}, make([]float32, 100)))
	ts = append(ts, FromBF16("norm", []int{3}, []uint16{0x3F80, 0x4000, 0x4040}))
	ts = append(ts, FromU8("codes", []int{5}, []byte{1, 2, 3, 4, 5}))
	return ts
}

func TestShardedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	in := shardTensors()
	meta := map[string]string{"format": "pt"}
	const limit = 100
	if err := WriteSharded(dir, in, limit, meta); err != nil {
		t.Fatal(err)
	}

	raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	var total int64
	shardBytes := map[string]int64{}
	shardCount := map[string]int{}
	for _, tt := range in {
		total += int64(len(tt.Data))
		shardBytes[idx.WeightMap[tt.Name]] += int64(len(tt.Data))
		shardCount[idx.WeightMap[tt.Name]]++
	}
	if idx.Metadata["total_size"] != total {
		t.Errorf("total_size %d, want %d", idx.Metadata["total_size"], total)
	}
	if len(idx.WeightMap) != len(in) {
		t.Errorf("weight_map has %d entries, want %d", len(idx.WeightMap), len(in))
	}
	for shard, n := range shardBytes {
		if n > limit && shardCount[shard] > 1 {
			t.Errorf("shard %s holds %d bytes in %d tensors, over the %d limit", shard, n, shardCount[shard], limit)
		}
	}
	// Greedy packing in name order with a 100-byte limit:
	// big(400) | codes(5) layers.0(40) layers.1(40) | layers.2 layers.3 |
	// layers.4 layers.5 norm(6) → 4 shards.
	wantShard := map[string]int{"big": 1, "codes": 2, "layers.0.w": 2, "layers.1.w": 2,
		"layers.2.w": 3, "layers.3.w": 3, "layers.4.w": 4, "layers.5.w": 4, "norm": 4}
	for name, k := range wantShard {
		if got, want := idx.WeightMap[name], ShardName(k, 4); got != want {
			t.Errorf("%s is in %s, want %s", name, got, want)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	var bases []string
	for _, f := range files {
		bases = append(bases, filepath.Base(f))
	}
	var want []string
	for k := 1; k <= 4; k++ {
		want = append(want, ShardName(k, 4))
	}
	if diff := cmp.Diff(want, bases); diff != "" {
		t.Errorf("shard files (-want +got):\n%s", diff)
	}
	if want := "model-00002-of-00005.safetensors"; ShardName(2, 5) != want {
		t.Errorf("ShardName(2, 5) = %q, want %q", ShardName(2, 5), want)
	}

	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var names []string
	for _, tt := range in {
		names = append(names, tt.Name)
	}
	slices.Sort(names)
	if diff := cmp.Diff(names, c.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	for _, tt := range in {
		got, err := c.Tensor(tt.Name)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.Name, diff)
		}
	}
	shard, err := Open(filepath.Join(dir, ShardName(1, 4)))
	if err != nil {
		t.Fatal(err)
	}
	defer shard.Close()
	if diff := cmp.Diff(meta, shard.Metadata()); diff != "" {
		t.Errorf("shard metadata (-want +got):\n%s", diff)
	}
	if _, err := c.Tensor("missing"); err == nil || !strings.Contains(err.Error(), `"missing"`) || !strings.Contains(err.Error(), dir) {
		t.Errorf("missing tensor error %v must name the checkpoint and the tensor", err)
	}
}

func TestOpenDirFallbacks(t *testing.T) {
	t.Run("single file", func(t *testing.T) {
		dir := t.TempDir()
		if err := Write(filepath.Join(dir, SingleFile), shardTensors()[:2], nil); err != nil {
			t.Fatal(err)
		}
		// A stray file next to model.safetensors is not part of the checkpoint.
		if err := Write(filepath.Join(dir, "extra.safetensors"), shardTensors()[2:3], nil); err != nil {
			t.Fatal(err)
		}
		c, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if diff := cmp.Diff([]string{"layers.0.w", "layers.1.w"}, c.Names()); diff != "" {
			t.Errorf("Names (-want +got):\n%s", diff)
		}
	})
	t.Run("all safetensors files", func(t *testing.T) {
		dir := t.TempDir()
		ts := shardTensors()
		if err := Write(filepath.Join(dir, "a.safetensors"), ts[:3], nil); err != nil {
			t.Fatal(err)
		}
		if err := Write(filepath.Join(dir, "b.safetensors"), ts[3:], nil); err != nil {
			t.Fatal(err)
		}
		c, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := len(c.Names()); got != len(ts) {
			t.Errorf("%d names, want %d", got, len(ts))
		}
		big, err := c.Tensor("big")
		if err != nil || big.Elems() != 100 {
			t.Errorf("Tensor(big) = %v elems, %v", big.Elems(), err)
		}
	})
}

func TestOpenDirRefusals(t *testing.T) {
	writeIndex := func(t *testing.T, dir string, weightMap map[string]string) {
		t.Helper()
		js, _ := json.Marshal(map[string]any{"weight_map": weightMap})
		if err := os.WriteFile(filepath.Join(dir, IndexFile), js, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	one := func(t *testing.T, dir, name string, ts []Tensor) {
		t.Helper()
		if err := Write(filepath.Join(dir, name), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"empty dir", func(t *testing.T, dir string) {}, "holds no checkpoint: no model.safetensors.index.json, no model.safetensors, no *.safetensors files"},
		{"index lists an absent tensor", func(t *testing.T, dir string) {
			one(t, dir, "s1.safetensors", shardTensors()[:1])
			writeIndex(t, dir, map[string]string{"layers.0.w": "s1.safetensors", "layers.9.w": "s1.safetensors"})
		}, `lists tensor "layers.9.w" in s1.safetensors, but that shard does not hold it`},
		{"index names a missing shard", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"a": "gone.safetensors"})
		}, "gone.safetensors: no such file"},
		{"index escapes the directory", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"a": "../x.safetensors"})
		}, `shard "../x.safetensors" must be a file name inside`},
		{"index is not JSON", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte("{"), 0o644)
		}, "model.safetensors.index.json: unexpected end of JSON input"},
		{"index without tensors", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{})
		}, "weight_map lists no tensors"},
		{"same tensor in two files", func(t *testing.T, dir string) {
			one(t, dir, "a.safetensors", shardTensors()[:2])
			one(t, dir, "b.safetensors", shardTensors()[1:3])
		}, `tensor "layers.1.w" is in both`},
		{"corrupt shard", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "a.safetensors"), fileImage(`{"a":`+entry("F32", "[2]", 0, 4)+`}`, 4), 0o644)
		}, "span 4 bytes, but F32 shape [2] needs 8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			c, err := OpenDir(dir)
			if err == nil {
				c.Close()
				t.Fatalf("OpenDir accepted the directory, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestWriteShardedRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSharded(dir, shardTensors(), 0, nil); err == nil || !strings.Contains(err.Error(), "maxShardBytes must be positive, got 0") {
		t.Errorf("limit 0: %v", err)
	}
	if err := WriteSharded(dir, nil, 100, nil); err == nil || !strings.Contains(err.Error(), "no tensors") {
		t.Errorf("no tensors: %v", err)
	}
	dup := append(shardTensors(), FromU8("big", []int{1}, []byte{1}))
	if err := WriteSharded(dir, dup, 100, nil); err == nil || !strings.Contains(err.Error(), `"big" appears twice`) {
		t.Errorf("duplicate: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused writes left files: %v", entries)
	}
}
