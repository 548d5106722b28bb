package contract

import "testing"

// TestPlacedCompute: a partitioned, controlled container is placed by its compute target;
// a time-sliced one by its placement-only request; one with neither by nothing.
func TestPlacedCompute(t *testing.T) {
	for _, tc := range []struct {
		name        string
		t           Target
		milli       int64
		request, ok bool
	}{
		{"partitioned", Target{Compute: 300, ControlsCompute: true, ComputeRequest: -1}, 300, false, true},
		{"time-sliced", Target{Compute: 300, ComputeRequest: 120}, 120, true, true},
		{"neither", Target{Compute: -1, ComputeRequest: -1}, -1, true, false},
	} {
		if v, req, ok := tc.t.PlacedCompute(); ok != tc.ok || (ok && (v != tc.milli || req != tc.request)) {
			t.Errorf("%s: %d, %v, %v; want %d, %v, %v", tc.name, v, req, ok, tc.milli, tc.request, tc.ok)
		}
	}
}
