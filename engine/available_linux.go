//go:build linux

package engine

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cpmla/cpmla/plan"
)

// processLimits are the cgroup and address-space limits of this process.
func processLimits() []limitCandidate {
	var out []limitCandidate
	if c, ok := cgroupLimit(); ok {
		out = append(out, c)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &rl); err == nil && rl.Cur < 1<<62 {
		limit := int64(rl.Cur)
		left := limit - mappedBytes()
		out = append(out, limitCandidate{bytes: left, source: "ulimit -v (RLIMIT_AS) " + plan.FormatGiB(limit) + ", " + plan.FormatGiB(left) + " not yet mapped", unmapped: true})
	}
	return out
}

// mappedBytes is this process's virtual size (VmSize), 0 if unknown.
func mappedBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupLimit reads the memory limit of this process's cgroup, v2 first.
func cgroupLimit() (limitCandidate, bool) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return limitCandidate{}, false
	}
	var v2, v1 string
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1 = parts[2]
		}
	}
	read := func(paths ...string) (int64, string, bool) {
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			s := strings.TrimSpace(string(b))
			if s == "max" {
				return 0, "", false
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 || n >= 1<<62 {
				return 0, "", false
			}
			return n, p, true
		}
		return 0, "", false
	}
	if v2 != "" {
		if n, p, ok := read(filepath.Join("/sys/fs/cgroup", v2, "memory.max"), "/sys/fs/cgroup/memory.max"); ok {
			return limitCandidate{bytes: n, source: "cgroup " + p + " " + plan.FormatGiB(n)}, true
		}
	}
	if v1 != "" {
		if n, p, ok := read(filepath.Join("/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes"), "/sys/fs/cgroup/memory/memory.limit_in_bytes"); ok {
			return limitCandidate{bytes: n, source: "cgroup " + p + " " + plan.FormatGiB(n)}, true
		}
	}
	return limitCandidate{}, false
}
