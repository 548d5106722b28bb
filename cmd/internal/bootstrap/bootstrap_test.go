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

// TestParseDurationSaysWhy: a duration flag given without its unit (--interval 60, as
// one writes seconds) or in a form Go does not read says why and what is wanted, not
// the flag package's bare "parse error"; a good value parses, Positive reads it, and the
// help still names the flag's type as duration.
func TestParseDurationSaysWhy(t *testing.T) {
	newFS := func() (*flag.FlagSet, *bytes.Buffer, *time.Duration) {
		fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
		var out bytes.Buffer
		fs.SetOutput(&out)
		return fs, &out, fs.Duration("interval", time.Minute, "How often.")
	}
	for _, c := range []struct{ arg, why string }{
		{"--interval=60", `time: missing unit in duration "60"`},
		{"--interval=1 m", `time: unknown unit " m" in duration "1 m"`},
		{"--interval=5mins", `time: unknown unit "mins" in duration "5mins"`},
	} {
		fs, out, _ := newFS()
		err := Parse(fs, []string{c.arg})
		want := "-interval: " + c.why + "; want a duration with its unit, such as 30s, 5m or 1h"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(out.String(), want) {
			t.Errorf("%s: error %v, printed %q; want %q", c.arg, err, out.String(), want)
		}
	}
	fs, _, d := newFS()
	if err := Parse(fs, []string{"--interval", "90s"}); err != nil || *d != 90*time.Second {
		t.Errorf("--interval 90s: %v, %v", *d, err)
	}
	if err := Positive(fs, "interval"); err != nil {
		t.Errorf("Positive after Parse: %v", err)
	}
	fs, out, _ := newFS()
	if err := Parse(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "-interval duration") {
		t.Errorf("-h: %v, help %q: want the flag's type named duration", err, out.String())
	}
}

// TestParseRefusesArguments: an argument left after the flags is an error, since the
// flag package stops at it and ignores every flag after it: --leader-elect false set
// leader election on and dropped --interval 0s after it without a word. A bool flag
// given its value apart is named with the form to write.
func TestParseRefusesArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--leader-elect", "false", "--interval", "0s"}, `unexpected argument "false" after --leader-elect, and the 2 arguments after it were ignored: a bool flag takes its value with =, --leader-elect=false`},
		{[]string{"-leader-elect", "true"}, `unexpected argument "true" after --leader-elect: a bool flag takes its value with =, --leader-elect=true`},
		{[]string{"--interval", "5m", "extra"}, `unexpected argument "extra": daemon takes flags only`},
		{[]string{"run"}, `unexpected argument "run": daemon takes flags only`},
		{[]string{"--", "--interval", "5m"}, `unexpected argument "--interval", and the 1 arguments after it were ignored: daemon takes flags only`},
	} {
		fs := flag.NewFlagSet("/usr/bin/daemon", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		fs.Bool("leader-elect", true, "Elect a leader.")
		fs.Duration("interval", time.Minute, "How often.")
		if err := Parse(fs, c.args); err == nil || err.Error() != c.want {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	le := fs.Bool("leader-elect", true, "Elect a leader.")
	if err := Parse(fs, []string{"--leader-elect=false"}); err != nil || *le {
		t.Errorf("--leader-elect=false: %v, %v", *le, err)
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
