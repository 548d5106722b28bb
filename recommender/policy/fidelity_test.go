package policy

import (
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// Kind 4 (issue 13): compute from GPU_UTIL alone that reads busy is never Exclusive: under
// the exclusive memory share it is TimeSlicing, which reserves no compute (the pod gets
// its memory and shares time), at the confidence it has; where memory needs most of the
// GPU it is Exclusive with confidence capped under the LowConfidence threshold. The same
// numbers from SM_ACTIVE are Exclusive at full confidence.
func TestGPUUtilBusyIsNotExclusive(t *testing.T) {
	c := Config{GPUMemoryBytes: 80 << 30}
	est := func(src string, memBytes float64) estimate.Estimate {
		return estimate.Estimate{HasMemory: true, HasCompute: true, ComputeSource: src, Confidence: 0.8,
			Target: estimate.Resources{MemoryBytes: memBytes, Compute: 1.13}, RecentPeakBytes: memBytes / 1.15,
			ComputeMedian: 0.93, ComputeP95: 0.98}
	}
	for _, tc := range []struct {
		name     string
		est      estimate.Estimate
		want     gpufracv1.SharingMode
		wantConf int32
	}{
		{"GPU_UTIL busy, 9000 MiB", est(metrics.DCGMGPUUtil, 9000<<20), gpufracv1.SharingModeTimeSlicing, 80},
		{"SM_ACTIVE busy, 9000 MiB", est(metrics.DCGMSMActive, 9000<<20), gpufracv1.SharingModeExclusive, 80},
		{"GPU_UTIL busy, 70 GiB", est(metrics.DCGMGPUUtil, 70<<30), gpufracv1.SharingModeExclusive, int32(estimate.LowFidelityBusyConfidence * 100)},
	} {
		rec := c.Recommend("main", tc.est, nil, nil, gpufracv1.GuardrailNone)
		if rec.SharingMode != tc.want || rec.ConfidencePercent != tc.wantConf {
			t.Errorf("%s: %s at %d%%, want %s at %d%% (%s)", tc.name, rec.SharingMode, rec.ConfidencePercent, tc.want, tc.wantConf, rec.SharingModeReason)
		}
		if tc.est.ComputeSource == metrics.DCGMGPUUtil && rec.SharingMode != gpufracv1.SharingModeExclusive && rec.PartitionsCompute() {
			t.Errorf("%s: compute from GPU_UTIL would be reserved (%s)", tc.name, rec.SharingMode)
		}
	}
}
