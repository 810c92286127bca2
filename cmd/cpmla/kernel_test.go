package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/conformance"
	"github.com/cpmla/cpmla/safetensors"
)

var kernelCaseDir = filepath.Join("..", "..", "testdata", "conformance")

func kernelCasePath(rel, kind string) string {
	return filepath.Join(kernelCaseDir, rel+"."+kind+".safetensors")
}

// runKernelCLI runs the root command in-process and returns its output and error.
func runKernelCLI(args ...string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// writeKernelCaseWithout writes a copy of a committed case with one tensor removed.
func writeKernelCaseWithout(t *testing.T, rel, drop string) string {
	t.Helper()
	ts, md, err := readTensors(kernelCasePath(rel, "in"))
	if err != nil {
		t.Fatal(err)
	}
	var keep []safetensors.Tensor
	for _, x := range ts {
		if x.Name != drop {
			keep = append(keep, x)
		}
	}
	path := filepath.Join(t.TempDir(), "case.safetensors")
	if err := safetensors.Write(path, keep, md); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKernelCheckGolden runs `cpmla kernel check` on every committed case.
func TestKernelCheckGolden(t *testing.T) {
	m, err := conformance.LoadManifest(filepath.Join(kernelCaseDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Cases {
		in := filepath.Join(kernelCaseDir, c.In.Path)
		want := filepath.Join(kernelCaseDir, c.Want.Path)
		out, err := runKernelCLI("kernel", "check", "--case", in, "--want", want)
		if err != nil {
			t.Errorf("%s/%s: %v\n%s", c.Kernel, c.Name, err, out)
			continue
		}
		if !strings.HasPrefix(out, "tensor  ") || !strings.Contains(out, c.Kernel+": "+in+" matches "+want) {
			t.Errorf("%s/%s: unexpected report:\n%s", c.Kernel, c.Name, out)
		}
	}
}

// TestKernelRunWritesOutputs runs a case to a file and compares the file
// with the golden outputs.
func TestKernelRunWritesOutputs(t *testing.T) {
	const rel = "sparse_mla_decode/b2_sq2_h4_p64_topklen"
	dst := filepath.Join(t.TempDir(), "out.safetensors")
	out, err := runKernelCLI("kernel", "run", "--case", kernelCasePath(rel, "in"), "--out", dst)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if want := "sparse_mla_decode: wrote 2 tensors to " + dst + "\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	got, md, err := readTensors(dst)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"kernel": "sparse_mla_decode"}, md); diff != "" {
		t.Errorf("output metadata (-want +got):\n%s", diff)
	}
	want, _, err := readTensors(kernelCasePath(rel, "want"))
	if err != nil {
		t.Fatal(err)
	}
	tol, err := conformance.Tolerances("sparse_mla_decode")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conformance.Compare(got, want, tol); err != nil {
		t.Errorf("written outputs do not match the golden ones: %v", err)
	}
}

func TestKernelErrors(t *testing.T) {
	notSafetensors := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notSafetensors, []byte("just some text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missingKV := writeKernelCaseWithout(t, "sparse_mla_prefill/h4_sq4_kv16_k8_corners", "kv")
	out := filepath.Join(t.TempDir(), "out.safetensors")
	none := filepath.Join(t.TempDir(), "none.safetensors")
	seq := func(rel string) string { return kernelCasePath("dcp_local_seq_lens/"+rel, "in") }
	seqWant := func(rel string) string { return kernelCasePath("dcp_local_seq_lens/"+rel, "want") }
	tests := []struct {
		name string
		args []string
		want string // the whole error, or its prefix when it ends in "…"
	}{
		{"not a case file", []string{"kernel", "run", "--case", notSafetensors, "--out", out},
			// the first 8 bytes read as the little-endian header length
			fmt.Sprintf("safetensors: %s: header length %d exceeds the limit of 104857600 bytes", notSafetensors, binary.LittleEndian.Uint64([]byte("just som")))},
		{"missing tensor", []string{"kernel", "run", "--case", missingKV, "--out", out},
			"case " + missingKV + `: sparse_mla_prefill: tensor "kv" is missing (want F32 [s_kv, 576]; case has "indices", "q", "topk_length")`},
		{"missing file", []string{"kernel", "check", "--case", none, "--want", out},
			"safetensors: open " + none + ": no such file or directory"},
		{"want of another kernel", []string{"kernel", "check", "--case", seq("n3_r0_i1"), "--want", kernelCasePath("lse_combine/n1_t2_h2_d8", "want")},
			"want file " + kernelCasePath("lse_combine/n1_t2_h2_d8", "want") + ` is for kernel "lse_combine", the case is "dcp_local_seq_lens"`},
		{"values differ", []string{"kernel", "check", "--case", seq("n3_r0_i1"), "--want", seqWant("n3_r2_i4")},
			"dcp_local_seq_lens: " + seq("n3_r0_i1") + " does not match " + seqWant("n3_r2_i4") + ": local_seq_lens: …"},
		{"required flag", []string{"kernel", "run", "--case", seq("n3_r0_i1")}, `required flag(s) "out" not set`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKernelCLI(tt.args...)
			if err == nil {
				t.Fatalf("succeeded, want error %q", tt.want)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans several lines: %q", msg)
			}
			if prefix, ok := strings.CutSuffix(tt.want, "…"); ok {
				if !strings.HasPrefix(msg, prefix) {
					t.Errorf("error %q, want prefix %q", msg, prefix)
				}
			} else if diff := cmp.Diff(tt.want, msg); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKernelBinaryExitStatus builds the command and runs it on a malformed
// case: one line on stderr, exit status 1, no panic.
func TestKernelBinaryExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the cpmla binary")
	}
	bin := filepath.Join(t.TempDir(), "cpmla")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bad := writeKernelCaseWithout(t, "lse_combine/n1_t2_h2_d8", "lse")
	cmd := exec.Command(bin, "kernel", "run", "--case", bad, "--out", filepath.Join(t.TempDir(), "o.safetensors"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1 (stderr %q)", err, stderr.String())
	}
	want := "cpmla: case " + bad + `: lse_combine: tensor "lse" is missing (want F32 [n, t, h]; case has "out")` + "\n"
	if diff := cmp.Diff(want, stderr.String()); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
}
