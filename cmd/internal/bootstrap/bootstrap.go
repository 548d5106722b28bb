// Package bootstrap is what every gpufrac daemon's main does around its own work: flag
// parsing, the exit path of a failed run and comma-separated list flags. It imports no
// controller-runtime package on purpose: controller-runtime's client config registers a
// --kubeconfig flag when imported, and the node agent (cmd/agent) defines its own.
// The controller-runtime manager of the recommender and the updater is built by
// cmd/internal/manager.
package bootstrap

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// Parse parses args into fs as fs.Parse does, except that a bad flag prints its error
// and one line saying to run with --help, instead of every flag's usage after it (over a
// hundred lines with klog's, the error scrolled out of sight). -h and --help (or -help,
// --h) print every flag as before. A float flag set to NaN is an error naming it: the
// flag package parses "NaN" as a float, and every range check compares, which NaN
// passes, so it would silently change what a daemon decides.
func Parse(fs *flag.FlagSet, args []string) error {
	if !helpAsked(args) {
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "Run %s --help for its flags.\n", filepath.Base(fs.Name()))
		}
		// A duration without its unit said only "parse error"; the help, which names each
		// flag's type from its value's, is printed with the flag package's own values.
		defer explainDurations(fs)()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := noArguments(fs, args); err != nil {
		return err
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok && err == nil {
			if v, ok := g.Get().(float64); ok && math.IsNaN(v) {
				err = fmt.Errorf("invalid value %q for flag -%s: not a number", f.Value, f.Name)
			}
		}
	})
	return err
}

// Positive returns an error naming each flag of names whose value (a duration, an int
// or a float) is zero or negative. The daemons' configurations read such a value as
// "the default" or as none, so without the check a typo (--interval=-1m, a period of 0)
// ran with another setting than the one asked for, and nothing said so. A name fs does
// not define, or a flag of another type, panics (a programming error).
func Positive(fs *flag.FlagSet, names ...string) error { return checkSign(fs, names, false) }

// NonNegative is Positive for flags where zero has a meaning (none, off, at once): it
// names each flag of names whose value is negative.
func NonNegative(fs *flag.FlagSet, names ...string) error { return checkSign(fs, names, true) }

func checkSign(fs *flag.FlagSet, names []string, zeroOK bool) error {
	var errs []error
	for _, n := range names {
		f := fs.Lookup(n)
		if f == nil {
			panic("bootstrap: no flag -" + n)
		}
		var sign float64
		switch v := f.Value.(flag.Getter).Get().(type) {
		case time.Duration:
			sign = float64(v)
		case int:
			sign = float64(v)
		case int64:
			sign = float64(v)
		case float64:
			sign = v
		default:
			panic(fmt.Sprintf("bootstrap: flag -%s is a %T, not a number", n, v))
		}
		switch {
		case sign < 0 && zeroOK:
			errs = append(errs, fmt.Errorf("--%s %s: want zero or more", n, f.Value))
		case sign <= 0 && !zeroOK:
			errs = append(errs, fmt.Errorf("--%s %s: want a positive value", n, f.Value))
		}
	}
	return errors.Join(errs...)
}

// noArguments returns an error for an argument left after the flags: the flag package
// stops at the first one and ignores every flag after it, and a daemon takes none. The
// usual cause, a bool flag given its value apart (--leader-elect false: the flag is set
// true and "false" ends the flags), is named with the form to write.
func noArguments(fs *flag.FlagSet, args []string) error {
	if fs.NArg() == 0 {
		return nil
	}
	first := fs.Arg(0)
	ignored := ""
	if n := fs.NArg() - 1; n > 0 {
		ignored = fmt.Sprintf(", and the %d arguments after it were ignored", n)
	}
	if i := len(args) - fs.NArg(); i > 0 && args[i-1] != "--" {
		name := strings.TrimLeft(args[i-1], "-")
		if f := fs.Lookup(name); f != nil && !strings.Contains(name, "=") {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				return fmt.Errorf("unexpected argument %q after --%s%s: a bool flag takes its value with =, --%s=%s", first, name, ignored, name, first)
			}
		}
	}
	return fmt.Errorf("unexpected argument %q%s: %s takes flags only", first, ignored, filepath.Base(fs.Name()))
}

// durationFlag is a duration flag's value whose Set error says what is wrong with the
// value (time.ParseDuration's reason, such as a missing unit) and what is wanted, where
// the flag package says "parse error".
type durationFlag struct{ flag.Getter }

func (d durationFlag) Set(s string) error {
	if _, err := time.ParseDuration(s); err != nil {
		return fmt.Errorf("%w; want a duration with its unit, such as 30s, 5m or 1h", err)
	}
	return d.Getter.Set(s)
}

// explainDurations wraps each duration flag of fs in a durationFlag and returns the
// function that puts the flag package's values back.
func explainDurations(fs *flag.FlagSet) func() {
	var restore []func()
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				f.Value = durationFlag{g}
				restore = append(restore, func() { f.Value = g })
			}
		}
	})
	return func() {
		for _, r := range restore {
			r()
		}
	}
}

// helpAsked reports whether args ask for help (-h, -help, --h, --help, or =true) before
// a "--" that ends the flags.
func helpAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "h" || name == "help") && (!hasValue || value == "true") {
			return true
		}
	}
	return false
}

// Main runs run and, when it returns an error, logs it as "<component> failed", flushes
// klog and exits with status 1. It returns when run succeeds.
func Main(component string, run func() error) {
	if err := run(); err != nil {
		klog.ErrorS(err, component+" failed")
		klog.Flush()
		os.Exit(1)
	}
}

// SplitList splits a comma-separated flag value into its non-empty, space-trimmed
// items; an empty value is no items.
func SplitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
