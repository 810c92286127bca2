package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/model"
)

// runAsCLI is the environment variable that makes the test binary run as
// the cpmla command itself, so that tests can start it as a child process.
const runAsCLI = "CPMLA_TEST_RUN_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(runAsCLI) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// flagFuzzCap is the address-space limit (ulimit -v) of every child: a Go
// process maps about 1.2 GiB before it allocates anything, so this leaves
// it some 1.8 GiB to use.
const flagFuzzCap = 3 << 30

// baseArgs keep each command's run short when the fuzzed flag is accepted;
// a fuzzed flag given after them wins. "MODEL" is a tiny checkpoint.
var baseArgs = map[string][]string{
	"generate":         {"--model", "MODEL", "--max-tokens", "2"},
	"verify":           {"--model", "MODEL", "--prompt-lens", "1,5", "--decode-steps", "1", "--skip-oracle"},
	"serve":            {"--model", "MODEL", "--port", "0", "--max-num-seqs", "2", "--max-num-batched-tokens", "16", "--max-model-len", "64", "--memory-limit", "256MiB"},
	"bench throughput": {"--model", "MODEL", "--num-prompts", "2", "--input-len", "8", "--output-len", "2", "--max-num-seqs", "2", "--max-num-batched-tokens", "16", "--max-model-len", "64", "--memory-limit", "256MiB", "--quiet"},
	"bench latency":    {"--model", "MODEL", "--input-len", "4", "--output-len", "2", "--batch-size", "2", "--num-iters-warmup", "0", "--num-iters", "1", "--memory-limit", "256MiB", "--disable-detokenize"},
	"bench serve":      {"--base-url", "http://127.0.0.1:9", "--num-prompts", "2", "--random-input-len", "4", "--random-output-len", "2", "--disable-progress-bar"},
	"bench kernels":    {"--only", "^no-such-kernel$", "--rounds", "1", "--min-time", "1ms"},
	"bench comm":       {"--ranks", "2", "--tokens", "1", "--iterations", "1"},
	"eval":             {"--model", "MODEL", "--configs", "tp2", "--num-prompts", "1", "--max-tokens", "1", "--min-prompt-len", "2", "--max-prompt-len", "4", "--memory-limit", "256MiB"},
	"model init":       {"--out", "ck"},
	"model inspect":    {"--model", "MODEL"},
	"kernel run":       {"--case", "no-such-case.safetensors", "--out", "out.safetensors"},
	"kernel check":     {"--case", "no-such-case.safetensors", "--want", "no-such-want.safetensors"},
	"tokenize":         {"--text", "hello"},
	"detokenize":       {"--ids", "1,2"},
	"plan":             {},
}

// tinyCheckpoint writes a one-layer, four-head checkpoint with a 4096-token
// vocabulary: the fuzzed engine commands load it in milliseconds.
func tinyCheckpoint(t *testing.T) string { return tinyCheckpointWithVocab(t, 4096) }

// tinyCheckpointWithVocab is tinyCheckpoint with vocab token ids (129280
// serves every id of the DeepSeek-V3 tokenizer, chat markers included).
func tinyCheckpointWithVocab(t *testing.T, vocab int) string {
	t.Helper()
	cfg, err := config.Load(config.DefaultPreset)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NumLayers, cfg.NumHeads, cfg.IntermediateSize, cfg.VocabSize, cfg.HiddenSize = 1, 4, 256, vocab, 128
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := model.WriteCheckpoint(dir, cfg, model.RandomTensors(cfg, 3), 1<<30); err != nil {
		t.Fatal(err)
	}
	return dir
}

// extremes are the values every flag of a type is driven with.
var extremes = map[string][]string{
	"int":         {"-1", "0", "9223372036854775807"},
	"int64":       {"-1", "0", "9223372036854775807"},
	"uint64":      {"18446744073709551615"},
	"float64":     {"NaN", "-Inf", "1e308", "-1"},
	"duration":    {"-1s", "0s", "2562047h"},
	"string":      {"", "-1", "9223372036854775807", "99999999TiB", "/dev/zero"},
	"path":        {"", "/dev/zero", "/dev/null/x"},
	"stringArray": {"logits=99999999TiB", "=", "x=-1"},
	"intSlice":    {"0", "-1", "1000000000"},
	"size":        {"-1", "99999999TiB", "9223372036854775807"},
}

// pathFlags name files or directories: they get path extremes.
var pathFlags = map[string]bool{"messages": true, "out": true, "result-file": true, "svg": true, "case": true, "want": true, "text-file": true, "tokenizer": true, "output-json": true, "profile-file": true}

// crashMarks are what the Go runtime prints when a program dies of a panic
// or of memory exhaustion.
var crashMarks = []string{"panic:", "fatal error:", "goroutine ", "runtime: ", "[signal "}

// fuzzCase is one child run.
type fuzzCase struct {
	path []string // command path, e.g. ["bench", "serve"]
	args []string
}

func (c fuzzCase) String() string { return "cpmla " + strings.Join(append(c.path, c.args...), " ") }

// leafCommands lists every runnable command with its flags.
func leafCommands() map[string][]*pflag.Flag {
	out := map[string][]*pflag.Flag{}
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			p := append(append([]string(nil), path...), sub.Name())
			if !sub.HasSubCommands() {
				var flags []*pflag.Flag
				sub.Flags().VisitAll(func(f *pflag.Flag) {
					if f.Name != "help" {
						flags = append(flags, f)
					}
				})
				out[strings.Join(p, " ")] = flags
			}
			walk(sub, p)
		}
	}
	walk(newRoot(), nil)
	return out
}

// fuzzCases drives every flag of every command with the extreme values of
// its type, one flag at a time.
func fuzzCases(t *testing.T, modelDir string) []fuzzCase {
	var cases []fuzzCase
	cmds := leafCommands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		base, ok := baseArgs[name]
		if !ok {
			t.Errorf("no base arguments for cpmla %s: add it to baseArgs so its flags are fuzzed", name)
			continue
		}
		for _, f := range cmds[name] {
			if f.Value.Type() == "bool" {
				continue
			}
			typ := f.Value.Type()
			if typ == "string" && pathFlags[f.Name] {
				typ = "path"
			}
			vals, ok := extremes[typ]
			if !ok {
				t.Errorf("cpmla %s --%s has type %s, which the flag fuzz has no extreme values for", name, f.Name, f.Value.Type())
				continue
			}
			for _, v := range vals {
				if v == f.DefValue {
					continue // the default is not extreme
				}
				args := append(append([]string(nil), base...), "--"+f.Name+"="+v)
				for i, a := range args {
					if a == "MODEL" {
						args[i] = modelDir
					}
				}
				cases = append(cases, fuzzCase{path: strings.Fields(name), args: args})
			}
		}
	}
	return cases
}

// outcome is what one child did.
type outcome struct {
	c        fuzzCase
	exit     int
	timedOut bool
	stderr   string
	elapsed  time.Duration
}

// runCapped runs the test binary as cpmla under the address-space cap,
// stopping it after timeout (or, for serve, once it says it is serving).
func runCapped(bin, dir string, c fuzzCase, timeout time.Duration) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	script := fmt.Sprintf(`ulimit -v %d && exec "$0" "$@"`, flagFuzzCap>>10)
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", script, bin}, append(c.path, c.args...)...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), runAsCLI+"=1", "GOMAXPROCS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout := &serveWatcher{cancel: cancel}
	cmd.Stdout = stdout
	cmd.WaitDelay = time.Second
	start := time.Now()
	err := cmd.Run()
	o := outcome{c: c, stderr: stderr.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		o.timedOut = !stdout.served()
		return o
	}
	if ee, ok := err.(*exec.ExitError); ok {
		o.exit = ee.ExitCode()
	} else if err != nil {
		o.exit = -1
		o.stderr += "\n" + err.Error()
	}
	return o
}

// serveWatcher ends a child once it prints that it is serving: the flags
// were accepted and the server started.
type serveWatcher struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel func()
	ok     bool
}

func (w *serveWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), "cpmla serve: http://") {
		w.ok = true
		w.cancel()
	}
	return len(p), nil
}

func (w *serveWatcher) served() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ok
}

// Every flag of every command, driven with extreme values under a memory
// cap, either runs or ends with one clean line: never a Go panic, a runtime
// out-of-memory death, a stack dump or a hang.
func TestFlagsWithExtremeValuesUnderMemoryCap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts hundreds of processes")
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := fuzzCases(t, tinyCheckpoint(t))
	if len(cases) < 300 {
		t.Fatalf("only %d cases: the command tree lost its flags?", len(cases))
	}
	const timeout = time.Minute // a hang, not a slow machine
	work := make(chan fuzzCase)
	results := make(chan outcome)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				dir := t.TempDir()
				results <- runCapped(bin, dir, c, timeout)
			}
		}()
	}
	go func() {
		for _, c := range cases {
			work <- c
		}
		close(work)
		wg.Wait()
		close(results)
	}()
	var slow []outcome
	start := time.Now()
	for o := range results {
		for _, m := range crashMarks {
			if strings.Contains(o.stderr, m) {
				t.Errorf("%s crashed (%q in its output):\n%s", o.c, m, clip(o.stderr))
				break
			}
		}
		lines := strings.Split(strings.TrimRight(o.stderr, "\n"), "\n")
		switch {
		case o.timedOut:
			t.Errorf("%s neither finished nor failed within %v:\n%s", o.c, timeout, clip(o.stderr))
		case o.exit == 0:
		case o.exit != 1:
			t.Errorf("%s exited %d, want 0 or a refusal (1):\n%s", o.c, o.exit, clip(o.stderr))
		case !strings.HasPrefix(lines[len(lines)-1], "cpmla: "):
			t.Errorf("%s failed without a one-line cpmla: error:\n%s", o.c, clip(o.stderr))
		}
		slow = append(slow, o)
	}
	sort.Slice(slow, func(i, j int) bool { return slow[i].elapsed > slow[j].elapsed })
	t.Logf("%d runs in %v; slowest: %s (%v)", len(cases), time.Since(start).Round(time.Millisecond), slow[0].c, slow[0].elapsed.Round(time.Millisecond))
	if testing.Verbose() {
		per := map[string]time.Duration{}
		count := map[string]int{}
		for _, o := range slow {
			k := strings.Join(o.c.path, " ")
			per[k] += o.elapsed
			count[k]++
		}
		for k, d := range per {
			t.Logf("%-18s %3d runs %v", k, count[k], d.Round(time.Millisecond))
		}
	}
}

// clip keeps the first and last lines of a long output.
func clip(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= 12 {
		return s
	}
	return strings.Join(lines[:6], "\n") + "\n…\n" + strings.Join(lines[len(lines)-6:], "\n")
}
