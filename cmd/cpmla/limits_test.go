package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// startTiny starts `cpmla serve` on the tiny checkpoint with extra flags.
func startTiny(t *testing.T, extra ...string) *startedServer {
	t.Helper()
	return startOn(t, tinyCheckpoint(t), extra...)
}

// startOn starts `cpmla serve` on the checkpoint in dir with extra flags.
func startOn(t *testing.T, dir string, extra ...string) *startedServer {
	t.Helper()
	var o serveOptions
	cmd := &cobra.Command{}
	addServeFlags(cmd, &o)
	args := append([]string{"--model", dir, "--port", "0", "--max-model-len", "128", "--max-num-batched-tokens", "64",
		"--max-num-seqs", "4", "--max-queue", "16", "--memory-limit", "256MiB"}, extra...)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	s, err := startServe(o, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { s.close(5 * time.Second) })
	return s
}

// bench serve draws its random prompt ids from what the served model takes
// (its /v1/models card says), not from the whole tokenizer: against a model
// of 4096 ids under the 129,280-id tokenizer, every request succeeds.
func TestBenchServeDrawsIDsTheServedModelTakes(t *testing.T) {
	s := startTiny(t)
	out := runCLI(t, "bench", "serve", "--base-url", s.URL, "--num-prompts", "6", "--random-input-len", "24",
		"--random-output-len", "2", "--ignore-eos", "--disable-progress-bar", "--seed", "3")
	if !strings.Contains(out, "takes token ids below 4096") {
		t.Errorf("bench serve did not say which ids it draws:\n%s", out)
	}
	for _, want := range []string{"Successful requests:", "6", "Failed requests:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "is not a token id") || !failedIsZero(out) {
		t.Errorf("requests failed:\n%s", out)
	}
}

func failedIsZero(report string) bool {
	for _, l := range strings.Split(report, "\n") {
		if strings.HasPrefix(l, "Failed requests:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "Failed requests:")) == "0"
		}
	}
	return false
}

// A listen address that cannot work is refused before any weight loads,
// naming the flag.
func TestServeRefusesBadListenAddressFirst(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--host", "999.1.1.1"}, "--host \"999.1.1.1\" is neither an IP address nor a host name that resolves"},
		{[]string{"--port", "70000"}, "--port is 70000"},
		{[]string{"--http-header-timeout", "0s"}, "--http-header-timeout 0s must be positive"},
		{[]string{"--max-connections", "0"}, "--max-connections 0"},
	} {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		// A model that would take long to load: the refusal must come first.
		root.SetArgs(append([]string{"serve", "--model", "v32-mini"}, tc.args...))
		start := time.Now()
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %v: %v, want an error containing %q", tc.args, err, tc.want)
		}
		if el := time.Since(start); el > 3*time.Second || strings.Contains(out.String(), "KV") {
			t.Errorf("serve %v refused after %v with output %q: the engine was built first", tc.args, el, out.String())
		}
	}
}

// verify refuses a parallel size of 0 as generate and serve do, instead of
// reading it as 1.
func TestVerifyRefusesZeroSizesLikeGenerate(t *testing.T) {
	for _, cmd := range []string{"verify", "generate", "serve", "bench throughput"} {
		for _, flag := range []string{"--tensor-parallel-size", "--prefill-context-parallel-size", "--decode-context-parallel-size"} {
			root := newRoot()
			root.SetOut(&bytes.Buffer{})
			root.SetErr(&bytes.Buffer{})
			root.SetArgs(append(strings.Fields(cmd), flag, "0"))
			err := root.Execute()
			if want := flag + " 0 must be at least 1"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s %s 0: %v, want %q", cmd, flag, err, want)
			}
		}
	}
}

// Parallel sizes that would exhaust memory are refused by every engine
// command before anything is allocated, with the bytes needed and a
// setting that fits.
func TestTooManyRanksAreRefusedWithASettingThatFits(t *testing.T) {
	for _, tc := range []struct {
		cmd  []string
		want []string
	}{
		{[]string{"verify"}, []string{"needs", "bytes", "set --prefill-context-parallel-size"}},
		{[]string{"generate"}, []string{"1000 ranks in this process need", "bytes", "to at most"}},
		{[]string{"serve"}, []string{"1000 ranks in this process need", "bytes", "to at most"}},
		{[]string{"bench", "throughput"}, []string{"1000 ranks in this process need", "bytes", "to at most"}},
	} {
		root := newRoot()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append(tc.cmd, "--prefill-context-parallel-size", "1000"))
		start := time.Now()
		err := root.Execute()
		if err == nil {
			t.Fatalf("%v with 1000 in-process ranks succeeded", tc.cmd)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q lacks %q", tc.cmd, err, w)
			}
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("%v refused after %v: something was built first", tc.cmd, el)
		}
	}
}

// A preset whose random weights cannot fit is refused before any is made.
func TestModelInitRefusesWeightsThatCannotFit(t *testing.T) {
	root := newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"model", "init", "--preset", "glm-5", "--out", t.TempDir()})
	start := time.Now()
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "the random weights of --preset glm-5 needs") || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("model init of glm-5: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("refused after %v: weights were made first", el)
	}
}
