//go:build !unix

package safetensors

import "os"

// mapFile is unavailable on this platform: files are read into memory.
func mapFile(*os.File, int64) ([]byte, func([]byte) error, error) {
	return nil, nil, errNoMmap
}
