package kernels

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// TestInterleavedWeightsOnHugePages checks that InterleaveBF16 leaves its copy
// of a weight of several huge pages backed, at least in part, by huge pages,
// where the kernel allows it: the VMA holding the copy counts AnonHugePages
// in /proc/self/smaps. Hosts whose kernel refuses (huge pages "never", or
// MADV_COLLAPSE unknown: Linux older than 6.1; no free huge page) are
// skipped, with the reason.
func TestInterleavedWeightsOnHugePages(t *testing.T) {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		t.Skipf("transparent huge pages are off on this host (%q, %v)", b, err)
	}
	// One aligned huge page of a probe slice, written, then collapsed: a
	// kernel without MADV_COLLAPSE (EINVAL) or without a free huge page
	// (EAGAIN, ENOMEM) is this host's limit, not the code's.
	probe := make([]byte, 2*hugePageBytes)
	for i := range probe {
		probe[i] = 1
	}
	off := int((hugePageBytes - uintptr(unsafe.Pointer(&probe[0]))%hugePageBytes) % hugePageBytes)
	if err := syscall.Madvise(probe[off:off+hugePageBytes], madvCollapse); err != nil {
		t.Skipf("this host cannot collapse a written page into a huge page (MADV_COLLAPSE: %v)", err)
	}
	// The probe's page does not promise the copy's: with memory
	// fragmented by earlier tests the kernel may have no free huge page
	// left when InterleaveBF16 asks (EAGAIN, ENOMEM).
	var asked bool
	var collapseErr error
	defer func(f func([]uint16) error) { hugePages = f }(hugePages)
	hugePages = func(v []uint16) error {
		asked = true
		collapseErr = toHugePages(v)
		return collapseErr
	}
	const rows, cols = 1024, 8192 // 16 MiB of bf16
	_, ilv := ilvMatrices(t, 95, rows, cols)
	switch {
	case !asked:
		t.Fatal("InterleaveBF16 did not ask for huge pages for its copy")
	case errors.Is(collapseErr, syscall.EAGAIN) || errors.Is(collapseErr, syscall.ENOMEM):
		t.Skipf("no free huge page for the interleaved copy at that moment (MADV_COLLAPSE: %v)", collapseErr)
	case collapseErr != nil:
		t.Fatalf("MADV_COLLAPSE of the interleaved copy: %v", collapseErr)
	}
	// MADV_HUGEPAGE splits the mapping at the copy's first whole huge
	// page, so the part before it (when the copy does not start on one)
	// is a mapping of its own, without huge pages: look at the page.
	addr := (uintptr(unsafe.Pointer(&ilv.BF16[0])) + hugePageBytes - 1) &^ (hugePageBytes - 1)
	kb, err := anonHugeKiB(addr)
	if err != nil {
		t.Fatal(err)
	}
	if kb < hugePageBytes>>10 {
		t.Errorf("the interleaved copy's mapping has %d KiB of huge pages; want at least one 2 MiB page", kb)
	}
}

// anonHugeKiB returns the AnonHugePages of the mapping of /proc/self/smaps
// that holds addr.
func anonHugeKiB(addr uintptr) (int, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			a, errA := strconv.ParseUint(lo, 16, 64)
			b, errB := strconv.ParseUint(hi, 16, 64)
			if errA == nil && errB == nil {
				in = uint64(addr) >= a && uint64(addr) < b
				continue
			}
		}
		if in && fields[0] == "AnonHugePages:" && len(fields) >= 2 {
			return strconv.Atoi(fields[1])
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no mapping of /proc/self/smaps holds the interleaved copy")
}
