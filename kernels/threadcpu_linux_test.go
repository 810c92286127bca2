package kernels

import "golang.org/x/sys/unix"

// threadCPU is the CPU time the calling OS thread has used, in seconds,
// and whether the platform reports it. On a shared machine it leaves out
// the time the thread waited for a core, which wall time counts.
func threadCPU() (float64, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9, true
}
