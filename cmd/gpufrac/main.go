// Command gpufrac is the gpufrac command-line tool: offline helpers around GPU
// fraction autoscaling (traces, what-if simulation, reports).
//
// Subcommands register themselves from their own files with registerCommand, so
// new ones need no edit here.
package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
		// Before any command's own checks: they compare, and NaN passes every comparison.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return refuseNaN(cmd.Flags()) },
	}
	for _, f := range commands {
		root.AddCommand(f())
	}
	return root
}

// refuseNaN returns an error naming the first float flag set to NaN. pflag parses
// "NaN" as a float, and every comparison with NaN is false, so a range check such as
// v < 0 || v > 1 lets it through and it silently changes what a command computes.
func refuseNaN(fs *pflag.FlagSet) error {
	var err error
	fs.Visit(func(f *pflag.Flag) {
		if err != nil || !strings.HasPrefix(f.Value.Type(), "float") {
			return
		}
		// float32, float64 and their slices ("[1,NaN]").
		for _, s := range strings.Split(strings.Trim(f.Value.String(), "[]"), ",") {
			if v, perr := strconv.ParseFloat(strings.TrimSpace(s), 64); perr == nil && math.IsNaN(v) {
				err = fmt.Errorf("--%s %s: not a number", f.Name, s)
				return
			}
		}
	})
	return err
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gpufrac:", err)
		os.Exit(1)
	}
}

// noArgs is the Args check of a command that takes no argument: one given is an error
// naming it and saying, in hint, what to write instead (a name is not a filter of
// report or status; without the check, "gpufrac report sd-000" reported every workload
// and "gpufrac status ml" the kubeconfig context's namespace, as if they had been read).
//
// An argument true or false is a bool flag's value given apart (--urgent-growth false
// sets the flag true and leaves "false" as an argument): the error says so, naming
// the bool flag given when there is one, instead of cobra's 'unknown command "false"'.
func noArgs(hint string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		if v := args[0]; v == "true" || v == "false" {
			var forms []string // the bool flags given, each in the form meant
			cmd.Flags().Visit(func(f *pflag.Flag) {
				if f.Value.Type() == "bool" {
					forms = append(forms, "--"+f.Name+"="+v)
				}
			})
			if len(forms) == 0 {
				forms = []string{"--FLAG=" + v}
			}
			return fmt.Errorf("unexpected argument %q: a bool flag takes its value with =, %s", v, strings.Join(forms, " or "))
		}
		return fmt.Errorf("%s takes no arguments, got %q: %s", cmd.Name(), strings.Join(args, " "), hint)
	}
}
