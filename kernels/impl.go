package kernels

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
)

// ImplEnv is the environment variable that chooses the kernel implementation
// at start-up: "ref" forces the pure-Go reference, "avx2" or "avx512" ask for
// that instruction set (refused at start-up when the CPU lacks it), and
// "auto" or unset picks the widest the CPU supports.
const ImplEnv = "CPMLA_KERNELS"

// level is an implementation: the pure-Go reference or an assembly level.
type level int32

const (
	levelRef level = iota
	levelAVX2
	levelAVX512
)

// levelNames are the names Impl reports and SetImpl and ImplEnv accept.
var levelNames = [...]string{levelRef: "ref", levelAVX2: "avx2", levelAVX512: "avx512"}

func (l level) String() string { return levelNames[l] }

// active is the implementation every dispatching kernel uses.
var active atomic.Int32

func activeLevel() level { return level(active.Load()) }

func init() {
	l, err := resolveLevel(os.Getenv(ImplEnv))
	if err != nil {
		panic(fmt.Sprintf("kernels: %s: %v", ImplEnv, err))
	}
	active.Store(int32(l))
}

// parseImpl maps an implementation name (case and surrounding space ignored)
// to a level; "" and "auto" mean the best supported one (auto = true).
func parseImpl(name string) (l level, auto bool, err error) {
	switch s := strings.ToLower(strings.TrimSpace(name)); s {
	case "", "auto":
		return bestLevel(), true, nil
	case "ref", "go", "pure-go":
		return levelRef, false, nil
	case "avx2":
		return levelAVX2, false, nil
	case "avx512", "avx-512":
		return levelAVX512, false, nil
	default:
		return levelRef, false, fmt.Errorf("unknown kernel implementation %q; use one of auto, ref, avx2, avx512", name)
	}
}

// resolveLevel is parseImpl plus the check that the CPU supports the level.
func resolveLevel(name string) (level, error) {
	l, auto, err := parseImpl(name)
	if err != nil || auto {
		return l, err
	}
	if !supported(l) {
		return levelRef, fmt.Errorf("kernel implementation %q needs CPU support this machine lacks (best available: %q); use %s=%s or %s=ref",
			l, bestLevel(), ImplEnv, bestLevel(), ImplEnv)
	}
	return l, nil
}

// Impl reports the implementation the dispatching kernels use: "ref",
// "avx2" or "avx512".
func Impl() string { return activeLevel().String() }

// Accelerated reports whether an assembly implementation is active.
func Accelerated() bool { return activeLevel() != levelRef }

// SetImpl switches every kernel to the named implementation (see ImplEnv for
// the names) and returns the previous one. It is meant for start-up and for
// tests that run the reference and the fast path side by side: results are
// batch-invariant only among calls made under the same implementation, so do
// not switch while a model is running.
func SetImpl(name string) (previous string, err error) {
	l, err := resolveLevel(name)
	if err != nil {
		return Impl(), fmt.Errorf("kernels: SetImpl: %w", err)
	}
	return level(active.Swap(int32(l))).String(), nil
}
