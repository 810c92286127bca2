package engine

import (
	"fmt"
	"math"
	"runtime/debug"

	"github.com/cpmla/cpmla/plan"
)

// Available is the memory this process may still use, and the limit that
// decides it.
type Available struct {
	Bytes  int64
	Source string // e.g. "host RAM 23.54 GiB" or "ulimit -v (RLIMIT_AS) 2.00 GiB, 1.71 GiB not yet mapped"
	// Unmapped is set when Bytes is what remains beyond what this process
	// has already mapped (an address-space limit), rather than a total.
	Unmapped bool
}

func (a Available) String() string { return plan.FormatGiB(a.Bytes) + " (" + a.Source + ")" }

// limitCandidate is one limit on this process's memory.
type limitCandidate struct {
	bytes    int64
	source   string
	unmapped bool
}

// AvailableMemory is the smallest of the limits on this process's memory:
// the host's RAM, the memory limit of its cgroup (v2 memory.max or v1
// memory.limit_in_bytes), its address-space limit (ulimit -v, less what is
// already mapped) and the Go runtime's soft limit (GOMEMLIMIT). Sizes
// derived from it cannot make an allocation fail under any of these limits.
func AvailableMemory() (Available, error) {
	host, err := plan.HostMemoryBytes()
	if err != nil {
		return Available{}, err
	}
	best := limitCandidate{bytes: host, source: "host RAM " + plan.FormatGiB(host)}
	cands := processLimits()
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		cands = append(cands, limitCandidate{bytes: l, source: "GOMEMLIMIT " + plan.FormatGiB(l)})
	}
	for _, c := range cands {
		if c.bytes < best.bytes {
			best = c
		}
	}
	if best.bytes < 0 {
		best.bytes = 0
	}
	return Available{Bytes: best.bytes, Source: best.source, Unmapped: best.unmapped}, nil
}

// formatNeed prints bytes as GiB with the exact count, or "more than
// 8 EiB" when a product saturated.
func formatNeed(b int64) string {
	if b == math.MaxInt64 {
		return "more than 8 EiB"
	}
	return fmt.Sprintf("%s (%d bytes)", plan.FormatGiB(b), b)
}
