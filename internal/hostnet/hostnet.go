package hostnet

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Net is a bridge and the hosts joined to it.
type Net struct {
	t      testing.TB
	prefix string // of every namespace and interface name
	Subnet string // e.g. 10.203.0.0/24
	Bridge string
	Hosts  []Host
}

// Host is one network namespace on the bridge.
type Host struct {
	NS   string // network namespace name
	IP   string // its address on the bridge
	link string // the veth end on the bridge side
}

// run runs ip/tc with args and returns its combined output on failure.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// New builds n hosts on a fresh bridge, or skips the test if this machine
// cannot. Every name carries this process's id, so parallel test binaries
// do not collide; the clean-up removes them and kills what runs inside.
func New(t testing.TB, n int) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) not found: apt-get install -y iproute2")
	}
	pid := os.Getpid() % 100000
	nw := &Net{t: t, prefix: fmt.Sprintf("cpn%d", pid), Subnet: fmt.Sprintf("10.%d.%d.0/24", 200+pid%50, pid%250)}
	base := strings.TrimSuffix(nw.Subnet, "0/24")
	nw.Bridge = nw.prefix + "b"
	t.Cleanup(nw.remove)
	if err := run("ip", "link", "add", nw.Bridge, "type", "bridge"); err != nil {
		t.Skipf("cannot create a bridge here: %v", err)
	}
	must := func(name string, args ...string) {
		if err := run(name, args...); err != nil {
			t.Fatal(err)
		}
	}
	must("ip", "addr", "add", base+"254/24", "dev", nw.Bridge)
	must("ip", "link", "set", nw.Bridge, "up")
	for i := range n {
		h := Host{NS: fmt.Sprintf("%sh%d", nw.prefix, i), IP: base + strconv.Itoa(i+1), link: fmt.Sprintf("%sv%d", nw.prefix, i)}
		peer := fmt.Sprintf("%sp%d", nw.prefix, i)
		if err := run("ip", "netns", "add", h.NS); err != nil {
			t.Skipf("cannot create a network namespace here: %v", err)
		}
		nw.Hosts = append(nw.Hosts, h)
		must("ip", "link", "add", h.link, "type", "veth", "peer", "name", peer)
		must("ip", "link", "set", peer, "netns", h.NS)
		must("ip", "link", "set", h.link, "master", nw.Bridge)
		must("ip", "link", "set", h.link, "up")
		in := func(args ...string) { must("ip", append([]string{"netns", "exec", h.NS, "ip"}, args...)...) }
		in("link", "set", peer, "name", "eth0")
		in("addr", "add", h.IP+"/24", "dev", "eth0")
		in("link", "set", "eth0", "up")
		in("link", "set", "lo", "up")
	}
	return nw
}

// remove kills every process in the hosts and deletes what New made.
func (nw *Net) remove() {
	for i, h := range nw.Hosts {
		nw.Kill(i)
		run("ip", "link", "del", h.link)
		run("ip", "netns", "del", h.NS)
	}
	run("ip", "link", "del", nw.Bridge)
}

// Exec is the command prefix that runs a program on host i.
func (nw *Net) Exec(i int) []string { return []string{"ip", "netns", "exec", nw.Hosts[i].NS} }

// NSPrefix is the host namespaces' common prefix: host i is NSPrefix+"h"+i.
func (nw *Net) NSPrefix() string { return nw.prefix }

// Cut takes host i's link down: its packets go nowhere until Restore.
func (nw *Net) Cut(i int) error { return run("ip", "link", "set", nw.Hosts[i].link, "down") }

// Restore brings host i's link back up.
func (nw *Net) Restore(i int) error { return run("ip", "link", "set", nw.Hosts[i].link, "up") }

// Slow delays what host i receives: with netem a fixed delay, else (the
// kernel has no sch_netem) a tbf rate limit of bitsPerSecond, which delays
// each message by its size over the rate. It says which it did.
func (nw *Net) Slow(i int, delayMS, bitsPerSecond int) (string, error) {
	link := nw.Hosts[i].link
	if err := run("tc", "qdisc", "add", "dev", link, "root", "netem", "delay", fmt.Sprintf("%dms", delayMS)); err == nil {
		return fmt.Sprintf("netem delay %d ms", delayMS), nil
	} else if !strings.Contains(err.Error(), "unknown") {
		return "", err
	}
	rate := fmt.Sprintf("%dbit", bitsPerSecond)
	if err := run("tc", "qdisc", "add", "dev", link, "root", "tbf", "rate", rate, "burst", "1540", "limit", "1000000"); err != nil {
		return "", fmt.Errorf("neither netem nor tbf: %w", err)
	}
	return fmt.Sprintf("no netem in this kernel: tbf rate limit %s", rate), nil
}

// Kill sends SIGKILL to every process in host i's namespace.
func (nw *Net) Kill(i int) {
	out, err := exec.Command("ip", "netns", "pids", nw.Hosts[i].NS).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// MPIRunArgs are the mpirun options that place rank r of a job on host r
// (prefix the program with RankWrapper) and keep every byte between ranks
// on the hosts' links: TCP only (no shared memory), on the bridge's subnet,
// with the PMIx server reachable from the namespaces.
func (nw *Net) MPIRunArgs() []string {
	return []string{"--mca", "btl", "self,tcp", "--mca", "pml", "ob1",
		"--mca", "btl_tcp_if_include", nw.Subnet, "--mca", "oob_tcp_if_include", nw.Subnet,
		"-x", "PMIX_MCA_ptl_tcp_remote_connections", "-x", "PMIX_MCA_ptl_tcp_if_include"}
}

// MPIRunEnv is the environment mpirun needs for MPIRunArgs.
func (nw *Net) MPIRunEnv() []string {
	return []string{"PMIX_MCA_ptl_tcp_remote_connections=1", "PMIX_MCA_ptl_tcp_if_include=" + nw.Subnet}
}

// RankWrapper runs the program that follows it on the host of its MPI rank.
func (nw *Net) RankWrapper() []string {
	return []string{"/bin/sh", "-c", `exec ip netns exec "` + nw.prefix + `h$OMPI_COMM_WORLD_RANK" "$0" "$@"`}
}
