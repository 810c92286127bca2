package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"unicode/utf8"
)

// MaxHeaderBytes caps the JSON header of a file. Real checkpoints need a
// few hundred KiB; the cap keeps a corrupt length from allocating gigabytes.
const MaxHeaderBytes = 100 << 20

// metadataKey is the reserved header key holding string metadata.
const metadataKey = "__metadata__"

// tensorInfo is one validated tensor entry of a header.
type tensorInfo struct {
	dtype      DType
	shape      []int
	elems      int
	begin, end int64 // byte offsets into the data section
}

// header is a validated safetensors header.
type header struct {
	tensors  map[string]tensorInfo
	names    []string // sorted
	metadata map[string]string
	dataAt   int64 // offset of the data section in the file: 8 + header length
	dataLen  int64 // size of the data section
}

// headerEntry is the JSON form of one tensor; pointers detect missing fields.
type headerEntry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// parseFile validates the header of a complete safetensors file image (or
// of its first bytes, when fileSize says how long the file is). It never
// reads tensor data.
func parseFile(b []byte, fileSize int64) (*header, error) {
	if fileSize < 8 || int64(len(b)) < 8 {
		return nil, fmt.Errorf("file is %d bytes, shorter than the 8-byte header length", fileSize)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > MaxHeaderBytes {
		return nil, fmt.Errorf("header length %d exceeds the limit of %d bytes", n, MaxHeaderBytes)
	}
	if n > uint64(fileSize-8) {
		return nil, fmt.Errorf("header length %d exceeds the %d bytes after the length field", n, fileSize-8)
	}
	if uint64(len(b)-8) < n {
		return nil, fmt.Errorf("header length %d exceeds the %d bytes available", n, len(b)-8)
	}
	h, err := parseHeader(b[8:8+n], fileSize-8-int64(n))
	if err != nil {
		return nil, err
	}
	h.dataAt = 8 + int64(n)
	return h, nil
}

// parseHeader parses and validates a JSON header for a data section of
// dataLen bytes.
func parseHeader(js []byte, dataLen int64) (*header, error) {
	if !utf8.Valid(js) {
		return nil, errors.New("header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	if tok, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("header is not a JSON object: %w", err)
	} else if tok != json.Delim('{') {
		return nil, fmt.Errorf("header is not a JSON object: starts with %v", tok)
	}
	h := &header{tensors: map[string]tensorInfo{}, dataLen: dataLen}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("header JSON: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("header JSON: object key is %v", tok)
		}
		if seen[key] {
			return nil, fmt.Errorf("header has duplicate key %q", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("header JSON, value of %q: %w", key, err)
		}
		if key == metadataKey {
			if err := strictUnmarshal(raw, &h.metadata); err != nil {
				return nil, fmt.Errorf("header %s must map strings to strings: %w", metadataKey, err)
			}
			continue
		}
		info, err := parseEntry(raw, dataLen)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", key, err)
		}
		h.tensors[key] = info
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("header JSON: %w", err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, fmt.Errorf("header JSON after the object: %w", err)
		}
		return nil, fmt.Errorf("header has data after the JSON object: %v", tok)
	}
	for name := range h.tensors {
		h.names = append(h.names, name)
	}
	slices.Sort(h.names)
	if err := checkOverlap(h); err != nil {
		return nil, err
	}
	return h, nil
}

// strictUnmarshal decodes one JSON value, refusing unknown fields.
func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func parseEntry(raw []byte, dataLen int64) (tensorInfo, error) {
	var e headerEntry
	if err := strictUnmarshal(raw, &e); err != nil {
		return tensorInfo{}, fmt.Errorf("entry must be {\"dtype\", \"shape\", \"data_offsets\"}: %w", err)
	}
	switch {
	case e.DType == nil:
		return tensorInfo{}, errors.New("missing dtype")
	case e.Shape == nil:
		return tensorInfo{}, errors.New("missing shape")
	case e.DataOffsets == nil:
		return tensorInfo{}, errors.New("missing data_offsets")
	}
	dt, err := ParseDType(*e.DType)
	if err != nil {
		return tensorInfo{}, err
	}
	shape := make([]int, len(*e.Shape))
	for i, d := range *e.Shape {
		if d < 0 {
			return tensorInfo{}, fmt.Errorf("shape %v has negative dimension %d", *e.Shape, d)
		}
		if int64(int(d)) != d {
			return tensorInfo{}, fmt.Errorf("shape %v: dimension %d does not fit an int", *e.Shape, d)
		}
		shape[i] = int(d)
	}
	elems, size, err := byteSize(shape, dt)
	if err != nil {
		return tensorInfo{}, err
	}
	off := *e.DataOffsets
	if len(off) != 2 {
		return tensorInfo{}, fmt.Errorf("data_offsets %v must be [begin, end]", off)
	}
	begin, end := off[0], off[1]
	if begin < 0 || end < begin || end > dataLen {
		return tensorInfo{}, fmt.Errorf("data_offsets [%d, %d] outside the %d-byte data section", begin, end, dataLen)
	}
	if end-begin != size {
		return tensorInfo{}, fmt.Errorf("data_offsets [%d, %d] span %d bytes, but %s shape %v needs %d", begin, end, end-begin, dt, shape, size)
	}
	return tensorInfo{dtype: dt, shape: shape, elems: elems, begin: begin, end: end}, nil
}

// byteSize returns the element count and byte size of a tensor, refusing
// counts that overflow.
func byteSize(shape []int, dt DType) (elems int, size int64, err error) {
	elems = 1
	if slices.Contains(shape, 0) {
		return 0, 0, nil
	}
	for _, d := range shape {
		if d < 0 {
			return 0, 0, fmt.Errorf("shape %v has negative dimension %d", shape, d)
		}
		if elems > math.MaxInt64/d {
			return 0, 0, fmt.Errorf("shape %v: element count overflows int64", shape)
		}
		elems *= d
	}
	if int64(elems) > math.MaxInt64/int64(dt.Size()) {
		return 0, 0, fmt.Errorf("shape %v of %s: byte size overflows int64", shape, dt)
	}
	return elems, int64(elems) * int64(dt.Size()), nil
}

// checkOverlap refuses two tensors sharing a byte of the data section.
func checkOverlap(h *header) error {
	order := slices.Clone(h.names)
	slices.SortFunc(order, func(a, b string) int {
		ta, tb := h.tensors[a], h.tensors[b]
		if ta.begin != tb.begin {
			return cmp.Compare(ta.begin, tb.begin)
		}
		return cmp.Compare(ta.end, tb.end)
	})
	var prevEnd int64
	prev := ""
	for _, name := range order {
		t := h.tensors[name]
		if t.begin == t.end {
			continue // an empty tensor occupies no bytes
		}
		if t.begin < prevEnd {
			p := h.tensors[prev]
			return fmt.Errorf("tensors %q [%d, %d] and %q [%d, %d] overlap", prev, p.begin, p.end, name, t.begin, t.end)
		}
		prevEnd, prev = t.end, name
	}
	return nil
}
