package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cpmla/cpmla/internal/boundedread"
)

// IndexFile and SingleFile are the names OpenDir looks for.
const (
	IndexFile  = "model.safetensors.index.json"
	SingleFile = "model.safetensors"
)

// Checkpoint is a set of safetensors files read as one namespace of tensors.
type Checkpoint struct {
	dir   string
	files []*File
	where map[string]*File
	names []string
}

// indexJSON is the shard index: weight_map maps tensor names to shard file
// names; metadata (e.g. total_size) is informational.
type indexJSON struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// OpenDir opens the checkpoint in dir: the shards listed by
// model.safetensors.index.json if present, else model.safetensors, else
// every *.safetensors file in dir (a name found in two files is refused).
// Every tensor the index lists must be present in its shard; tensors a shard
// holds beyond the index are not part of the checkpoint.
func OpenDir(dir string) (*Checkpoint, error) {
	c := &Checkpoint{dir: dir, where: map[string]*File{}}
	err := c.open()
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	for name := range c.where {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	return c, nil
}

// MaxIndexBytes bounds model.safetensors.index.json (the largest published
// indexes are under 10 MiB).
const MaxIndexBytes = 64 << 20

func (c *Checkpoint) open() error {
	indexPath := filepath.Join(c.dir, IndexFile)
	switch _, err := os.Lstat(indexPath); {
	case err == nil:
		if err := c.contained(indexPath); err != nil {
			return err
		}
		raw, err := boundedread.Path(indexPath, MaxIndexBytes)
		err = boundedread.Advise(err, "a real index is a few MiB")
		if err != nil {
			return fmt.Errorf("safetensors: %w", err)
		}
		return c.openIndexed(indexPath, raw, func(shard string) (*File, error) {
			p := filepath.Join(c.dir, shard)
			if err := c.contained(p); err != nil {
				return nil, err
			}
			return Open(p)
		})
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("safetensors: %w", err)
	}
	single := filepath.Join(c.dir, SingleFile)
	if _, err := os.Lstat(single); err == nil {
		return c.openAll([]string{single})
	}
	paths, err := filepath.Glob(filepath.Join(c.dir, "*.safetensors"))
	if err != nil {
		return fmt.Errorf("safetensors: listing %s: %w", c.dir, err)
	}
	if len(paths) == 0 {
		return fmt.Errorf("safetensors: %s holds no checkpoint: no %s, no %s, no *.safetensors files", c.dir, IndexFile, SingleFile)
	}
	slices.Sort(paths)
	return c.openAll(paths)
}

// contained refuses a checkpoint file that resolves (through symbolic
// links) to anything but a regular file inside the checkpoint directory, or,
// for a Hugging Face cache snapshot (…/snapshots/REV), inside its
// repository's blobs directory, where the cache keeps the files its
// snapshot links point to.
func (c *Checkpoint) contained(path string) error {
	root, err := filepath.EvalSymlinks(c.dir)
	if err != nil {
		return fmt.Errorf("safetensors: checkpoint directory %s: %w", c.dir, err)
	}
	roots := []string{root}
	if filepath.Base(filepath.Dir(root)) == "snapshots" {
		roots = append(roots, filepath.Join(filepath.Dir(filepath.Dir(root)), "blobs"))
	}
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	inside := false
	for _, r := range roots {
		if rel, err := filepath.Rel(r, target); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel) {
			inside = true
		}
	}
	if !inside {
		return fmt.Errorf("safetensors: %s resolves to %s, outside the checkpoint directory %s; copy the file into the checkpoint instead of linking to it", path, target, c.dir)
	}
	st, err := os.Stat(target)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("safetensors: %s is not a regular file (%s)", path, st.Mode().Type())
	}
	return nil
}

// openIndexed opens the shards the index raw lists, each with open, after
// checking that every shard is named by a bare file name.
func (c *Checkpoint) openIndexed(indexPath string, raw []byte, open func(shard string) (*File, error)) error {
	var idx indexJSON
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("safetensors: %s: %w", indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("safetensors: %s: weight_map lists no tensors", indexPath)
	}
	shards := map[string]*File{}
	var shardNames []string
	for _, shard := range idx.WeightMap {
		if _, ok := shards[shard]; ok {
			continue
		}
		if shard == "" || shard != filepath.Base(shard) || shard == "." || shard == ".." || strings.ContainsAny(shard, "/\\\x00") || filepath.IsAbs(shard) {
			return fmt.Errorf("safetensors: %s: shard %q must be a file name inside %s", indexPath, shard, c.dir)
		}
		shards[shard] = nil
		shardNames = append(shardNames, shard)
	}
	slices.Sort(shardNames)
	for _, shard := range shardNames {
		f, err := open(shard)
		if err != nil {
			return fmt.Errorf("shard of %s: %w", indexPath, err)
		}
		c.files = append(c.files, f)
		shards[shard] = f
	}
	for name, shard := range idx.WeightMap {
		f := shards[shard]
		if _, ok := f.header.tensors[name]; !ok {
			return fmt.Errorf("safetensors: %s lists tensor %q in %s, but that shard does not hold it", indexPath, name, shard)
		}
		c.where[name] = f
	}
	return nil
}

func (c *Checkpoint) openAll(paths []string) error {
	for _, p := range paths {
		if err := c.contained(p); err != nil {
			return err
		}
		f, err := Open(p)
		if err != nil {
			return err
		}
		if err := c.add(f); err != nil {
			return err
		}
	}
	return nil
}

// add makes every tensor of f part of the checkpoint, refusing a name
// another file already holds.
func (c *Checkpoint) add(f *File) error {
	c.files = append(c.files, f)
	for _, name := range f.header.names {
		if other, ok := c.where[name]; ok {
			return fmt.Errorf("safetensors: tensor %q is in both %s and %s; add a %s to say which one counts", name, other.path, f.path, IndexFile)
		}
		c.where[name] = f
	}
	return nil
}

// Dir returns the directory the checkpoint was opened from (for OpenFS, the
// name it was given).
func (c *Checkpoint) Dir() string { return c.dir }

// Names returns the tensor names of the checkpoint, sorted.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Tensor returns the named tensor as a view into its shard.
func (c *Checkpoint) Tensor(name string) (Tensor, error) {
	f, ok := c.where[name]
	if !ok {
		return Tensor{}, fmt.Errorf("safetensors: checkpoint %s has no tensor %q (%d tensors)", c.dir, name, len(c.names))
	}
	return f.Tensor(name)
}

// Close closes every shard. Tensor views must not be used afterwards.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files, c.where, c.names = nil, nil, nil
	return errors.Join(errs...)
}
