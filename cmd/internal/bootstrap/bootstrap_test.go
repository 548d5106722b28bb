package bootstrap

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
)

// TestParseBadFlagIsBrief: a bad flag prints its error and a one-line hint, not every
// flag's usage; -h and --help still print every flag.
func TestParseBadFlagIsBrief(t *testing.T) {
	for _, c := range []struct {
		args []string
		help bool // every flag's usage printed, flag.ErrHelp returned
	}{
		{[]string{"--bogus"}, false},
		{[]string{"--interval", "5s", "-bogus=1"}, false},
		{[]string{"--interval", "soon"}, false},
		{[]string{"--interval"}, false},
		{[]string{"-h"}, true},
		{[]string{"--help"}, true},
		{[]string{"--interval", "5s", "-help"}, true},
		{[]string{"--help=true"}, true},
	} {
		fs := flag.NewFlagSet("/usr/bin/daemon", flag.ContinueOnError)
		var out bytes.Buffer
		fs.SetOutput(&out)
		fs.Duration("interval", 0, "How often.")
		for i := range 50 {
			fs.Int(strings.Repeat("x", i+1), 0, "Some flag.")
		}
		err := Parse(fs, c.args)
		lines := strings.Count(out.String(), "\n")
		switch {
		case c.help && (!errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "How often.") || lines < 50):
			t.Errorf("%q: %v, %d lines, want every flag's usage:\n%s", c.args, err, lines, out.String())
		case !c.help && (err == nil || errors.Is(err, flag.ErrHelp) || lines != 2 || !strings.HasSuffix(out.String(), "Run daemon --help for its flags.\n")):
			t.Errorf("%q: %v, want the error and one line of hint:\n%s", c.args, err, out.String())
		}
	}
}

// TestParseRefusesNaN: a float flag set to NaN is an error naming the flag (the flag
// package parses it, and range checks let it through); a number, and other flags, parse.
func TestParseRefusesNaN(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr bool
	}{
		{[]string{"--near-limit", "NaN"}, true},
		{[]string{"--near-limit=nan"}, true},
		{[]string{"--near-limit", "0.9", "--interval", "5s"}, false},
		{[]string{"--interval", "5s"}, false},
	} {
		fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		fs.Float64("near-limit", 0.9, "A ratio.")
		fs.Duration("interval", 0, "How often.")
		err := Parse(fs, c.args)
		if (err != nil) != c.wantErr || c.wantErr && !strings.Contains(err.Error(), "-near-limit") {
			t.Errorf("%q: %v, want an error naming the flag: %v", c.args, err, c.wantErr)
		}
	}
}

func TestSplitList(t *testing.T) {
	for in, want := range map[string][]string{
		"":                nil,
		" , ,":            nil,
		"a":               {"a"},
		" team-a , b,,c ": {"team-a", "b", "c"},
	} {
		if got := SplitList(in); !slices.Equal(got, want) {
			t.Errorf("SplitList(%q) = %q, want %q", in, got, want)
		}
	}
}
