package conformance

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cpmla/cpmla/safetensors"
)

// Case is a case file in memory: the __metadata__ strings and the tensors by
// name. The tensors' Data may be read-only views; Run never writes to them.
type Case struct {
	Metadata map[string]string
	Tensors  map[string]safetensors.Tensor
}

// CaseFromFile collects the metadata and every tensor of an open file. The
// tensors stay views into the file, valid until it is closed.
func CaseFromFile(f *safetensors.File) (Case, error) {
	c := Case{Metadata: f.Metadata(), Tensors: map[string]safetensors.Tensor{}}
	for _, name := range f.Names() {
		t, err := f.Tensor(name)
		if err != nil {
			return Case{}, fmt.Errorf("reading case: %w", err)
		}
		c.Tensors[name] = t
	}
	return c, nil
}

// maxOutputElems bounds the elements of any one output tensor (4 GiB of
// float32): a case file cannot make Run allocate without bound.
const maxOutputElems = 1 << 30

// binder checks tensors against symbolic shapes such as [s_q, h_q, 576]:
// the first tensor that has a dimension binds its name to a value, and every
// later use must agree.
type binder struct {
	c        Case
	declared []string // the kernel's inputs; reading any other is a bug
	dims     map[string]int
	from     map[string]string // dimension name -> what bound it, e.g. `tensor "q"`
}

func newBinder(c Case, declared []string) *binder {
	return &binder{c: c, declared: declared, dims: map[string]int{}, from: map[string]string{}}
}

// tensor fetches name and checks its dtype and shape. dims are dimension
// names or decimal constants. It returns ok=false, err=nil for an absent
// optional tensor.
func (b *binder) tensor(name string, dt safetensors.DType, dims []string, optional bool) (t safetensors.Tensor, ok bool, err error) {
	if !slices.Contains(b.declared, name) {
		return t, false, fmt.Errorf("the kernel reads tensor %q, which its input list does not declare", name)
	}
	t, ok = b.c.Tensors[name]
	if !ok {
		if optional {
			return t, false, nil
		}
		return t, false, fmt.Errorf("tensor %q is missing (want %s [%s]; case has %s)", name, dt, strings.Join(dims, ", "), tensorList(b.c))
	}
	if t.DType != dt {
		return t, false, fmt.Errorf("tensor %q has dtype %s, want %s", name, t.DType, dt)
	}
	if len(t.Shape) != len(dims) {
		return t, false, fmt.Errorf("tensor %q has shape %v (rank %d), want [%s] (rank %d)", name, t.Shape, len(t.Shape), strings.Join(dims, ", "), len(dims))
	}
	for i, d := range dims {
		got := t.Shape[i]
		if got < 0 {
			return t, false, fmt.Errorf("tensor %q has shape %v with a negative dimension", name, t.Shape)
		}
		if v, err := strconv.Atoi(d); err == nil {
			if got != v {
				return t, false, fmt.Errorf("tensor %q has shape %v, want [%s]: dimension %d must be %d, got %d", name, t.Shape, strings.Join(dims, ", "), i, v, got)
			}
			continue
		}
		if v, seen := b.dims[d]; seen {
			if got != v {
				return t, false, fmt.Errorf("tensor %q has shape %v, want [%s]: %s is %d in %s but %d here", name, t.Shape, strings.Join(dims, ", "), d, v, b.from[d], got)
			}
			continue
		}
		b.dims[d] = got
		b.from[d] = fmt.Sprintf("tensor %q", name)
	}
	n, err := elems(t.Shape)
	if err != nil {
		return t, false, fmt.Errorf("tensor %q: %w", name, err)
	}
	if want := n * dt.Size(); len(t.Data) != want {
		return t, false, fmt.Errorf("tensor %q holds %d bytes, but %s %v needs %d", name, len(t.Data), dt, t.Shape, want)
	}
	return t, true, nil
}

// bind records a dimension that comes from metadata rather than a tensor;
// source says where, e.g. `metadata "page_size"`.
func (b *binder) bind(dim string, v int, source string) {
	b.dims[dim] = v
	b.from[dim] = source
}

// f32 returns a copy of a required F32 tensor's values.
func (b *binder) f32(name string, dims ...string) ([]float32, error) {
	t, _, err := b.tensor(name, safetensors.F32, dims, false)
	if err != nil {
		return nil, err
	}
	return toF32(t), nil
}

// i32 returns a copy of a required I32 tensor's values.
func (b *binder) i32(name string, dims ...string) ([]int32, error) {
	v, _, err := b.i32opt(name, false, dims...)
	return v, err
}

// i32opt returns a copy of an I32 tensor's values, or ok=false when an
// optional tensor is absent.
func (b *binder) i32opt(name string, optional bool, dims ...string) ([]int32, bool, error) {
	t, ok, err := b.tensor(name, safetensors.I32, dims, optional)
	if err != nil || !ok {
		return nil, false, err
	}
	return toI32(t), true, nil
}

// u8 returns a required U8 tensor's bytes (a view: never written to).
func (b *binder) u8(name string, dims ...string) ([]byte, error) {
	t, _, err := b.tensor(name, safetensors.U8, dims, false)
	if err != nil {
		return nil, err
	}
	return t.Data, nil
}

// dim returns a bound dimension.
func (b *binder) dim(name string) int { return b.dims[name] }

func tensorList(c Case) string {
	if len(c.Tensors) == 0 {
		return "no tensors"
	}
	names := make([]string, 0, len(c.Tensors))
	for n := range c.Tensors {
		names = append(names, strconv.Quote(n))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// elems is the product of shape, refusing products past maxOutputElems.
func elems(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > maxOutputElems/d {
			return 0, fmt.Errorf("shape %v has more than %d elements", shape, maxOutputElems)
		}
		n *= d
	}
	return n, nil
}

// checkOutput refuses output shapes past maxOutputElems.
func checkOutput(name string, shape ...int) error {
	if _, err := elems(shape); err != nil {
		return fmt.Errorf("output %q: %w; use a smaller case", name, err)
	}
	return nil
}

func toF32(t safetensors.Tensor) []float32 {
	v := make([]float32, len(t.Data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return v
}

func toI32(t safetensors.Tensor) []int32 {
	v := make([]int32, len(t.Data)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return v
}

// meta reads the case's metadata parameters for one kernel.
type meta struct {
	m map[string]string
}

func (m meta) str(key string) (string, error) {
	v, ok := m.m[key]
	if !ok {
		return "", fmt.Errorf("metadata %q is missing", key)
	}
	return v, nil
}

// int parses an integer parameter in [lo, hi]; example is a value that works.
func (m meta) int(key string, lo, hi int, example string) (int, error) {
	s, err := m.str(key)
	if err != nil {
		return 0, fmt.Errorf("%w (set it to an integer in [%d, %d], e.g. %q)", err, lo, hi, example)
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("metadata %q is %q, want an integer in [%d, %d] (e.g. %q)", key, s, lo, hi, example)
	}
	return v, nil
}

// positiveFloat parses a finite float32 parameter greater than zero.
func (m meta) positiveFloat(key, example string) (float32, error) {
	s, err := m.str(key)
	if err != nil {
		return 0, fmt.Errorf("%w (set it to a positive number, e.g. %q)", err, example)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 32)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("metadata %q is %q, want a finite positive float32 (e.g. %q)", key, s, example)
	}
	return float32(v), nil
}

// bool parses "true" or "false".
func (m meta) bool(key string) (bool, error) {
	s, err := m.str(key)
	if err != nil {
		return false, fmt.Errorf(`%w (set it to "true" or "false")`, err)
	}
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf(`metadata %q is %q, want "true" or "false"`, key, s)
}
