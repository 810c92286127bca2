//go:build unix

package safetensors

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the whole file read-only and shared.
func mapFile(f *os.File, size int64) ([]byte, func([]byte) error, error) {
	if forceRead || int64(int(size)) != size {
		return nil, nil, errNoMmap
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, unix.Munmap, nil
}
