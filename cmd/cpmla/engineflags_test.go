package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Every size flag reads plan.ParseSize's forms, into an int64 or an int,
// and prints its value back in a form it reads.
func TestSizeFlagsReadUnits(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		str     string
		wantErr string
	}{
		{in: "4GiB", want: 4 << 30, str: "4GiB"},
		{in: "16KiB", want: 16 << 10, str: "16KiB"},
		{in: "1.5GB", want: 1_500_000_000, str: "1500000000"},
		{in: "1073741824", want: 1 << 30, str: "1GiB"},
		{in: "512 MiB", want: 512 << 20, str: "512MiB"},
		{in: "0", want: 0, str: "0"},
		{in: "4 parsecs", wantErr: "unknown unit"},
		{in: "", wantErr: "empty"},
		{in: "GiB", wantErr: "does not start with a number"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var i64 int64
			var i int
			f := pflag.NewFlagSet("t", pflag.ContinueOnError)
			f.SetOutput(new(strings.Builder))
			sizeVar(f, &i64, "a", 2<<30, "")
			sizeIntVar(f, &i, "b", 8<<10, "")
			if got := f.Lookup("a").DefValue; got != "2GiB" {
				t.Errorf("default of an int64 size prints %q, want 2GiB", got)
			}
			if got := f.Lookup("b").DefValue; got != "8KiB" {
				t.Errorf("default of an int size prints %q, want 8KiB", got)
			}
			err := f.Parse([]string{"--a=" + tc.in, "--b=" + tc.in})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if i64 != tc.want || int64(i) != tc.want {
				t.Errorf("read %d and %d, want %d", i64, i, tc.want)
			}
			if got := f.Lookup("a").Value.String(); got != tc.str {
				t.Errorf("prints %q, want %q", got, tc.str)
			}
		})
	}
}

// --weight-seed seeds a preset's random weights: every command that takes
// it refuses it by name with a checkpoint (which has weights of its own),
// and accepts it with a preset.
func TestWeightSeedRefusedWithACheckpoint(t *testing.T) {
	for _, cmd := range [][]string{
		{"generate", "--prompt", "hi", "--max-tokens", "1"},
		{"serve", "--port", "0"},
		{"eval"},
		{"bench", "latency"},
		{"bench", "throughput"},
		{"verify"},
	} {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			_, err := runCLIErr(append(cmd, "--model", "cpmla-tiny", "--weight-seed", "5")...)
			if err == nil {
				t.Fatal("--weight-seed with --model cpmla-tiny was accepted")
			}
			for _, want := range []string{"--weight-seed 5", "--model cpmla-tiny", "drop --weight-seed", "glm5-mini"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
	if _, err := runCLIErr("generate", "--model", "glm5-mini", "--weight-seed", "5", "--prompt-ids", "1,2", "--max-tokens", "1"); err != nil {
		t.Errorf("--weight-seed with a preset: %v", err)
	}
	dir := t.TempDir()
	if _, err := runCLIErr("generate", "--model", dir, "--weight-seed", "5"); err == nil || !strings.Contains(err.Error(), "drop --weight-seed") {
		t.Errorf("--weight-seed with a checkpoint directory: %v, want the refusal", err)
	}
	if _, err := runCLIErr("generate", "--model", "no-such-model", "--weight-seed", "5"); err == nil || strings.Contains(err.Error(), "drop --weight-seed") || !strings.Contains(err.Error(), "neither a preset") {
		t.Errorf("--weight-seed with an unknown model: %v, want the loader's error naming the presets", err)
	}
}
