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
// "auto" or unset picks the widest the CPU supports. "avx512-amx" is
// avx512 with every bf16 weight product on AMX tiles (amx.go); auto never
// picks it.
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

// active is the implementation every dispatching kernel uses: its level in
// the low byte, and amxBit when the bf16 products run on AMX tiles (only
// with levelAVX512). One word, so that SetImpl switches both at
// once.
var active atomic.Int32

const amxBit = 1 << 8

func activeLevel() level { return choiceOf(active.Load()).l }

// amxActive reports whether the bf16 products run on AMX tiles.
func amxActive() bool { return choiceOf(active.Load()).amx }

// choice is an implementation: a level, and for levelAVX512 whether the
// bf16 products run on AMX tiles.
type choice struct {
	l   level
	amx bool
}

func (c choice) word() int32 {
	if c.amx {
		return int32(c.l) | amxBit
	}
	return int32(c.l)
}

// choiceOf is the choice a word of active holds.
func choiceOf(w int32) choice { return choice{l: level(w &^ amxBit), amx: w&amxBit != 0} }

func (c choice) String() string {
	if c.amx {
		return c.l.String() + "-amx"
	}
	return c.l.String()
}

func init() {
	c, err := resolveImpl(os.Getenv(ImplEnv))
	if err != nil {
		panic(fmt.Sprintf("kernels: %s: %v", ImplEnv, err))
	}
	active.Store(c.word())
}

// parseImpl maps an implementation name (case and surrounding space ignored)
// to a choice; "" and "auto" mean the best supported level (auto = true).
func parseImpl(name string) (c choice, auto bool, err error) {
	switch s := strings.ToLower(strings.TrimSpace(name)); s {
	case "", "auto":
		return choice{l: bestLevel()}, true, nil
	case "ref", "go", "pure-go":
		return choice{l: levelRef}, false, nil
	case "avx2":
		return choice{l: levelAVX2}, false, nil
	case "avx512", "avx-512":
		return choice{l: levelAVX512}, false, nil
	case "avx512-amx", "amx":
		return choice{l: levelAVX512, amx: true}, false, nil
	default:
		return choice{l: levelRef}, false, fmt.Errorf("unknown kernel implementation %q; use one of auto, ref, avx2, avx512, avx512-amx", name)
	}
}

// resolveImpl is parseImpl plus the check that the CPU (and for AMX the
// operating system) supports the choice.
func resolveImpl(name string) (choice, error) {
	c, auto, err := parseImpl(name)
	if err != nil || auto {
		return c, err
	}
	if !supported(c.l) {
		return choice{l: levelRef}, fmt.Errorf("kernel implementation %q needs CPU support this machine lacks (best available: %q); use %s=%s or %s=ref",
			c, bestLevel(), ImplEnv, bestLevel(), ImplEnv)
	}
	if c.amx {
		if err := enableAMX(); err != nil {
			return choice{l: levelRef}, fmt.Errorf("kernel implementation %q: %w; use %s=%s", c, err, ImplEnv, c.l)
		}
	}
	return c, nil
}

// Impl reports the implementation the dispatching kernels use: "ref",
// "avx2", "avx512" or "avx512-amx".
func Impl() string { return choiceOf(active.Load()).String() }

// Accelerated reports whether an assembly implementation is active.
func Accelerated() bool { return activeLevel() != levelRef }

// SetImpl switches every kernel to the named implementation (see ImplEnv for
// the names) and returns the previous one. It is meant for start-up and for
// tests that run the reference and the fast path side by side: results are
// batch-invariant only among calls made under the same implementation, so do
// not switch while a model is running.
func SetImpl(name string) (previous string, err error) {
	c, err := resolveImpl(name)
	if err != nil {
		return Impl(), fmt.Errorf("kernels: SetImpl: %w", err)
	}
	return choiceOf(active.Swap(c.word())).String(), nil
}
