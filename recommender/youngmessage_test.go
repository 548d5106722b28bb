package recommender

import (
	"testing"
	"time"
)

// TestYoungEvidenceMessage: the LowConfidence=False YoungEvidence message says how long
// memory held its level, n memory aggregation intervals, from the margin written (100/n
// in whole percent): exact up to n = 10, "about" above, where rounding the margin loses n.
func TestYoungEvidenceMessage(t *testing.T) {
	for _, tc := range []struct {
		margin   int32
		interval time.Duration
		n        int
		want     string
	}{
		{100, time.Hour, 1, "1 hour"},
		{50, time.Hour, 2, "2 hours"},
		{20, time.Hour, 5, "5 hours"},
		{14, time.Hour, 7, "7 hours"}, // 100/7 = 14.3
		{11, time.Hour, 9, "9 hours"}, // 100/9 = 11.1
		{10, time.Hour, 10, "10 hours"},
		{8, time.Hour, 13, "about 13 hours"}, // n = 12 or 13: 100/12 = 8.3, 100/13 = 7.7
		{34, 30 * time.Minute, 3, "1h30m0s"},
		{50, 30 * time.Minute, 2, "1 hour"},
	} {
		if n := levelIntervals(tc.margin); n != tc.n {
			t.Errorf("margin %d%%: n = %d, want %d", tc.margin, n, tc.n)
		}
		if got := atLevel(levelIntervals(tc.margin), tc.interval); got != tc.want {
			t.Errorf("margin %d%%, interval %s: %q, want %q", tc.margin, tc.interval, got, tc.want)
		}
	}
}
