package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// headerOut is the JSON form of one tensor written by this package.
type headerOut struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// checkTensors validates tensors for writing and returns their total size.
func checkTensors(tensors []Tensor) (int64, error) {
	seen := map[string]bool{}
	var total int64
	for _, t := range tensors {
		if t.Name == metadataKey {
			return 0, fmt.Errorf("tensor name %q is reserved for metadata", metadataKey)
		}
		if seen[t.Name] {
			return 0, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		seen[t.Name] = true
		if err := t.check(); err != nil {
			return 0, err
		}
		total += int64(len(t.Data))
	}
	return total, nil
}

// layout orders tensors by element size (largest first) and then by name,
// so that consecutive data keeps every tensor aligned to its element size.
func layout(tensors []Tensor) []Tensor {
	order := slices.Clone(tensors)
	slices.SortFunc(order, func(a, b Tensor) int {
		if a.DType.Size() != b.DType.Size() {
			return b.DType.Size() - a.DType.Size()
		}
		return strings.Compare(a.Name, b.Name)
	})
	return order
}

// encodeHeader returns the 8-byte length field followed by the JSON header
// padded with spaces so that the data section starts at a multiple of 8.
func encodeHeader(order []Tensor, metadata map[string]string) ([]byte, error) {
	entries := make(map[string]any, len(order)+1)
	if len(metadata) > 0 {
		entries[metadataKey] = metadata
	}
	var off int64
	for _, t := range order {
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		n := int64(len(t.Data))
		entries[t.Name] = headerOut{DType: t.DType.String(), Shape: shape, DataOffsets: [2]int64{off, off + n}}
		off += n
	}
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(entries); err != nil {
		return nil, fmt.Errorf("encoding header: %w", err)
	}
	body := bytes.TrimRight(js.Bytes(), "\n")
	if len(body) > MaxHeaderBytes {
		return nil, fmt.Errorf("header of %d bytes exceeds the limit of %d bytes; write fewer tensors per file (WriteSharded)", len(body), MaxHeaderBytes)
	}
	pad := (8 - len(body)%8) % 8
	out := make([]byte, 8, 8+len(body)+pad)
	binary.LittleEndian.PutUint64(out, uint64(len(body)+pad))
	out = append(out, body...)
	return append(out, bytes.Repeat([]byte{' '}, pad)...), nil
}

// Write writes tensors and metadata to a new safetensors file at path,
// replacing it atomically: the data goes to a temporary file in the same
// directory that is renamed over path once complete.
func Write(path string, tensors []Tensor, metadata map[string]string) error {
	if _, err := checkTensors(tensors); err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	if err := writeFile(path, tensors, metadata); err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	return nil
}

func writeFile(path string, tensors []Tensor, metadata map[string]string) error {
	order := layout(tensors)
	head, err := encodeHeader(order, metadata)
	if err != nil {
		return err
	}
	return writeAtomic(path, func(w *bufio.Writer) error {
		if _, err := w.Write(head); err != nil {
			return err
		}
		for _, t := range order {
			if _, err := w.Write(t.Data); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeAtomic writes a temporary file next to path with fill and renames it
// to path.
func writeAtomic(path string, fill func(*bufio.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.Remove(tmp.Name()))
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	if err := fill(w); err != nil {
		return errors.Join(err, tmp.Close())
	}
	if err := w.Flush(); err != nil {
		return errors.Join(err, tmp.Close())
	}
	if err := tmp.Chmod(0o644); err != nil {
		return errors.Join(err, tmp.Close())
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ShardName returns the file name of shard k (1-based) of n, as Hugging Face
// names them: model-0000k-of-0000n.safetensors.
func ShardName(k, n int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", k, n)
}

// WriteSharded writes tensors into dir as shards of at most maxShardBytes of
// tensor data each (a single tensor larger than that gets a shard of its
// own), named by ShardName, plus model.safetensors.index.json mapping every
// tensor to its shard. Tensors are assigned to shards in name order; each
// shard carries metadata. dir is created if needed.
func WriteSharded(dir string, tensors []Tensor, maxShardBytes int64, metadata map[string]string) error {
	if maxShardBytes <= 0 {
		return fmt.Errorf("safetensors: maxShardBytes must be positive, got %d (e.g. %d for 5 GiB shards)", maxShardBytes, int64(5)<<30)
	}
	if len(tensors) == 0 {
		return fmt.Errorf("safetensors: writing %s: no tensors to write", dir)
	}
	total, err := checkTensors(tensors)
	if err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", dir, err)
	}
	byName := slices.Clone(tensors)
	slices.SortFunc(byName, func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) })
	var shards [][]Tensor
	var cur []Tensor
	var curBytes int64
	for _, t := range byName {
		n := int64(len(t.Data))
		if len(cur) > 0 && curBytes+n > maxShardBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, t)
		curBytes += n
	}
	shards = append(shards, cur)

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	idx := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": total}, map[string]string{}}
	for k, shard := range shards {
		name := ShardName(k+1, len(shards))
		if err := Write(filepath.Join(dir, name), shard, metadata); err != nil {
			return err
		}
		for _, t := range shard {
			idx.WeightMap[t.Name] = name
		}
	}
	js, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("safetensors: encoding index: %w", err)
	}
	indexPath := filepath.Join(dir, IndexFile)
	err = writeAtomic(indexPath, func(w *bufio.Writer) error {
		_, err := w.Write(append(js, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", indexPath, err)
	}
	return nil
}
