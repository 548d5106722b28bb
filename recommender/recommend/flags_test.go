package recommend

import (
	"flag"
	"strings"
	"testing"

	"github.com/spf13/pflag"
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
			c.Estimator.YoungConfidence != 0 || c.Policy.MinMemoryBytes != 0 {
			t.Errorf("%s: defaults %+v", name, c)
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
			"--fit-memory-headroom=x", "--fit-memory-headroom=-1Gi", "--min-memory=lots"} {
			want := strings.SplitN(bad, "=", 2)[0]
			if _, err := p(bad); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %s: error %v, want one naming %s", name, bad, err, want)
			}
		}
	}
}
