//go:build mpi

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpmla/cpmla/comm/mpi"
	"github.com/cpmla/cpmla/internal/hostnet"
)

// A server in front of an MPI job on two hosts (network namespaces): when
// the follower's link is cut, the stream in flight ends with an error event
// naming the rank that did not arrive, new requests get 503 engine_failed
// and /health 503, and the job ends with that error within the collective
// timeout plus the server's grace, never a hang.
func TestServeAcrossHostsWhenALinkIsCut(t *testing.T) {
	if mpi.Launched() {
		t.Skip("starts an MPI job; already inside one")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not found; apt-get install -y openmpi-bin libopenmpi-dev")
	}
	nw := hostnet.New(t, 2)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{"--oversubscribe", "--allow-run-as-root"}, nw.MPIRunArgs()...)
	args = append(args, "-x", runAsCLI, "-np", "2")
	args = append(append(args, nw.RankWrapper()...), bin, "serve", "--comm", "mpi", "--model", tinyCheckpoint(t),
		"--tensor-parallel-size", "2", "--host", nw.Hosts[0].IP, "--port", "0", "--collective-timeout", timeout.String(),
		"--max-model-len", "4096", "--max-num-batched-tokens", "64", "--max-num-seqs", "4", "--memory-limit", "512MiB")
	cmd := exec.CommandContext(ctx, "mpirun", args...)
	cmd.Env = append(append(os.Environ(), runAsCLI+"=1"), nw.MPIRunEnv()...)
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
	var mu sync.Mutex
	var out strings.Builder
	urlCh := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		re := regexp.MustCompile(`cpmla serve: (http://[0-9.:]+)`)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlCh <- m[1]
			}
		}
	}()
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	var url string
	select {
	case url = <-urlCh:
	case <-done:
		t.Fatalf("the job ended before serving:\n%s", output())
	case <-time.After(90 * time.Second):
		t.Fatalf("no server after 90 s:\n%s", output())
	}
	hc := &http.Client{Timeout: time.Minute}
	post := func(body string) (*http.Response, error) {
		return hc.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	}
	// The job serves.
	resp, err := post(`{"prompt":[1,2,3],"max_tokens":3,"temperature":0}`)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: status %d", resp.StatusCode)
	}
	// A long stream; cut the follower's link once it flows.
	resp, err = post(`{"prompt":[1,2,3],"max_tokens":4000,"ignore_eos":true,"stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks := 0
	var cut time.Time
	var errEvent string
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "data: ") {
			continue
		}
		if strings.Contains(l, `"error"`) {
			errEvent = l
		}
		if chunks++; chunks == 5 {
			if err := nw.Cut(1); err != nil {
				t.Fatal(err)
			}
			cut = time.Now()
		}
	}
	resp.Body.Close()
	streamEnded := time.Since(cut)
	if cut.IsZero() {
		t.Fatalf("the stream ended after %d chunks, before the cut", chunks)
	}
	if !namesRank1(errEvent) {
		t.Errorf("the stream in flight ended without an error event naming rank 1 (last error event %q)", errEvent)
	}
	if streamEnded > timeout+5*time.Second {
		t.Errorf("the stream in flight ended %v after the cut, want within the collective timeout %v", streamEnded, timeout)
	}
	// New requests are refused with 503 while the server is still up.
	resp, err = post(`{"prompt":[1,2,3],"max_tokens":3}`)
	if err != nil {
		t.Fatalf("a request right after the failure: %v (the server is gone already)", err)
	}
	var eb struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || eb.Error.Code != "engine_failed" || !namesRank1(eb.Error.Message) {
		t.Errorf("new request after the cut: status %d %+v, want 503 engine_failed naming rank 1", resp.StatusCode, eb)
	}
	if resp, err := hc.Get(url + "/health"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/health after the cut: %v %v, want 503", resp, err)
	}
	// The job ends, failing, naming the rank.
	select {
	case <-done:
	case <-time.After(timeout + engineFailureGrace + 30*time.Second):
		t.Fatalf("the job did not end after the cut:\n%s", output())
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("the job ended with %v, want a failure", err)
	}
	if o := output(); !namesRank1(o) {
		t.Errorf("the job's output does not name rank 1:\n%s", o)
	}
	t.Logf("stream failed %v after the cut, job ended %v after it", streamEnded.Round(100*time.Millisecond), time.Since(cut).Round(100*time.Millisecond))
}

// namesRank1 reports whether a rank-0 error names rank 1 as the one that
// did not arrive or whose data did not.
func namesRank1(msg string) bool {
	return strings.Contains(msg, "ranks [1] did not arrive") || strings.Contains(msg, "exchange with rank 1 did not finish")
}
