package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("cpmla %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

// A checkpoint written by `model init` loads with --model DIR and generates
// exactly what the preset with the same weight seed generates.
func TestGenerateFromCheckpointMatchesPreset(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	runCLI(t, "model", "init", "--preset", "glm5-mini", "--seed", "5", "--out", dir, "--max-shard-bytes", "40000000")
	args := []string{"--prompt-ids", "3,1,4,1,5,9,2,6", "--max-tokens", "6", "--temperature", "0.7", "--seed", "11"}
	fromPreset := runCLI(t, append([]string{"generate", "--model", "glm5-mini", "--weight-seed", "5"}, args...)...)
	fromDir := runCLI(t, append([]string{"generate", "--model", dir}, args...)...)
	if fromPreset != fromDir {
		t.Fatalf("preset generated %q, checkpoint generated %q", fromPreset, fromDir)
	}
	if again := runCLI(t, append([]string{"generate", "--model", dir}, args...)...); again != fromDir {
		t.Fatalf("same seed generated %q then %q", fromDir, again)
	}
}

func TestGenerateRefusesBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"generate", "--prompt-ids", "1,x"},
		{"generate", "--prompt-ids", ""},
		{"generate", "--prompt-ids", "999999999"},
		{"generate", "--kv-cache-dtype", "fp16"},
		{"generate", "--model", "no-such-model"},
		{"generate", "--top-p", "0"},
		{"generate", "--prompt-ids", "1,,2"},
		{"generate", "--prompt-ids", "1,2,"},
		{"generate", "--prompt-ids", "1,-2"},
		{"generate", "--prompt", "Hello", "--prompt-ids", "1,2"},
		{"generate", "--prompt", ""},
		{"generate", "--tokenizer", t.TempDir()},
		{"generate", "1,2,3"},
	} {
		root := newRoot()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(args)
		if err := root.Execute(); err == nil {
			t.Errorf("cpmla %v succeeded", args)
		}
	}
}

// Every command refuses a positional argument it does not take, instead of
// ignoring it; a command that groups subcommands refuses an unknown one.
func TestEveryCommandRefusesStrayArguments(t *testing.T) {
	var walk func(c *cobra.Command, path []string)
	checked := 0
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			p := append(append([]string(nil), path...), sub.Name())
			root := newRoot()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append(p, "stray-word"))
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), "stray-word") {
				t.Errorf("cpmla %s stray-word: got %v, want a refusal naming the argument", strings.Join(p, " "), err)
			}
			checked++
			walk(sub, p)
		}
	}
	walk(newRoot(), nil)
	if checked < 10 {
		t.Fatalf("checked only %d commands", checked)
	}
}
