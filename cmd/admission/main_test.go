package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/cmd/internal/bootstrap/bootstraptest"
)

// TestParseFlagsRanges: a period, lifetime, timeout or port of 0 or below, a negative
// --shutdown-delay, and a certificate lifetime of at most 3 × --cert-check-interval (it
// would expire between two checks) are errors naming the flags; before, the first were
// replaced by their defaults without a word and the last served expired certificates.
func TestParseFlagsRanges(t *testing.T) {
	for _, tc := range []struct {
		args string
		want []string // substrings of the error; nil: accepted
	}{
		{"--shutdown-delay=0s --cert-validity=4m --cert-check-interval=1m", nil},
		{"--ca-validity=0s", []string{"--ca-validity 0s"}},
		{"--cert-validity=-1h", []string{"--cert-validity -1h0m0s"}},
		{"--cert-check-interval=0s", []string{"--cert-check-interval 0s"}},
		{"--status-lease-renew-interval=-10s", []string{"--status-lease-renew-interval -10s"}},
		{"--graceful-shutdown-timeout=0s", []string{"--graceful-shutdown-timeout 0s"}},
		{"--webhook-port=0", []string{"--webhook-port 0"}},
		{"--service-port=-443", []string{"--service-port -443"}},
		{"--shutdown-delay=-5s", []string{"--shutdown-delay -5s"}},
		{"--cert-validity=3m", []string{"--cert-validity 3m0s", "--cert-check-interval 1m0s"}},
		{"--cert-validity=1h --cert-check-interval=30m", []string{"--cert-validity 1h0m0s", "--cert-check-interval 30m0s"}},
		{"--ca-validity=2h --cert-check-interval=1h", []string{"--ca-validity 2h0m0s", "--cert-check-interval 1h0m0s"}},
	} {
		fs := flag.NewFlagSet("admission", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		_, err := parseFlags(fs, append([]string{"--namespace=gpufrac"}, strings.Fields(tc.args)...))
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: %v, want accepted", tc.args, err)
		case tc.want != nil && err == nil:
			t.Errorf("%s: accepted, want an error naming %q", tc.args, tc.want)
		case err != nil:
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q lacks %q", tc.args, err, w)
				}
			}
		}
	}
}

// TestTimeoutsWithinWebhookTimeout: the longest a pod request can wait on bounded
// operations (--owner-wait, then the longest backend timeout: --dra-timeout,
// --device-plugin-timeout) plus the handler's margin must fit the --webhook-timeout the
// API server is given; otherwise the API server times the call out first and the pod is
// admitted unchanged (failurePolicy Ignore) with no warning of gpufrac's. Such flags are
// refused at start with an error naming them and their values; the defaults and the
// chart's (timeout 3s) start.
func TestTimeoutsWithinWebhookTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // substrings of the error; nil: accepted
	}{
		{"defaults", nil, nil},
		{"chart: timeout 3", []string{"--webhook-timeout=3"}, nil},
		{"owner-wait 1s, timeout 3", []string{"--owner-wait=1s", "--webhook-timeout=3"}, nil},
		{"owner-wait 1s at the default timeout 2", []string{"--owner-wait=1s"},
			[]string{"--owner-wait 1s", "--dra-timeout 1s", "--webhook-timeout 2"}},
		{"timeout 1 with the default backend timeouts", []string{"--webhook-timeout=1"},
			[]string{"--owner-wait 200ms", "--webhook-timeout 1"}},
		{"timeout 1 with short waits", []string{"--webhook-timeout=1", "--owner-wait=100ms", "--dra-timeout=300ms", "--device-plugin-timeout=400ms"}, nil},
		{"device-plugin timeout 2.5s fits 3 (2.95s with the margin)", []string{"--device-plugin-timeout=2500ms", "--webhook-timeout=3"}, nil},
		{"device-plugin timeout the longest", []string{"--device-plugin-timeout=2600ms", "--webhook-timeout=3"},
			[]string{"--device-plugin-timeout 2.6s", "--webhook-timeout 3"}},
		{"dra timeout the longest", []string{"--dra-timeout=2800ms", "--owner-wait=0", "--webhook-timeout=3"},
			[]string{"--dra-timeout 2.8s", "--webhook-timeout 3"}},
		{"owner-wait alone over", []string{"--owner-wait=3s", "--dra-timeout=10ms", "--device-plugin-timeout=10ms", "--webhook-timeout=3"},
			[]string{"--owner-wait 3s", "--webhook-timeout 3"}},
	} {
		fs := flag.NewFlagSet("admission", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		_, err := parseFlags(fs, append([]string{"--namespace=gpufrac"}, tc.args...))
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.want != nil && err == nil:
			t.Errorf("%s: accepted, want an error naming %q", tc.name, tc.want)
		case err != nil:
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q lacks %q", tc.name, err, w)
				}
			}
		}
	}
}

// TestBadFlagIsBrief: a bad flag prints its error and a one-line --help hint, not the
// ~150 lines of every flag's usage; -h prints them.
func TestBadFlagIsBrief(t *testing.T) {
	bootstraptest.BadFlagIsBrief(t, "admission", func(fs *flag.FlagSet, args []string) error {
		_, err := parseFlags(fs, args)
		return err
	})
}
