package safetensors

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fileImage builds a safetensors file from a raw header and a data section
// of dataLen zero bytes.
func fileImage(header string, dataLen int) []byte {
	b := make([]byte, 8, 8+len(header)+dataLen)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, dataLen)...)
}

func entry(dtype string, shape string, begin, end int64) string {
	return fmt.Sprintf(`{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, dtype, shape, begin, end)
}

func TestHeaderRefusals(t *testing.T) {
	withLen := func(n uint64, rest string) []byte {
		b := binary.LittleEndian.AppendUint64(nil, n)
		return append(b, rest...)
	}
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "file is 0 bytes, shorter than the 8-byte header length"},
		{"7 bytes", []byte{1, 2, 3, 4, 5, 6, 7}, "file is 7 bytes"},
		{"length over cap", withLen(MaxHeaderBytes+1, "{}"), "header length 104857601 exceeds the limit of 104857600 bytes"},
		{"length over file", withLen(100, "{}"), "header length 100 exceeds the 2 bytes after the length field"},
		{"length 2^64-1", withLen(^uint64(0), "{}"), "exceeds the limit"},
		{"empty header", fileImage("", 0), "not a JSON object"},
		{"not utf-8", fileImage("{\"\xff\":1}", 0), "not valid UTF-8"},
		{"array", fileImage(`[1]`, 0), "not a JSON object: starts with ["},
		{"string", fileImage(`"x"`, 0), "not a JSON object"},
		{"truncated", fileImage(`{"a":`, 0), "header JSON"},
		{"trailing object", fileImage(`{} {}`, 0), "data after the JSON object"},
		{"trailing garbage", fileImage(`{}x`, 0), "header JSON after the object"},
		{"duplicate tensor", fileImage(`{"a":`+entry("U8", "[1]", 0, 1)+`,"a":`+entry("U8", "[1]", 1, 2)+`}`, 2), `duplicate key "a"`},
		{"metadata not a map", fileImage(`{"__metadata__":["a"]}`, 0), "__metadata__ must map strings to strings"},
		{"metadata non-string value", fileImage(`{"__metadata__":{"a":1}}`, 0), "__metadata__ must map strings to strings"},
		{"entry not an object", fileImage(`{"a":5}`, 0), `tensor "a": entry must be`},
		{"entry null", fileImage(`{"a":null}`, 0), `tensor "a": missing dtype`},
		{"missing shape", fileImage(`{"a":{"dtype":"U8","data_offsets":[0,0]}}`, 0), "missing shape"},
		{"missing offsets", fileImage(`{"a":{"dtype":"U8","shape":[0]}}`, 0), "missing data_offsets"},
		{"unknown field", fileImage(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"offsets":[0,0]}}`, 0), `unknown field "offsets"`},
		{"unknown dtype F8_E4M3FN", fileImage(`{"a":`+entry("F8_E4M3FN", "[1]", 0, 1)+`}`, 1), `unknown dtype "F8_E4M3FN" (supported: F32, F16, BF16, I32, I64, U8, F8_E4M3)`},
		{"unknown dtype F64", fileImage(`{"a":`+entry("F64", "[1]", 0, 8)+`}`, 8), `unknown dtype "F64"`},
		{"lower-case dtype", fileImage(`{"a":`+entry("f32", "[1]", 0, 4)+`}`, 4), `unknown dtype "f32"`},
		{"dtype not a string", fileImage(`{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, 4), "entry must be"},
		{"negative dimension", fileImage(`{"a":`+entry("U8", "[2,-1]", 0, 0)+`}`, 0), "shape [2 -1] has negative dimension -1"},
		{"fractional dimension", fileImage(`{"a":`+entry("U8", "[1.5]", 0, 1)+`}`, 1), "entry must be"},
		{"dimension beyond int64", fileImage(`{"a":`+entry("U8", "[9223372036854775808]", 0, 1)+`}`, 1), "entry must be"},
		{"element count overflow", fileImage(`{"a":`+entry("U8", "[4294967296,4294967296]", 0, 1)+`}`, 1), "element count overflows int64"},
		{"byte size overflow", fileImage(`{"a":`+entry("F32", "[4611686018427387904]", 0, 1)+`}`, 1), "byte size overflows int64"},
		{"one offset", fileImage(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}}`, 1), "data_offsets [0] must be [begin, end]"},
		{"three offsets", fileImage(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 2), "must be [begin, end]"},
		{"negative begin", fileImage(`{"a":`+entry("U8", "[1]", -1, 0)+`}`, 1), "data_offsets [-1, 0] outside the 1-byte data section"},
		{"end before begin", fileImage(`{"a":`+entry("U8", "[1]", 2, 1)+`}`, 4), "data_offsets [2, 1] outside"},
		{"end past data", fileImage(`{"a":`+entry("F32", "[2]", 0, 8)+`}`, 7), "data_offsets [0, 8] outside the 7-byte data section"},
		{"size mismatch", fileImage(`{"a":`+entry("F32", "[2]", 0, 4)+`}`, 8), "span 4 bytes, but F32 shape [2] needs 8"},
		{"overlap", fileImage(`{"a":`+entry("F32", "[2]", 0, 8)+`,"b":`+entry("U8", "[2]", 7, 9)+`}`, 9), `tensors "a" [0, 8] and "b" [7, 9] overlap`},
		{"same range", fileImage(`{"a":`+entry("U8", "[2]", 0, 2)+`,"b":`+entry("U8", "[2]", 0, 2)+`}`, 2), "overlap"},
	}
	dir := t.TempDir()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("case%02d.safetensors", i))
			if err := os.WriteFile(path, tc.file, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := Open(path)
			if err == nil {
				f.Close()
				t.Fatalf("Open accepted the file, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q, want it to contain %q and the path", err, tc.want)
			}
		})
	}
}

func TestHeaderAccepts(t *testing.T) {
	tests := []struct {
		name  string
		file  []byte
		names []string
	}{
		{"empty object", fileImage(`{}`, 0), nil},
		{"metadata only", fileImage(`{"__metadata__":{"format":"pt"}}`, 0), nil},
		{"null metadata", fileImage(`{"__metadata__":null}`, 0), nil},
		{"gap between tensors", fileImage(`{"b":`+entry("U8", "[1]", 4, 5)+`,"a":`+entry("U8", "[1]", 0, 1)+`}`, 8), []string{"a", "b"}},
		{"empty tensors share offsets", fileImage(`{"a":`+entry("F32", "[0,3]", 4, 4)+`,"b":`+entry("U8", "[8]", 0, 8)+`}`, 8), []string{"a", "b"}},
		{"scalar", fileImage(`{"s":`+entry("I64", "[]", 0, 8)+`}`, 8), []string{"s"}},
		{"zero dimension beside a huge one", fileImage(`{"z":`+entry("F32", "[0,9223372036854775807]", 0, 0)+`}`, 0), []string{"z"}},
		{"space padding and newlines", fileImage("{\n\"a\": "+entry("BF16", "[2]", 0, 4)+"}   \n  ", 4), []string{"a"}},
		{"empty name", fileImage(`{"":`+entry("U8", "[1]", 0, 1)+`}`, 1), []string{""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := parseFile(tc.file, int64(len(tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(h.names) != fmt.Sprint(tc.names) {
				t.Errorf("names %q, want %q", h.names, tc.names)
			}
			checkInvariants(t, h, int64(len(tc.file)))
		})
	}
}

// checkInvariants verifies everything an accepted header promises.
func checkInvariants(t *testing.T, h *header, fileSize int64) {
	t.Helper()
	if h.dataAt < 8 || h.dataAt > fileSize || h.dataAt+h.dataLen != fileSize {
		t.Fatalf("data section [%d, +%d) does not end the %d-byte file", h.dataAt, h.dataLen, fileSize)
	}
	if len(h.names) != len(h.tensors) {
		t.Fatalf("%d names for %d tensors", len(h.names), len(h.tensors))
	}
	used := map[int64]string{}
	for i, name := range h.names {
		if i > 0 && h.names[i-1] >= name {
			t.Fatalf("names not sorted and unique: %q then %q", h.names[i-1], name)
		}
		if name == metadataKey {
			t.Fatalf("metadata key listed as a tensor")
		}
		info, ok := h.tensors[name]
		if !ok {
			t.Fatalf("name %q has no tensor", name)
		}
		if !info.dtype.valid() {
			t.Fatalf("%q: invalid dtype", name)
		}
		elems := int64(1)
		for _, d := range info.shape {
			if d < 0 {
				t.Fatalf("%q: negative dimension in %v", name, info.shape)
			}
			elems *= int64(d) // cannot overflow: validated
		}
		if int64(info.elems) != elems {
			t.Fatalf("%q: elems %d, shape %v", name, info.elems, info.shape)
		}
		if info.begin < 0 || info.end < info.begin || info.end > h.dataLen {
			t.Fatalf("%q: offsets [%d, %d] outside %d bytes", name, info.begin, info.end, h.dataLen)
		}
		if info.end-info.begin != elems*int64(info.dtype.Size()) {
			t.Fatalf("%q: %d bytes for %d elements of %s", name, info.end-info.begin, elems, info.dtype)
		}
		if info.end-info.begin <= 1<<16 { // byte-level overlap check for small tensors
			for b := info.begin; b < info.end; b++ {
				if other, ok := used[b]; ok {
					t.Fatalf("%q and %q share byte %d", name, other, b)
				}
				used[b] = name
			}
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(fileImage(`{}`, 0))
	f.Add(fileImage(`{"__metadata__":{"format":"pt"},"a":`+entry("F32", "[2,2]", 0, 16)+`,"b":`+entry("U8", "[3]", 16, 19)+`}`, 19))
	f.Add(fileImage(`{"a":`+entry("F8_E4M3", "[4]", 0, 4)+`,"b":`+entry("BF16", "[0]", 4, 4)+`}    `, 4))
	f.Add(fileImage(`{"a":`+entry("F32", "[2]", 0, 8)+`,"b":`+entry("U8", "[2]", 7, 9)+`}`, 9))
	f.Add(fileImage(`{"a":`+entry("I64", "[4294967296,4294967296]", 0, 8)+`}`, 8))
	f.Fuzz(func(t *testing.T, file []byte) {
		h, err := parseFile(file, int64(len(file)))
		if err != nil {
			if h != nil {
				t.Fatal("error with a non-nil header")
			}
			return
		}
		checkInvariants(t, h, int64(len(file)))
	})
}
