package simulate

import (
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/gpufrac/gpufrac/updater"
)

// TestReplacementBucketIsTheUpdaters: with more candidates than the rate allows, the
// simulator's replacement bucket (refillTokens, takeToken) lets through as many
// replacements per step as the updater's token bucket (golang.org/x/time/rate, the
// default --eviction-burst updater.BurstOf) at the same rate, step by step from a full
// bucket, for rates that are and are not a whole number per step. Before, the
// simulator's bucket held at most one step's worth unrounded (1.5 at 1.5 a minute), so
// it let one replacement through a step where the updater averages 1.5.
func TestReplacementBucketIsTheUpdaters(t *testing.T) {
	const steps = 120
	for _, perMinute := range []float64{0.5, 1, 1.5, 2.4, 6} {
		ps := &polState{tokens: math.Inf(1)} // full, as newPolState starts it
		lim := rate.NewLimiter(rate.Limit(perMinute/60), updater.BurstOf(perMinute/60, time.Minute))
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		sim := 0
		for k := range steps {
			ps.refillTokens(perMinute, 1)
			n := 0
			for ps.takeToken(perMinute) {
				n++
			}
			m := 0
			for lim.AllowN(t0.Add(time.Duration(k)*time.Minute), 1) {
				m++
			}
			if n != m {
				t.Errorf("%v a minute, step %d: simulator %d replacements, updater %d", perMinute, k, n, m)
			}
			sim += n
		}
		// At least the rate, less what the cap may drop: a bucket of one step's worth
		// rounded up loses the fraction above it.
		if want := perMinute * steps; float64(sim) > want+float64(updater.BurstOf(perMinute/60, time.Minute)) || float64(sim) < 0.9*want {
			t.Errorf("%v a minute: %d replacements in %d steps, want about %.0f", perMinute, sim, steps, want)
		}
	}
}
