package boundedread_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/internal/boundedread"
)

// countingReader counts the bytes read from it; it never ends.
type countingReader struct{ n int64 }

func (r *countingReader) Read(p []byte) (int, error) {
	r.n += int64(len(p))
	return len(p), nil
}

// TestAll reads streams at, under and over the limit, and an endless one,
// which must be refused after limit+1 bytes.
func TestAll(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		limit int64
		want  string
		err   string
	}{
		{"empty", "", 0, "", ""},
		{"under", "abc", 4, "abc", ""},
		{"at", "abcd", 4, "abcd", ""},
		{"over", "abcde", 4, "", "body is longer than the 4 bytes read"},
		{"zero limit", "a", 0, "", "body is longer than the 0 bytes read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := boundedread.All(strings.NewReader(tc.in), "body", tc.limit)
			checkRead(t, got, err, tc.want, tc.err)
		})
	}
	r := &countingReader{}
	_, err := boundedread.All(r, "endless", 1000)
	var tl *boundedread.TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 1000 || tl.Size != -1 {
		t.Errorf("endless stream: %v, want a TooLargeError at 1000", err)
	}
	if r.n > 1000+512 { // io.ReadAll's first buffer is 512 bytes
		t.Errorf("read %d bytes of an endless stream with limit 1000", r.n)
	}
}

// TestFile covers an fs.FS's files: regular ones under, at and over the
// limit (refused by size), a directory and a file that is not regular.
func TestFile(t *testing.T) {
	fsys := fstest.MapFS{
		"a.json":  {Data: []byte("abcd")},
		"dir/x":   {Data: []byte("x")},
		"fifo":    {Data: []byte("p"), Mode: fs.ModeNamedPipe},
		"big.bin": {Data: []byte("0123456789")},
	}
	cases := []struct {
		name, file string
		limit      int64
		want, err  string
	}{
		{"regular", "a.json", 4, "abcd", ""},
		{"over by size", "big.bin", 9, "", "big.bin has 10 bytes, more than the 9 it may have"},
		{"directory", "dir", 100, "", "dir is a directory, not a file"},
		{"not regular", "fifo", 100, "", "fifo is not a regular file (p---------)"},
		{"missing", "none", 100, "", "open none: file does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := boundedread.File(fsys, tc.file, tc.limit)
			checkRead(t, got, err, tc.want, tc.err)
		})
	}
}

// growingFS is a file whose Stat reports fewer bytes than it yields, as a
// file appended to while it is read does.
type growingFS struct{}

func (growingFS) Open(name string) (fs.File, error) {
	return &growingFile{Reader: strings.NewReader("0123456789")}, nil
}

type growingFile struct{ *strings.Reader }

func (f *growingFile) Stat() (fs.FileInfo, error) { return growingInfo{}, nil }
func (f *growingFile) Close() error               { return nil }

type growingInfo struct{ fs.FileInfo }

func (growingInfo) Size() int64       { return 4 }
func (growingInfo) Mode() fs.FileMode { return 0 }

// TestFileGrows: a file that yields more than its size and the limit is
// refused after limit+1 bytes.
func TestFileGrows(t *testing.T) {
	_, err := boundedread.File(growingFS{}, "f", 5)
	if d := cmp.Diff("f is longer than the 5 bytes read", errText(err)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestPath reads this machine's files: a regular file, one over the limit,
// a directory, and a device that never ends (refused after limit+1).
func TestPath(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.txt")
	if err := os.WriteFile(small, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := boundedread.Path(small, 5); err != nil || string(got) != "hello" {
		t.Errorf("small: %q, %v", got, err)
	}
	_, err := boundedread.Path(small, 4)
	if d := cmp.Diff(small+" has 5 bytes, more than the 4 it may have", errText(err)); d != "" {
		t.Errorf("over (-want +got):\n%s", d)
	}
	if _, err := boundedread.Path(dir, 4); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: %v", err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		_, err := boundedread.Path("/dev/zero", 1<<16)
		if d := cmp.Diff("/dev/zero is longer than the 65536 bytes read", errText(err)); d != "" {
			t.Errorf("/dev/zero (-want +got):\n%s", d)
		}
	}
}

// TestAdvise: advice is added to a refusal by size and to nothing else.
func TestAdvise(t *testing.T) {
	_, tooLarge := boundedread.All(strings.NewReader("abc"), "x", 1)
	other := io.ErrUnexpectedEOF
	if d := cmp.Diff("x is longer than the 1 bytes read; split it", errText(boundedread.Advise(tooLarge, "split it"))); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if got := boundedread.Advise(other, "split it"); got != other {
		t.Errorf("Advise changed %v into %v", other, got)
	}
	if boundedread.Advise(nil, "split it") != nil {
		t.Error("Advise(nil) is not nil")
	}
}

// checkRead compares a read's error text (empty for none) and, when the
// error is as wanted, its bytes.
func checkRead(t *testing.T, got []byte, err error, want, wantErr string) {
	t.Helper()
	if d := cmp.Diff(wantErr, errText(err)); d != "" {
		t.Fatalf("error (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want, string(got)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
