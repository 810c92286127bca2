package kernels

import (
	"syscall"
	"unsafe"
)

// hugePageBytes is the size of an x86-64 transparent huge page.
const hugePageBytes = 2 << 20

// madvCollapse is Linux's MADV_COLLAPSE (6.1 and later), which the syscall
// package does not name.
const madvCollapse = 25

// toHugePages asks the kernel to back the whole 2 MiB pages inside v, weights
// the products stream once per step, with huge pages: MADV_HUGEPAGE for the
// pages faulted in later, MADV_COLLAPSE to move the ones already written
// into huge pages now (a copy, once, at load). Streaming a weight then takes
// one TLB entry per 2 MiB instead of one per 4 KiB. The advice changes no
// value and the memory stays the Go slice it was; a kernel that refuses it
// (huge pages disabled, a kernel older than 6.1, no free huge page at that
// moment) leaves ordinary pages. It returns the collapse's error, which
// callers may drop: the pages are advice, not a requirement.
func toHugePages(v []uint16) error {
	if len(v) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(v))
	start := uintptr(p)
	lo := (start + hugePageBytes - 1) &^ (hugePageBytes - 1)
	hi := (start + uintptr(len(v))*2) &^ (hugePageBytes - 1)
	if hi <= lo {
		return nil
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, lo-start)), hi-lo)
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	return syscall.Madvise(b, madvCollapse)
}
