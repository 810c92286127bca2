//go:build mpi

package mpi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
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
	// after ten rounds it says so, so the driver knows the links work.
	scenarios["stream"] = scenario{mpi.Options{Timeout: faultTimeout, AbortGrace: time.Second}, func(ctx context.Context, w comm.Group) error {
		src, dst := make([]float32, 1000), make([]float32, 1000)
		for it := range 3000 {
			if err := comm.AllReduce(ctx, w, dst, src); err != nil {
				return err
			}
			if it == 10 {
				fmt.Printf("PROGRESS rank=%d\n", w.Rank())
				os.Stdout.Sync()
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

// Ranks on separate hosts (network namespaces joined by a bridge): cutting
// a host's link, slowing it past the collective deadline, or killing the
// host each end the job with an error within the collective timeout (plus
// the abort grace and mpirun's teardown), and the ranks that still reach
// each other name the unreachable rank.
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
				if r == fmt.Sprint(victim) {
					continue
				}
				if got == "ok" {
					t.Errorf("rank %s reported success after the fault", r)
				}
				if strings.Contains(got, fmt.Sprintf("ranks [%d] did not arrive", victim)) || strings.Contains(got, fmt.Sprintf("exchange with rank %d did not finish", victim)) {
					named = true
				}
				// A slowed link lets every member arrive; the collective's
				// data exchange then stalls, and a survivor whose pending
				// exchanges include the slowed host's names every peer it
				// still waits on, the slowed host among them.
				if tc.name == "slow link" && pendingNames(got, victim) {
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

// pendingNames reports whether a rank's error says that its data exchange
// with a set of ranks holding victim did not finish.
func pendingNames(got string, victim int) bool {
	const lead = "data exchange with one or more of ranks ["
	i := strings.Index(got, lead)
	if i < 0 {
		return false
	}
	rest := got[i+len(lead):]
	j := strings.Index(rest, "]")
	if j < 0 {
		return false
	}
	return slices.Contains(strings.Fields(rest[:j]), fmt.Sprint(victim))
}
