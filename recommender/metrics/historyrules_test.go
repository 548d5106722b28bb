package metrics_test

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// The hourly recordings are one memory aggregation interval (the memory histogram's one
// sample) made of whole minute recordings.
func TestHistoryIntervals(t *testing.T) {
	if metrics.HistoryPeakInterval != history.DefaultMemoryAggregationInterval {
		t.Errorf("HistoryPeakInterval %s, memory aggregation interval %s", metrics.HistoryPeakInterval, history.DefaultMemoryAggregationInterval)
	}
	if metrics.HistoryPeakInterval%metrics.HistoryRuleInterval != 0 {
		t.Errorf("HistoryPeakInterval %s is not whole HistoryRuleIntervals (%s)", metrics.HistoryPeakInterval, metrics.HistoryRuleInterval)
	}
	// Each minute rule is the reader's own query for one HistoryRuleInterval window.
	for _, r := range metrics.HistoryRules() {
		if r.Source != "" && !strings.Contains(r.Expr, "[60s]") {
			t.Errorf("%s{source=%q} does not read 60 s windows: %s", r.Record, r.Source, r.Expr)
		}
	}
}
