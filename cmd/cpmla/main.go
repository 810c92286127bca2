// Command cpmla is the command-line front end of the cpmla engine.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/checkpoints"
	"github.com/cpmla/cpmla/config"
)

// commands collects the subcommand constructors; each subcommand file adds
// its own in an init function so that files stay independent.
var commands []func() *cobra.Command

func register(newCmd func() *cobra.Command) { commands = append(commands, newCmd) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "cpmla",
		Short:         "Context-parallel inference engine for sparse-MLA models (DeepSeek-V3.2, GLM-5)",
		Version:       version(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("cpmla {{.Version}}\n")
	for _, c := range commands {
		root.AddCommand(c())
	}
	refuseArguments(root)
	root.PersistentPreRunE = refuseSeedOfCheckpoint
	return root
}

// refuseSeedOfCheckpoint refuses --weight-seed with a --model that is a
// checkpoint (built-in or a directory): the seed draws a preset's random
// weights, and a checkpoint brings its own, so the flag would be accepted
// and then ignored. A name that is neither is left to the model loader,
// which says what the name could have been.
func refuseSeedOfCheckpoint(cmd *cobra.Command, _ []string) error {
	f := cmd.Flags()
	seed, m := f.Lookup("weight-seed"), f.Lookup("model")
	if seed == nil || m == nil || !seed.Changed {
		return nil
	}
	name := m.Value.String()
	_, builtin := checkpoints.Open(name)
	st, err := os.Stat(name)
	if builtin || (err == nil && st.IsDir()) {
		return fmt.Errorf("--weight-seed %s seeds a preset's random weights, but --model %s is a checkpoint with weights of its own: drop --weight-seed, or name a preset (%s)",
			seed.Value.String(), name, strings.Join(config.PresetNames(), ", "))
	}
	return nil
}

// refuseArguments makes every command that names no positional arguments of
// its own refuse them, so that a stray word is an error instead of being
// ignored.
// A command that only groups subcommands prints its help when run alone.
func refuseArguments(c *cobra.Command) {
	if c.Args == nil {
		c.Args = cobra.NoArgs
	}
	if !c.Runnable() {
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	for _, sub := range c.Commands() {
		refuseArguments(sub)
	}
}

// version describes this build: the module version (or "devel"), the
// commit it was built from when the build recorded one, and the Go version.
func version() string {
	v, commit, dirty, goVersion := "devel", "", false, "unknown Go"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if m := bi.Main.Version; m != "" && m != "(devel)" {
			v = m
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if commit != "" {
		if len(commit) > 12 {
			commit = commit[:12]
		}
		if dirty {
			commit += "+modified"
		}
		return fmt.Sprintf("%s (commit %s, %s)", v, commit, goVersion)
	}
	return fmt.Sprintf("%s (%s)", v, goVersion)
}

func main() {
	if err := newRoot().Execute(); err != nil {
		// One line, whatever the error joins: scripts and people read the
		// last line of stderr.
		fmt.Fprintln(os.Stderr, "cpmla:", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
		os.Exit(1)
	}
}
