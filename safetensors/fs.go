package safetensors

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"

	"github.com/cpmla/cpmla/internal/boundedread"
)

// MaxFSFileBytes bounds one file OpenFS reads into memory: an fs.FS cannot
// be mapped, so every shard it holds is copied whole. Checkpoints larger
// than this belong in a directory, where OpenDir maps them.
const MaxFSFileBytes = 1 << 30

// OpenFS opens the checkpoint at the root of fsys, found as OpenDir finds
// one in a directory (the index's shards, else model.safetensors, else
// every *.safetensors file). Each file is read into memory after its size
// is checked against MaxFSFileBytes; the index may name only files at the
// root of fsys. name says where the checkpoint comes from in messages and
// in Dir.
func OpenFS(fsys fs.FS, name string) (*Checkpoint, error) {
	c := &Checkpoint{dir: name, where: map[string]*File{}}
	if err := c.openFS(fsys); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	for n := range c.where {
		c.names = append(c.names, n)
	}
	slices.Sort(c.names)
	return c, nil
}

func (c *Checkpoint) openFS(fsys fs.FS) error {
	raw, err := readFSBounded(fsys, IndexFile, MaxIndexBytes)
	switch {
	case err == nil:
		return c.openIndexed(c.dir+"/"+IndexFile, raw, func(shard string) (*File, error) { return openFSFile(fsys, shard, c.dir) })
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("safetensors: %s: %w", c.dir, err)
	}
	paths := []string{SingleFile}
	if _, err := fs.Stat(fsys, SingleFile); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("safetensors: %s: %w", c.dir, err)
		}
		if paths, err = fs.Glob(fsys, "*.safetensors"); err != nil {
			return fmt.Errorf("safetensors: listing %s: %w", c.dir, err)
		}
	}
	if len(paths) == 0 {
		return fmt.Errorf("safetensors: %s holds no checkpoint: no %s, no %s, no *.safetensors files", c.dir, IndexFile, SingleFile)
	}
	slices.Sort(paths)
	for _, p := range paths {
		f, err := openFSFile(fsys, p, c.dir)
		if err != nil {
			return err
		}
		if err := c.add(f); err != nil {
			return err
		}
	}
	return nil
}

// openFSFile reads name from fsys into memory and validates its header.
func openFSFile(fsys fs.FS, name, where string) (*File, error) {
	data, err := readFSBounded(fsys, name, MaxFSFileBytes)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", where, err)
	}
	label := path.Join(where, name)
	h, err := parseFile(data, int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", label, err)
	}
	return &File{path: label, data: data, header: h}, nil
}

// readFSBounded reads the regular file name of fsys, a name inside the
// checkpoint, refusing it by its size before reading when it is larger
// than limit bytes.
func readFSBounded(fsys fs.FS, name string, limit int64) ([]byte, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, fmt.Errorf("%q is not a file name inside the checkpoint", name)
	}
	return boundedread.File(fsys, name, limit)
}
