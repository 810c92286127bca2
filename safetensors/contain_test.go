package safetensors

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// writeIndex writes an index mapping tensor "w" to shard.
func writeIndex(t *testing.T, dir, shard string) {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": map[string]string{"w": shard}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// oneTensor writes a valid safetensors file holding tensor "w".
func oneTensor(t *testing.T, path string) {
	t.Helper()
	if err := Write(path, []Tensor{FromF32("w", []int{2}, []float32{1, 2})}, nil); err != nil {
		t.Fatal(err)
	}
}

// Every file a checkpoint names, through its index, its single file or its
// glob, must resolve to a regular file inside the checkpoint directory:
// no "..", no absolute path, no symbolic link out, no device or pipe.
func TestCheckpointFilesStayInside(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir, outside string)
		want  string // "" accepts
	}{
		{"index names a parent file", func(t *testing.T, dir, outside string) {
			writeIndex(t, dir, "../out.safetensors")
		}, "must be a file name inside"},
		{"index names an absolute path", func(t *testing.T, dir, outside string) {
			writeIndex(t, dir, filepath.Join(outside, "out.safetensors"))
		}, "must be a file name inside"},
		{"index names a link out", func(t *testing.T, dir, outside string) {
			writeIndex(t, dir, "a.safetensors")
			link(t, filepath.Join(outside, "out.safetensors"), filepath.Join(dir, "a.safetensors"))
		}, "outside the checkpoint directory"},
		{"index names a link to a device", func(t *testing.T, dir, outside string) {
			writeIndex(t, dir, "a.safetensors")
			link(t, "/dev/zero", filepath.Join(dir, "a.safetensors"))
		}, "outside the checkpoint directory"},
		{"index itself links out", func(t *testing.T, dir, outside string) {
			writeIndex(t, outside, "a.safetensors")
			link(t, filepath.Join(outside, IndexFile), filepath.Join(dir, IndexFile))
			oneTensor(t, filepath.Join(dir, "a.safetensors"))
		}, "outside the checkpoint directory"},
		{"single file links out", func(t *testing.T, dir, outside string) {
			link(t, filepath.Join(outside, "out.safetensors"), filepath.Join(dir, SingleFile))
		}, "outside the checkpoint directory"},
		{"globbed file links out", func(t *testing.T, dir, outside string) {
			link(t, filepath.Join(outside, "out.safetensors"), filepath.Join(dir, "x.safetensors"))
		}, "outside the checkpoint directory"},
		{"shard is a pipe", func(t *testing.T, dir, outside string) {
			writeIndex(t, dir, "a.safetensors")
			if err := syscall.Mkfifo(filepath.Join(dir, "a.safetensors"), 0o644); err != nil {
				t.Skip("no named pipes here:", err)
			}
		}, "not a regular file"},
		{"index larger than the limit", func(t *testing.T, dir, outside string) {
			f, err := os.Create(filepath.Join(dir, IndexFile))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(MaxIndexBytes + 1); err != nil { // sparse: nothing is written
				t.Fatal(err)
			}
		}, "more than the 67108864 it may have; a real index is a few MiB"},
		{"link inside the directory", func(t *testing.T, dir, outside string) {
			writeIndex(t, dir, "a.safetensors")
			oneTensor(t, filepath.Join(dir, "real.safetensors.bin"))
			link(t, "real.safetensors.bin", filepath.Join(dir, "a.safetensors"))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, outside := t.TempDir(), t.TempDir()
			oneTensor(t, filepath.Join(outside, "out.safetensors"))
			tc.setup(t, dir, outside)
			c, err := OpenDir(dir)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("opened a checkpoint whose files leave %s", dir)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// A Hugging Face cache snapshot links every file to the repository's blobs
// directory; those links are the checkpoint's own and are followed.
func TestHuggingFaceCacheSnapshotOpens(t *testing.T) {
	repo := t.TempDir()
	blobs, snap := filepath.Join(repo, "blobs"), filepath.Join(repo, "snapshots", "0123abc")
	for _, d := range []string{blobs, snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	oneTensor(t, filepath.Join(blobs, "9f86d081"))
	link(t, filepath.Join("..", "..", "blobs", "9f86d081"), filepath.Join(snap, SingleFile))
	c, err := OpenDir(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Tensor("w"); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

// FuzzIndexFile opens a directory with one valid shard under any index
// file: OpenDir never panics, and what it opens lies inside the directory.
func FuzzIndexFile(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{},"weight_map":{"w":"a.safetensors"}}`,
		`{"weight_map":{"w":"../a.safetensors"}}`,
		`{"weight_map":{"w":"/etc/passwd"}}`,
		`{"weight_map":{"w":"a.safetensors","v":"a.safetensors"}}`,
		`{"weight_map":{}}`, `{"weight_map":{"w":""}}`, `{"weight_map":{"w":"link.safetensors"}}`,
		`[]`, `{"weight_map":{"w":7}}`, `{`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	outside := f.TempDir()
	if err := Write(filepath.Join(dir, "a.safetensors"), []Tensor{FromF32("w", []int{2}, []float32{1, 2})}, nil); err != nil {
		f.Fatal(err)
	}
	if err := Write(filepath.Join(outside, "b.safetensors"), []Tensor{FromF32("w", []int{2}, []float32{1, 2}), FromF32("v", []int{1}, []float32{3})}, nil); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "b.safetensors"), filepath.Join(dir, "link.safetensors")); err != nil {
		f.Fatal(err)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, index []byte) {
		if err := os.WriteFile(filepath.Join(dir, IndexFile), index, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := OpenDir(dir)
		if err != nil {
			return
		}
		defer c.Close()
		for _, file := range c.files {
			real, err := filepath.EvalSymlinks(file.path)
			if err != nil || filepath.Dir(real) != root {
				t.Errorf("index %q opened %s (%s), outside %s", index, file.path, real, dir)
			}
		}
		if len(c.Names()) == 0 {
			t.Errorf("index %q opened a checkpoint with no tensors", index)
		}
	})
}
