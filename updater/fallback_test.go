package updater

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Issue 14 kind 14: gpufrac_updater_in_place_updates_total{result="fallback"} counts
// pods recreated instead of changed in place, not every cycle a recreate waits at a
// gate: 3 HAMi pods under InPlaceOrRecreate, one evicted and two waiting (in flight)
// over two cycles, is one fallback.
func TestFallbackCountsRecreatedPods(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeInPlaceOrRecreate, gpufracv1.BackendHAMi, 3, 3)
	f.build()
	before := testutil.ToFloat64(inPlaceTotal.WithLabelValues(ResultFallback))
	evictedBefore := testutil.ToFloat64(evictionsTotal.WithLabelValues(ResultEvicted))
	f.run()
	f.run()
	evicted := testutil.ToFloat64(evictionsTotal.WithLabelValues(ResultEvicted)) - evictedBefore
	if live := f.livePods(); len(live) != 3-int(evicted) || evicted != 1 {
		t.Fatalf("evicted %v, live %v; want one eviction", evicted, live)
	}
	if got := testutil.ToFloat64(inPlaceTotal.WithLabelValues(ResultFallback)) - before; got != evicted {
		t.Errorf("fallback counted %v for %v recreated pods", got, evicted)
	}
}
