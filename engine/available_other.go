//go:build !linux

package engine

// processLimits: no cgroup or address-space limits are read on this system.
func processLimits() []limitCandidate { return nil }
