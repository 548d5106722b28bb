package updater

import (
	"strings"
	"testing"
)

// TestConfigErrorsNameTheirFlags: every error of Config.Validate that is about a flag
// starts with the flag, leading "--" included, as the backend's and --min-confidence's
// it is joined with do (they read "threshold 12: ..." beside "--kai-mode ...").
func TestConfigErrorsNameTheirFlags(t *testing.T) {
	c := Config{LeaseNamespace: "gpufrac", Threshold: 12, NearLimit: 2, ConsolidationComputeMilli: 5000}
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"--threshold 12", "--near-limit 2", "--consolidation-compute 5000"} {
		found := false
		for _, line := range strings.Split(err.Error(), "\n") {
			found = found || strings.HasPrefix(line, want)
		}
		if !found {
			t.Errorf("error %q: no line starts %q", err, want)
		}
	}
}
