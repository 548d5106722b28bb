package recommend

import (
	"flag"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestFlags parses the shared flags on both flag packages: the defaults are the
// Config's, quantities and switches reach the Config, and bad values fail naming the
// flag.
func TestFlags(t *testing.T) {
	parse := func(fs FlagSet, parse func([]string) error, args ...string) (Config, error) {
		var c Config
		var f Flags
		f.AddFlags(fs, &c)
		if err := parse(args); err != nil {
			return c, err
		}
		return c, f.Complete()
	}
	std := func(args ...string) (Config, error) {
		fs := flag.NewFlagSet("recommender", flag.ContinueOnError)
		return parse(fs, fs.Parse, args...)
	}
	cobra := func(args ...string) (Config, error) {
		fs := pflag.NewFlagSet("simulate", pflag.ContinueOnError)
		return parse(fs, fs.Parse, args...)
	}
	for name, p := range map[string]func(...string) (Config, error){"flag": std, "pflag": cobra} {
		c, err := p()
		if err != nil {
			t.Fatalf("%s: defaults: %v", name, err)
		}
		d := Config{}.WithDefaults()
		if c.LowConfidence != d.LowConfidence || c.Estimator.ContentionBudget != d.Estimator.ContentionBudget ||
			c.Estimator.ContentionSlowdown != d.Estimator.ContentionSlowdown || c.Policy.FitMemoryHeadroomBytes != 2<<30 ||
			c.Estimator.YoungConfidence != 0 || c.Policy.MinMemoryBytes != 0 ||
			c.Estimator.MemorySpreadFactor != d.Estimator.MemorySpreadFactor || !slices.Equal(c.MemorySpreadBackends, d.MemorySpreadBackends) {
			t.Errorf("%s: defaults %+v", name, c)
		}
		// The spread: off by default, on with a factor; an empty list is none (not the
		// default list); names are checked.
		c, err = p("--memory-spread-factor=1.5", "--memory-spread-backends=")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c = c.WithDefaults(); c.Estimator.MemorySpreadFactor != 1.5 || c.MemorySpreadBackends == nil || len(c.MemorySpreadBackends) != 0 {
			t.Errorf("%s: spread 1.5 and no backends parsed as factor %v, backends %v", name, c.Estimator.MemorySpreadFactor, c.MemorySpreadBackends)
		}
		c, err = p("--memory-spread-backends= hami, kai-nvfractions")
		if err != nil || !slices.Equal(c.MemorySpreadBackends, []gpufracv1.BackendType{gpufracv1.BackendHAMi, gpufracv1.BackendKAINVFractions}) {
			t.Errorf("%s: backends %v, %v", name, c.MemorySpreadBackends, err)
		}
		if _, err := p("--memory-spread-backends=annotations,hamii"); err == nil || !strings.Contains(err.Error(), "memory-spread-backends") || !strings.Contains(err.Error(), `"hamii"`) {
			t.Errorf("%s: unknown backend: error %v, want one naming the flag and the name", name, err)
		}
		c, err = p("--contention-evidence=-1", "--contention-tenant-reserve-max=0.2")
		if err != nil || c.Estimator.ContentionEvidence != -1 || c.Estimator.ContentionTenantReserveMax != 0.2 {
			t.Errorf("%s: closed loop off, cap 0.2: parsed %v, %v (%v)", name, c.Estimator.ContentionEvidence, c.Estimator.ContentionTenantReserveMax, err)
		}
		c, err = p("--min-memory=1Gi", "--fit-memory-headroom=0", "--young-evidence=false", "--contention-budget=-1", "--fit-near-limit=0.9")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Policy.MinMemoryBytes != 1<<30 || c.Policy.FitMemoryHeadroomBytes != -1 || c.Estimator.YoungConfidence != -1 ||
			c.Estimator.ContentionBudget != -1 || c.Policy.FitNearLimit != 0.9 {
			t.Errorf("%s: parsed %+v", name, c)
		}
		for _, bad := range []string{"--contention-budget=1", "--contention-budget=1.5", "--contention-budget=0",
			"--contention-slowdown=0", "--contention-slowdown=-0.5", "--low-confidence=1.1", "--fit-near-limit=-0.1",
			"--fit-memory-headroom=x", "--fit-memory-headroom=-1Gi", "--min-memory=lots",
			"--contention-tenant-reserve-max=0", "--contention-tenant-reserve-max=1.5", "--contention-tenant-reserve-max=NaN",
			"--contention-evidence=NaN", "--contention-evidence=+Inf"} {
			want := strings.SplitN(bad, "=", 2)[0]
			if _, err := p(bad); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %s: error %v, want one naming %s", name, bad, err, want)
			}
		}
	}
}

// TestFlagsNeverFallBackToTheDefault: a value the Config reads as unset (0, or a
// negative where negative means nothing) would be replaced by the default without a
// word, so a run would report figures for a setting other than the one given. Every
// value of each shared flag either reaches the Config as given (after WithDefaults;
// history.Options keeps only positive durations) or fails naming the flag.
func TestFlagsNeverFallBackToTheDefault(t *testing.T) {
	kept := func(c Config) Config { return c.WithDefaults() }
	positive := func(d time.Duration) bool { return d > 0 } // history.Options' defaults replace the rest
	type check struct {
		flag   string
		values []string
		// given reports whether the parsed, defaulted Config holds the value given.
		given func(c Config, v string) bool
	}
	ratio := func(get func(Config) float64) func(Config, string) bool {
		return func(c Config, v string) bool {
			f, err := strconv.ParseFloat(v, 64)
			return err == nil && get(kept(c)) == f
		}
	}
	dur := func(get func(Config) time.Duration, history bool) func(Config, string) bool {
		return func(c Config, v string) bool {
			d, err := time.ParseDuration(v)
			if err != nil {
				return false
			}
			if history {
				return get(c) == d && positive(d)
			}
			return get(kept(c)) == d
		}
	}
	checks := []check{
		{"low-confidence", []string{"0", "0.01", "0.5", "1"}, ratio(func(c Config) float64 { return c.LowConfidence })},
		{"compute-margin", []string{"0", "-0.1", "-1", "0.001", "0.5"}, ratio(func(c Config) float64 { return c.Estimator.ComputeMargin })},
		{"contention-tenant-reserve", []string{"0", "-1", "0.01", "0.5"}, ratio(func(c Config) float64 { return c.Estimator.ContentionTenantReserve })},
		{"memory-spread-factor", []string{"0", "-1", "0.5", "3"}, ratio(func(c Config) float64 { return c.Estimator.MemorySpreadFactor })},
		{"memory-limit-min-headroom", []string{"0", "-1", "0.25", "1"}, ratio(func(c Config) float64 { return c.Estimator.MemoryLimitMinHeadroom })},
		{"memory-limit-typical-factor", []string{"0", "-1", "1.5", "3"}, ratio(func(c Config) float64 { return c.Estimator.MemoryLimitTypicalFactor })},
		{"full-confidence-history", []string{"0s", "-1h0m0s", "1m0s", "48h0m0s"}, dur(func(c Config) time.Duration { return c.Estimator.FullConfidenceHistory }, false)},
		{"young-min-at-level", []string{"0s", "-1m0s", "1m0s", "2h0m0s"}, dur(func(c Config) time.Duration { return c.Estimator.YoungMinAtLevel }, false)},
		{"memory-aggregation-interval", []string{"0s", "-1h0m0s", "30m0s", "2h0m0s"}, dur(func(c Config) time.Duration { return c.History.MemoryAggregationInterval }, true)},
		{"half-life", []string{"0s", "-1h0m0s", "1h0m0s", "72h0m0s"}, dur(func(c Config) time.Duration { return c.History.HalfLife }, true)},
		{"memory-peak-window", []string{"0s", "-24h0m0s", "6h0m0s", "336h0m0s"}, dur(func(c Config) time.Duration { return c.History.PeakWindow }, true)},
		{"min-memory", []string{"0", "1Mi", "1Gi"}, func(c Config, v string) bool {
			q := resource.MustParse(v)
			return kept(c).Policy.MinMemoryBytes == q.AsApproximateFloat64()
		}},
	}
	for _, ch := range checks {
		for _, v := range ch.values {
			var c Config
			var f Flags
			fs := pflag.NewFlagSet("simulate", pflag.ContinueOnError)
			f.AddFlags(fs, &c)
			if err := fs.Parse([]string{"--" + ch.flag + "=" + v}); err != nil {
				t.Fatalf("--%s=%s: parse: %v", ch.flag, v, err)
			}
			err := f.Complete()
			switch {
			case err != nil && !strings.Contains(err.Error(), "--"+ch.flag):
				t.Errorf("--%s=%s: error %q does not name the flag", ch.flag, v, err)
			case err == nil && !ch.given(c, v):
				t.Errorf("--%s=%s accepted, but the Config runs another value (its default)", ch.flag, v)
			}
		}
	}
}
