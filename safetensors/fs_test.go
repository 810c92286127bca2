package safetensors

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// dirFS copies the files of dir into an in-memory fs.FS.
func dirFS(t *testing.T, dir string) fstest.MapFS {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := fstest.MapFS{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = &fstest.MapFile{Data: data}
	}
	return m
}

// A checkpoint read from an fs.FS has the tensors, bytes and names of the
// same checkpoint opened from its directory, for every layout OpenDir finds.
func TestOpenFSMatchesOpenDir(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, dir string)
	}{
		{"sharded", func(t *testing.T, dir string) {
			if err := WriteSharded(dir, shardTensors(), 100, map[string]string{"format": "pt"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"single file", func(t *testing.T, dir string) {
			if err := Write(filepath.Join(dir, SingleFile), shardTensors(), nil); err != nil {
				t.Fatal(err)
			}
		}},
		{"glob", func(t *testing.T, dir string) {
			ts := shardTensors()
			if err := Write(filepath.Join(dir, "a.safetensors"), ts[:4], nil); err != nil {
				t.Fatal(err)
			}
			if err := Write(filepath.Join(dir, "b.safetensors"), ts[4:], nil); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.write(t, dir)
			want, err := OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			got, err := OpenFS(dirFS(t, dir), "built-in test")
			if err != nil {
				t.Fatal(err)
			}
			defer got.Close()
			if d := cmp.Diff(want.Names(), got.Names()); d != "" {
				t.Fatalf("names (-dir +fs):\n%s", d)
			}
			for _, n := range want.Names() {
				a, _ := want.Tensor(n)
				b, err := got.Tensor(n)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(a, b, cmpopts.EquateEmpty()); d != "" {
					t.Errorf("tensor %s (-dir +fs):\n%s", n, d)
				}
			}
			if got.Dir() != "built-in test" {
				t.Errorf("Dir %q", got.Dir())
			}
			if _, err := got.Tensor("nope"); err == nil || !strings.Contains(err.Error(), "built-in test") {
				t.Errorf("missing tensor: %v, want an error naming the checkpoint", err)
			}
		})
	}
}

// hugeFS reports its file huge as MaxFSFileBytes + 1 bytes without holding
// them.
type hugeFS struct {
	fstest.MapFS
	huge string
}

type hugeInfo struct{ fs.FileInfo }

func (hugeInfo) Size() int64 { return MaxFSFileBytes + 1 }

type hugeFile struct{ fs.File }

func (f hugeFile) Stat() (fs.FileInfo, error) {
	st, err := f.File.Stat()
	return hugeInfo{st}, err
}

func (h hugeFS) Open(name string) (fs.File, error) {
	f, err := h.MapFS.Open(name)
	if err != nil || name != h.huge {
		return f, err
	}
	return hugeFile{f}, nil
}

// What an fs.FS checkpoint names stays inside it and bounded: an index
// naming a path is refused, as is a shard over MaxFSFileBytes (by its size,
// before it is read), a directory in a shard's place, a missing shard and a
// corrupt one.
func TestOpenFSRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "a.safetensors"), shardTensors()[:2], nil); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, "a.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	index := func(shard string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(`{"weight_map":{"layers.0.w":"` + shard + `"}}`)}
	}
	for _, tc := range []struct {
		name string
		fsys fs.FS
		want string
	}{
		{"empty", fstest.MapFS{}, "holds no checkpoint"},
		{"index names a parent", fstest.MapFS{IndexFile: index("../a.safetensors"), "a.safetensors": {Data: good}}, `shard "../a.safetensors" must be a file name inside`},
		{"index names a subdirectory", fstest.MapFS{IndexFile: index("sub/a.safetensors"), "sub/a.safetensors": {Data: good}}, "must be a file name inside"},
		{"index names a missing shard", fstest.MapFS{IndexFile: index("gone.safetensors")}, "gone.safetensors"},
		{"index names a directory", fstest.MapFS{IndexFile: index("d.safetensors"), "d.safetensors/x": {Data: good}}, "d.safetensors is a directory, not a file"},
		{"index is not JSON", fstest.MapFS{IndexFile: {Data: []byte("{")}}, "unexpected end of JSON input"},
		{"index too large", hugeFS{fstest.MapFS{IndexFile: index("a.safetensors"), "a.safetensors": {Data: good}}, IndexFile}, "has 1073741825 bytes, more than the 67108864"},
		{"shard too large", hugeFS{fstest.MapFS{SingleFile: {Data: good}}, SingleFile}, "has 1073741825 bytes, more than the 1073741824 it may have"},
		{"corrupt shard", fstest.MapFS{SingleFile: {Data: good[:len(good)-1]}}, "built-in x/model.safetensors"},
		{"same tensor twice", fstest.MapFS{"a.safetensors": {Data: good}, "b.safetensors": {Data: good}}, `is in both built-in x/a.safetensors and built-in x/b.safetensors`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := OpenFS(tc.fsys, "built-in x")
			if err == nil {
				c.Close()
				t.Fatalf("accepted, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// The fs.FS read refuses a file that grows past the limit after its Stat
// said it was under it.
func TestReadFSBoundedRefusesGrowth(t *testing.T) {
	m := growingFS{data: []byte("0123456789")}
	if _, err := readFSBounded(m, "f", 5); err == nil || !strings.Contains(err.Error(), "f is longer than the 5 bytes read") {
		t.Errorf("got %v, want a refusal of the growth", err)
	}
}

// growingFS holds one file f whose Stat reports 4 bytes but which reads as
// data.
type growingFS struct{ data []byte }

type growingFile struct {
	data []byte
	off  int
}

type smallInfo struct{}

func (smallInfo) Name() string       { return "f" }
func (smallInfo) Size() int64        { return 4 }
func (smallInfo) Mode() fs.FileMode  { return 0o444 }
func (smallInfo) ModTime() time.Time { return time.Time{} }
func (smallInfo) IsDir() bool        { return false }
func (smallInfo) Sys() any           { return nil }

func (g growingFS) Open(name string) (fs.File, error) {
	return &growingFile{data: g.data}, nil
}
func (f *growingFile) Stat() (fs.FileInfo, error) { return smallInfo{}, nil }
func (f *growingFile) Close() error               { return nil }
func (f *growingFile) Read(p []byte) (int, error) {
	if f.off >= len(f.data) {
		return 0, io.EOF
	}
	n := copy(p, f.data[f.off:])
	f.off += n
	return n, nil
}

// FuzzIndexFileFS opens an fs.FS holding one valid shard (and one in a
// subdirectory) under any index: OpenFS never panics, and opens only files
// at the root.
func FuzzIndexFileFS(f *testing.F) {
	for _, s := range []string{
		`{"weight_map":{"w":"a.safetensors"}}`, `{"weight_map":{"w":"sub/b.safetensors"}}`,
		`{"weight_map":{"w":"../a.safetensors"}}`, `{"weight_map":{"w":"/a.safetensors"}}`,
		`{"weight_map":{"w":"."}}`, `{"weight_map":{}}`, `[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	if err := Write(filepath.Join(dir, "a.safetensors"), []Tensor{FromF32("w", []int{2}, []float32{1, 2})}, nil); err != nil {
		f.Fatal(err)
	}
	shard, err := os.ReadFile(filepath.Join(dir, "a.safetensors"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, index []byte) {
		m := fstest.MapFS{IndexFile: {Data: index}, "a.safetensors": {Data: shard}, "sub/b.safetensors": {Data: shard}}
		c, err := OpenFS(m, "x")
		if err != nil {
			return
		}
		defer c.Close()
		for _, file := range c.files {
			if file.path != "x/a.safetensors" {
				t.Errorf("index %q opened %s", index, file.path)
			}
		}
	})
}
