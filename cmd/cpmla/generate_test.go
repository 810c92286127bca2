package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/checkpoints"
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

// generate --speculative-config prints what plain decoding prints (greedy
// and seeded sampling, on one rank and on TP 2 × DCP 2), and a
// --speculative-config the model or the engine cannot serve is refused by
// name.
func TestGenerateSpeculative(t *testing.T) {
	if testing.Short() {
		t.Skip("runs glm5-moe-mini")
	}
	const sc = `{"method":"mtp","num_speculative_tokens":3}`
	for _, args := range [][]string{
		{"--prompt-ids", "3,1,4,1,5,9,2,6", "--max-tokens", "7", "--json"},
		{"--prompt-ids", "7", "--max-tokens", "9", "--temperature", "0.8", "--seed", "4", "--json"},
		{"--prompt-ids", "3,1,4,1,5", "--max-tokens", "6", "--tensor-parallel-size", "2", "--decode-context-parallel-size", "2"},
	} {
		base := append([]string{"generate", "--model", "glm5-moe-mini"}, args...)
		plain := runCLI(t, base...)
		if got := runCLI(t, append(base, "--speculative-config", sc)...); got != plain {
			t.Errorf("%v: plain decoding printed\n%s\nspeculative decoding printed\n%s", args, plain, got)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "glm5-mini", "--speculative-config", sc}, "num_nextn_predict_layers 0"},
		{[]string{"--model", "glm5-moe-mini", "--speculative-config", `{"method":"eagle3","num_speculative_tokens":2}`}, "eagle3"},
		{[]string{"--model", "glm5-moe-mini", "--speculative-config", `{"method":"mtp","num_speculative_tokens":2,"parallel_drafting":true}`}, "parallel_drafting"},
		{[]string{"--model", "glm5-moe-mini", "--speculative-config", `{"method":"mtp"`}, "--speculative-config"},
	} {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"generate", "--prompt-ids", "1,2"}, tc.args...))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.args, err, tc.want)
		}
	}
}

// A built-in checkpoint read from the binary generates what the same files
// generate from a directory, on one rank and on two.
func TestBuiltinCheckpointMatchesItsFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs cpmla-tiny-fp8 three times")
	}
	fsys, ok := checkpoints.Open("cpmla-tiny-fp8")
	if !ok {
		t.Fatal("no built-in cpmla-tiny-fp8")
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := os.CopyFS(dir, fsys); err != nil {
		t.Fatal(err)
	}
	args := []string{"--prompt", "Question: Ana has 12 apples. Ana buys 30 more apples. How many apples does Ana have now?\nAnswer:", "--max-tokens", "12", "--json"}
	builtin := runCLI(t, append([]string{"generate", "--model", "cpmla-tiny-fp8"}, args...)...)
	if fromDir := runCLI(t, append([]string{"generate", "--model", dir}, args...)...); fromDir != builtin {
		t.Errorf("the built-in printed\n%s\nits files in a directory printed\n%s", builtin, fromDir)
	}
	// Ids and text (the logprobs of two ranks sum in another order).
	args = args[:len(args)-1]
	one := runCLI(t, append([]string{"generate", "--model", "cpmla-tiny-fp8"}, args...)...)
	if tp2 := runCLI(t, append([]string{"generate", "--model", "cpmla-tiny-fp8", "--tensor-parallel-size", "2"}, args...)...); tp2 != one {
		t.Errorf("one rank printed\n%s\ntwo printed\n%s", one, tp2)
	}
	// <|user|> is one token, id 509, only in the built-in's own tokenizer.
	if ids := runCLI(t, "tokenize", "--model", "cpmla-tiny", "--text", "<|user|>1"); !strings.HasPrefix(ids, "[509,") {
		t.Errorf("tokenize with the built-in's tokenizer printed %q", ids)
	}
}
