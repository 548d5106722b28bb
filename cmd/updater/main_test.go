package main

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/cmd/internal/bootstrap/bootstraptest"
)

// TestParseFlagsRanges: a value the updater's Config would replace without a word (a
// period of 0 or below, a negative age or hysteresis, a ratio out of range, a rate or
// limit of 0) is an error naming the flag; the defaults and the documented zeros and
// negatives (no warm-up, no hysteresis, the recommender Lease check off, no eviction or
// per-device limit, compute-request growth off) parse.
func TestParseFlagsRanges(t *testing.T) {
	parse := func(args string) (*options, error) {
		return parseFlags(flag.NewFlagSet("updater", flag.ContinueOnError),
			append([]string{"--admission-namespace=gpufrac-system"}, strings.Fields(args)...))
	}
	o, err := parse("")
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Interval != time.Minute || o.cfg.WarmUp != 2*time.Minute || o.cfg.MinPodAge != 12*time.Hour {
		t.Errorf("defaults %+v", o.cfg)
	}
	for _, ok := range []string{
		"--warm-up=0s --min-pod-age=0s --persist-for=0s --min-replacement-interval=0s --recommender-lease-max-age=0s",
		"--eviction-rate=-1 --max-in-flight-per-device=-1 --compute-request-growth=-1 --max-in-flight=1 --persist-cycles=1",
	} {
		if _, err := parse(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{
		"--interval=0s", "--interval=-1m", "--retry-backoff=-1s", "--replacement-timeout=0s", "--stuck-backoff=0s",
		"--verification-period=-15m", "--rollback-floor-duration=0s", "--max-unready-backoff=-1m", "--admission-lease-max-age=0s",
		"--threshold=-0.1", "--threshold=0", "--near-limit=0", "--max-in-flight=0", "--max-in-flight=2", "--eviction-burst=-1",
		"--persist-cycles=-3", "--warm-up=-2m", "--min-pod-age=-12h", "--persist-for=-5m", "--min-replacement-interval=-1h",
		"--recommender-lease-max-age=-10m", "--eviction-rate=0", "--compute-request-growth=0", "--max-in-flight-per-device=0",
	} {
		name, _, _ := strings.Cut(bad, "=")
		if _, err := parse(bad); err == nil || !strings.Contains(err.Error(), name+" ") {
			t.Errorf("%s: error %v, want one naming %s", bad, err, name)
		}
	}
}

// TestBadFlagIsBrief: a bad flag prints its error and a one-line --help hint, not the
// ~150 lines of every flag's usage; -h prints them.
func TestBadFlagIsBrief(t *testing.T) {
	bootstraptest.BadFlagIsBrief(t, "updater", func(fs *flag.FlagSet, args []string) error {
		_, err := parseFlags(fs, args)
		return err
	})
}
