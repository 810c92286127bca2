package safetensors

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

// File is an open safetensors file. Its tensors' Data are views into the
// file's memory and stay valid until Close.
type File struct {
	path   string
	data   []byte // the whole file: a read-only mapping, or a heap copy
	unmap  func([]byte) error
	header *header
}

// Open maps path read-only and validates its header. When the file cannot
// be mapped it is read into memory instead.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s is not a regular file", path)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("safetensors: %s: file is %d bytes, shorter than the 8-byte header length", path, size)
	}
	data, unmap, err := mapFile(f, size)
	if err != nil {
		data, unmap = nil, nil
		if data, err = readAll(f, size); err != nil {
			return nil, fmt.Errorf("safetensors: %s: %w", path, err)
		}
	}
	h, err := parseFile(data, size)
	if err != nil {
		if unmap != nil {
			err = errors.Join(err, unmap(data))
		}
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return &File{path: path, data: data, unmap: unmap, header: h}, nil
}

// readAll reads the whole file into memory (the fallback when mmap fails).
func readAll(f *os.File, size int64) ([]byte, error) {
	if int64(int(size)) != size {
		return nil, fmt.Errorf("file of %d bytes does not fit in memory", size)
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	return buf, nil
}

// Path returns the path the file was opened from.
func (f *File) Path() string { return f.path }

// Mapped reports whether the file is memory-mapped (false: read into memory).
func (f *File) Mapped() bool { return f.unmap != nil }

// Close releases the mapping. Tensor views obtained from f must not be used
// afterwards. Closing twice is harmless.
func (f *File) Close() error {
	data, unmap := f.data, f.unmap
	f.data, f.unmap, f.header = nil, nil, nil
	if unmap != nil && data != nil {
		if err := unmap(data); err != nil {
			return fmt.Errorf("safetensors: unmapping %s: %w", f.path, err)
		}
	}
	return nil
}

// Names returns the tensor names, sorted.
func (f *File) Names() []string {
	if f.header == nil {
		return nil
	}
	return slices.Clone(f.header.names)
}

// Metadata returns a copy of the header's __metadata__ (nil when absent).
func (f *File) Metadata() map[string]string {
	if f.header == nil || f.header.metadata == nil {
		return nil
	}
	m := make(map[string]string, len(f.header.metadata))
	for k, v := range f.header.metadata {
		m[k] = v
	}
	return m
}

// Tensor returns the named tensor; its Data is a view into the file.
func (f *File) Tensor(name string) (Tensor, error) {
	if f.header == nil {
		return Tensor{}, fmt.Errorf("safetensors: %s is closed", f.path)
	}
	info, ok := f.header.tensors[name]
	if !ok {
		return Tensor{}, fmt.Errorf("safetensors: %s has no tensor %q (%d tensors)", f.path, name, len(f.header.names))
	}
	lo, hi := f.header.dataAt+info.begin, f.header.dataAt+info.end
	return Tensor{
		Name:  name,
		DType: info.dtype,
		Shape: slices.Clone(info.shape),
		Data:  f.data[lo:hi:hi],
	}, nil
}
