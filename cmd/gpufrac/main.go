// Command gpufrac is the gpufrac command-line tool: offline helpers around GPU
// fraction autoscaling (traces, what-if simulation, reports).
//
// Subcommands register themselves from their own files with registerCommand, so
// new ones need no edit here.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// commands holds the constructors of the top-level subcommands, filled by init
// functions of the files that define them.
var commands []func() *cobra.Command

// registerCommand adds a top-level subcommand constructor; call it from init.
func registerCommand(f func() *cobra.Command) { commands = append(commands, f) }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpufrac",
		Short:         "gpufrac: GPU fraction autoscaler tools",
		Long:          "gpufrac is the command-line tool of the GPU fraction autoscaler: import and synthesize GPU usage traces, simulate recommendations offline, and report savings.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, f := range commands {
		root.AddCommand(f())
	}
	return root
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gpufrac:", err)
		os.Exit(1)
	}
}
