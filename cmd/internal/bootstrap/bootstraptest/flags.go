// Package bootstraptest holds the checks every daemon's flag parsing shares in its tests.
package bootstraptest

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// BadFlagIsBrief checks a daemon's parse (which must parse through bootstrap.Parse): a
// bad flag prints its error and a one-line --help hint, not the ~150 lines of every
// flag's usage; -h prints them (40 lines or more). name is the daemon's flag set name.
func BadFlagIsBrief(t *testing.T, name string, parse func(fs *flag.FlagSet, args []string) error) {
	t.Helper()
	for _, c := range []struct {
		args []string
		help bool
	}{{[]string{"--bogus"}, false}, {[]string{"--v", "lots"}, false}, {[]string{"-h"}, true}} {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		var out bytes.Buffer
		fs.SetOutput(&out)
		err := parse(fs, c.args)
		if n := strings.Count(out.String(), "\n"); err == nil || (c.help && n < 40) || (!c.help && (n != 2 || !strings.Contains(out.String(), "--help"))) {
			t.Errorf("%q: %v, %d lines of output:\n%s", c.args, err, n, out.String())
		}
	}
}
