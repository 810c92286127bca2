package boundedread

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// TooLargeError refuses input longer than the limit it was read with.
type TooLargeError struct {
	Name  string // what was read: a path, or what a stream is
	Size  int64  // its size, when known before reading (a regular file's); else -1
	Limit int64
}

func (e *TooLargeError) Error() string {
	if e.Size >= 0 {
		return fmt.Sprintf("%s has %d bytes, more than the %d it may have", e.Name, e.Size, e.Limit)
	}
	return fmt.Sprintf("%s is longer than the %d bytes read", e.Name, e.Limit)
}

// Advise appends advice (what to do instead) to err when err refuses input
// as too large, and returns any other error unchanged.
func Advise(err error, advice string) error {
	var tl *TooLargeError
	if errors.As(err, &tl) {
		return fmt.Errorf("%w; %s", err, advice)
	}
	return err
}

// All reads r to its end, name saying what it is: at most limit bytes,
// refusing more with a *TooLargeError after reading limit+1.
func All(r io.Reader, name string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, &TooLargeError{Name: name, Size: -1, Limit: limit}
	}
	return data, nil
}

// File reads the regular file name of fsys whole, refusing it by its size
// before reading when it has more than limit bytes, and refusing anything
// that is not a regular file.
func File(fsys fs.FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return opened(f, name, limit, true)
}

// Path reads the file at path (of this machine's file system) whole, up to
// limit bytes. A regular file is refused by its size before reading; a
// pipe or a device (/dev/stdin) is read up to limit+1 bytes; a directory is
// refused.
func Path(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return opened(f, path, limit, false)
}

func opened(f fs.File, name string, limit int64, regularOnly bool) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch mode := st.Mode(); {
	case mode.IsDir():
		return nil, fmt.Errorf("%s is a directory, not a file", name)
	case regularOnly && !mode.IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (%s)", name, mode.Type())
	case mode.IsRegular() && st.Size() > limit:
		return nil, &TooLargeError{Name: name, Size: st.Size(), Limit: limit}
	}
	return All(f, name, limit)
}
