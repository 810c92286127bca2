// Command cpmla is the command-line front end of the cpmla engine.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// commands collects the subcommand constructors; each subcommand file adds
// its own in an init function so that files stay independent.
var commands []func() *cobra.Command

func register(newCmd func() *cobra.Command) { commands = append(commands, newCmd) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "cpmla",
		Short:         "Context-parallel inference engine for sparse-MLA models (DeepSeek-V3.2, GLM-5)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, c := range commands {
		root.AddCommand(c())
	}
	return root
}

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "cpmla:", err)
		os.Exit(1)
	}
}
