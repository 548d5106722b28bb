package recommend

import (
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

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
