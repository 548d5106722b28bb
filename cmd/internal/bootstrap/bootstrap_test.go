package bootstrap

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
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

// TestPositiveAndNonNegative: a zero or negative value of a flag that needs a positive
// one, and a negative value of one where zero has a meaning, are errors naming each such
// flag, of every numeric flag type; values in range pass.
func TestPositiveAndNonNegative(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr []string
	}{
		{nil, nil},
		{[]string{"--interval=-1m"}, []string{"--interval -1m0s: want a positive value"}},
		{[]string{"--interval=0s", "--burst=0", "--ratio=-0.1", "--bytes=-1"}, []string{"--interval 0s", "--burst 0", "--ratio -0.1", "--bytes -1"}},
		{[]string{"--warm-up=0s"}, nil},
		{[]string{"--warm-up=-2m"}, []string{"--warm-up -2m0s: want zero or more"}},
	} {
		fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		fs.Duration("interval", time.Minute, "")
		fs.Int("burst", 1, "")
		fs.Float64("ratio", 0.5, "")
		fs.Int64("bytes", 1, "")
		fs.Duration("warm-up", time.Minute, "")
		if err := Parse(fs, c.args); err != nil {
			t.Fatal(err)
		}
		err := errors.Join(Positive(fs, "interval", "burst", "ratio", "bytes"), NonNegative(fs, "warm-up"))
		if (err != nil) != (len(c.wantErr) > 0) {
			t.Errorf("%q: %v, want errors %q", c.args, err, c.wantErr)
			continue
		}
		for _, w := range c.wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %v, want one saying %q", c.args, err, w)
			}
		}
	}
}
