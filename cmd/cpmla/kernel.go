package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/conformance"
	"github.com/cpmla/cpmla/safetensors"
)

func init() { register(newKernelCmd) }

func newKernelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kernel",
		Short: "Run the engine's kernels on conformance case files and check them against golden outputs",
		Long: "A case file is a safetensors file whose __metadata__ names the kernel (\"kernel\") and its\n" +
			"parameters and whose tensors are the inputs. Kernels: " + strings.Join(conformance.Kernels(), ", ") + ".\n" +
			"Golden cases live in testdata/conformance (see manifest.json there).",
	}
	cmd.AddCommand(newKernelRunCmd(), newKernelCheckCmd())
	return cmd
}

func newKernelRunCmd() *cobra.Command {
	var in, out string
	cmd := &cobra.Command{
		Use:   "run --case IN.safetensors --out OUT.safetensors",
		Short: "Run one case file and write the output tensors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kernel, got, err := runCaseFile(in)
			if err != nil {
				return err
			}
			if err := safetensors.Write(out, got, map[string]string{"kernel": kernel}); err != nil {
				return oneLine(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: wrote %d tensors to %s\n", kernel, len(got), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&in, "case", "", "input case file (safetensors)")
	cmd.Flags().StringVar(&out, "out", "", "output file (safetensors) for the kernel's output tensors")
	cobra.CheckErr(cmd.MarkFlagRequired("case"))
	cobra.CheckErr(cmd.MarkFlagRequired("out"))
	return cmd
}

func newKernelCheckCmd() *cobra.Command {
	var in, wantPath string
	cmd := &cobra.Command{
		Use:   "check --case IN.safetensors --want WANT.safetensors",
		Short: "Run one case file and compare its outputs with the expected ones",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kernel, got, err := runCaseFile(in)
			if err != nil {
				return err
			}
			want, wantMeta, err := readTensors(wantPath)
			if err != nil {
				return err
			}
			if k, ok := wantMeta["kernel"]; ok && k != kernel {
				return fmt.Errorf("want file %s is for kernel %q, the case is %q", wantPath, k, kernel)
			}
			tol, err := conformance.Tolerances(kernel)
			if err != nil {
				return err
			}
			reports, cmpErr := conformance.Compare(got, want, tol)
			printReports(cmd.OutOrStdout(), reports)
			if cmpErr != nil {
				return fmt.Errorf("%s: %s does not match %s: %w", kernel, in, wantPath, oneLine(cmpErr))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s matches %s\n", kernel, in, wantPath)
			return nil
		},
	}
	cmd.Flags().StringVar(&in, "case", "", "input case file (safetensors)")
	cmd.Flags().StringVar(&wantPath, "want", "", "expected outputs (safetensors), e.g. testdata/conformance/<kernel>/<case>.want.safetensors")
	cobra.CheckErr(cmd.MarkFlagRequired("case"))
	cobra.CheckErr(cmd.MarkFlagRequired("want"))
	return cmd
}

// runCaseFile opens a case file, runs its kernel and returns the kernel
// name and the outputs (owned copies: the file is closed on return).
func runCaseFile(path string) (string, []safetensors.Tensor, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return "", nil, oneLine(err)
	}
	defer f.Close()
	got, err := conformance.Run(f)
	if err != nil {
		return "", nil, fmt.Errorf("case %s: %w", path, oneLine(err))
	}
	return f.Metadata()["kernel"], got, nil
}

// readTensors reads every tensor of a file into memory.
func readTensors(path string) ([]safetensors.Tensor, map[string]string, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, nil, oneLine(err)
	}
	defer f.Close()
	var ts []safetensors.Tensor
	for _, name := range f.Names() {
		t, err := f.Tensor(name)
		if err != nil {
			return nil, nil, oneLine(err)
		}
		t.Data = append([]byte(nil), t.Data...)
		ts = append(ts, t)
	}
	return ts, f.Metadata(), nil
}

func printReports(w io.Writer, reports []conformance.TensorReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "tensor\tkind\telems\tmax_abs\tmax_rel\tcos_diff\tresult")
	for _, r := range reports {
		result := "ok"
		switch {
		case r.Problem != "":
			result = r.Problem
		case r.Failures > 0:
			result = fmt.Sprintf("FAIL %d (first %s)", r.Failures, r.First)
		case r.Substituted > 0:
			result = fmt.Sprintf("ok (%d tie substitutions)", r.Substituted)
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%.3g\t%.3g\t%.3g\t%s\n", r.Name, r.Kind, r.Elems, r.MaxAbs, r.MaxRel, r.CosDiff, result)
	}
	tw.Flush()
}

// oneLine flattens a multi-line error (such as an errors.Join) so that a
// refusal is always printed on one line.
func oneLine(err error) error {
	if err == nil || !strings.Contains(err.Error(), "\n") {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
}
