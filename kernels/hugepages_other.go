//go:build !linux

package kernels

// toHugePages does nothing: huge pages are asked for on Linux only.
func toHugePages(v []uint16) error { return nil }
