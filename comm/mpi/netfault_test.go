//go:build mpi

package mpi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/mpi"
	"github.com/cpmla/cpmla/internal/hostnet"
)

// faultTimeout is the collective deadline of the network-fault jobs.
const faultTimeout = 2 * time.Second

func init() {
	// Every rank all-reduces a 4 KB buffer every 20 ms for up to a minute;
	// after ten rounds it says so, so the driver knows the links work, and
	// pauses, so that the driver's fault is in place before the next
	// collective starts.
	scenarios["stream"] = scenario{mpi.Options{Timeout: faultTimeout, AbortGrace: time.Second}, func(ctx context.Context, w comm.Group) error {
		src, dst := make([]float32, 1000), make([]float32, 1000)
		for it := range 3000 {
			if err := comm.AllReduce(ctx, w, dst, src); err != nil {
				return err
			}
			if it == 10 {
				fmt.Printf("PROGRESS rank=%d\n", w.Rank())
				os.Stdout.Sync()
				time.Sleep(300 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return errors.New("the fault never came")
	}}
}

// faultJob runs the stream scenario with rank r on host r of nw, waits until
// every rank has made progress, applies fault, and returns the job's output,
// exit status and how long it took to end after the fault.
func faultJob(t *testing.T, nw *hostnet.Net, fault func()) (string, int, time.Duration) {
	t.Helper()
	np := len(nw.Hosts)
	ctx, cancel := context.WithTimeout(context.Background(), jobLimit)
	defer cancel()
	args := append(append([]string{}, mpirunArgs...), nw.MPIRunArgs()...)
	args = append(args, "-x", scenarioEnv, "-np", fmt.Sprint(np))
	args = append(append(args, nw.RankWrapper()...), os.Args[0])
	cmd := exec.CommandContext(ctx, "mpirun", args...)
	cmd.Env = append(append(os.Environ(), scenarioEnv+"=stream"), nw.MPIRunEnv()...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var out strings.Builder
	progress := 0
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var faulted time.Time
	for l := range lines {
		out.WriteString(l + "\n")
		if strings.HasPrefix(l, "PROGRESS ") {
			if progress++; progress == np {
				faulted = time.Now()
				fault()
			}
		}
	}
	err = cmd.Wait()
	ended := time.Since(faulted)
	if ctx.Err() != nil {
		t.Fatalf("the job did not end within %v; a rank hangs:\n%s", jobLimit, out.String())
	}
	if faulted.IsZero() {
		t.Fatalf("the ranks never all made progress over their links:\n%s", out.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	return out.String(), code, ended
}

// drainBurst sends two datagrams of 1400 bytes to ip (a host's discard
// port) from outside its namespace. A tbf rate limit starts with a full
// bucket of 1540 bytes: the ledger records of the next collective reach the
// slowed host at once and its data stalls instead, so the survivors stall
// in the ledger of the collective after (the host "did not arrive").
// Drained, the limit holds back the records the slowed host receives while
// its own record reaches the others: every member arrives and the
// survivors' data round stalls on their transfers with that host.
func drainBurst(t *testing.T, ip string) {
	// Unconnected, so that the host's port-unreachable answer to the
	// first datagram does not fail the second write.
	c, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	to := &net.UDPAddr{IP: net.ParseIP(ip), Port: 9}
	for range 2 {
		if _, err := c.WriteTo(make([]byte, 1400), to); err != nil {
			t.Error(err)
		}
	}
}

// pendingTransfers is how a rank lists the transfers of a stalled round.
var pendingTransfers = regexp.MustCompile(`; still pending in its [a-z ()-]+: (receiving \d+ bytes from|sending \d+ bytes to) rank \d+`)

// Ranks on separate hosts (network namespaces joined by a bridge): cutting
// a host's link, slowing it past the collective deadline, or killing the
// host each end the job with an error within the collective timeout (plus
// the abort grace and mpirun's teardown), and a rank that still reaches the
// others names the unreachable rank alone: as missing from the ledger, or,
// once every member arrived (a slowed link lets the small ledger records
// through), as the one peer whose direct transfers of the data round did
// not complete, since no transfer between two ranks waits on a third.
func TestNetworkFaults(t *testing.T) {
	if mpi.Launched() {
		t.Skip("starts MPI jobs; already inside one")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not found; apt-get install -y openmpi-bin libopenmpi-dev")
	}
	const victim = 2
	bound := faultTimeout + 15*time.Second // deadline, abort grace, teardown
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, nw *hostnet.Net)
	}{
		{"cut link", func(t *testing.T, nw *hostnet.Net) {
			if err := nw.Cut(victim); err != nil {
				t.Error(err)
			}
		}},
		{"slow link", func(t *testing.T, nw *hostnet.Net) {
			how, err := nw.Slow(victim, 5000, 4000)
			if err != nil {
				t.Error(err)
			}
			t.Log(how)
		}},
		{"slow link, burst drained", func(t *testing.T, nw *hostnet.Net) {
			how, err := nw.Slow(victim, 5000, 4000)
			if err != nil {
				t.Error(err)
			}
			t.Log(how)
			drainBurst(t, nw.Hosts[victim].IP)
		}},
		{"killed host", func(t *testing.T, nw *hostnet.Net) { nw.Kill(victim) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := hostnet.New(t, 4)
			out, code, ended := faultJob(t, nw, func() { tc.fault(t, nw) })
			if code == 0 {
				t.Errorf("the job exited 0 after the fault:\n%s", out)
			}
			if ended > bound {
				t.Errorf("the job ended %v after the fault, more than %v", ended, bound)
			}
			res := results(out)
			if got, ok := res[fmt.Sprint(victim)]; ok && strings.HasSuffix(got, "ok") {
				t.Errorf("the rank cut off reported success")
			}
			named := false
			for r, got := range res {
				t.Logf("rank %s: %s", r, got)
				if r == fmt.Sprint(victim) {
					continue
				}
				if got == "ok" {
					t.Errorf("rank %s reported success after the fault", r)
				}
				// Every member's ledger record had arrived but a transfer
				// of the data did not complete: the rank says with which
				// peers, and which transfers were still pending.
				if strings.Contains(got, "did not finish") && !pendingTransfers.MatchString(got) {
					t.Errorf("rank %s does not say which transfers were pending: %s", r, got)
				}
				if strings.Contains(got, fmt.Sprintf("ranks [%d] did not arrive", victim)) || strings.Contains(got, fmt.Sprintf("exchange with rank %d did not finish", victim)) {
					named = true
				}
			}
			// A killed process is reported by mpirun itself; a link fault by
			// the survivors' collective deadline.
			if !named && !(tc.name == "killed host" && strings.Contains(out, fmt.Sprintf("process rank %d ", victim))) {
				t.Errorf("no rank named rank %d as unreachable:\n%s", victim, out)
			}
			t.Logf("ended %v after the fault", ended.Round(100*time.Millisecond))
		})
	}
}
