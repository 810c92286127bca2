package main

import (
	"bytes"
	"path/filepath"
	"testing"
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
