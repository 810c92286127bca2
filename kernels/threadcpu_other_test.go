//go:build !linux

package kernels

// threadCPU reports no thread CPU time off Linux.
func threadCPU() (float64, bool) { return 0, false }
