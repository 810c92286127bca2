package main

import (
	"runtime"
	"testing"

	"github.com/cpmla/cpmla/kernels"
)

func TestThreadsPerRank(t *testing.T) {
	defer kernels.SetThreads(kernels.Threads())
	t.Setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "")
	for _, tc := range []struct{ flag, ranks, want int }{
		{3, 1, 3},
		{0, 1, max(1, runtime.NumCPU())},
		{0, 2 * runtime.NumCPU(), 1},
	} {
		if err := applyThreads(tc.flag, tc.ranks); err != nil {
			t.Fatal(err)
		}
		if got := kernels.Threads(); got != tc.want {
			t.Errorf("flag %d, %d local ranks: %d threads, want %d", tc.flag, tc.ranks, got, tc.want)
		}
	}
	t.Setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "64")
	if err := applyThreads(0, 1); err != nil || kernels.Threads() != max(1, runtime.NumCPU()/64) {
		t.Errorf("under mpirun with 64 local ranks: %d threads (%v)", kernels.Threads(), err)
	}
	if err := applyThreads(-1, 1); err == nil {
		t.Error("--threads-per-rank -1 accepted")
	}
}

// A rank that mpirun bound to one core still runs one goroutine more than
// its kernel threads at once, and a runtime with more Ps keeps them.
func TestRoomBesideKernels(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct{ procs, kernelThreads, want int }{
		{procs: 1, kernelThreads: 1, want: 2},
		{procs: 1, kernelThreads: 3, want: 4},
		{procs: 2, kernelThreads: 1, want: 2},
		{procs: 8, kernelThreads: 2, want: 8},
	} {
		runtime.GOMAXPROCS(tc.procs)
		roomBesideKernels(tc.kernelThreads)
		if got := runtime.GOMAXPROCS(0); got != tc.want {
			t.Errorf("GOMAXPROCS %d, %d kernel threads: GOMAXPROCS became %d, want %d", tc.procs, tc.kernelThreads, got, tc.want)
		}
	}
}
