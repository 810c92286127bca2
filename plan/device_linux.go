//go:build linux

package plan

import (
	"fmt"
	"syscall"
)

// HostMemoryBytes is the total RAM of this host, the CPU device's size when
// no memory limit is given.
func HostMemoryBytes() (int64, error) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("read host memory size: %w; give --device-memory", err)
	}
	return int64(si.Totalram) * int64(si.Unit), nil
}
