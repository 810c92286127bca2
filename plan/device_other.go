//go:build !linux

package plan

import (
	"errors"
	"runtime"
)

// HostMemoryBytes is the total RAM of this host; it is read on Linux only.
func HostMemoryBytes() (int64, error) {
	return 0, errors.New("host memory size is not readable on " + runtime.GOOS + "; give --device-memory")
}
