package recommend

import (
	"fmt"
	"testing"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

const gib = 1 << 30

// memoryModel is a model of one workload container whose memory is steady at base bytes
// for days and then at peak bytes for its last hour; it returns the model and the time
// after the last sample.
func memoryModel(w history.WorkloadKey, base, peak float64, days int) (*history.Model, time.Time) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	m := history.NewModel(history.Options{})
	var ms, cs metrics.Series
	ms.ID = metrics.ContainerID{Namespace: w.Namespace, Pod: "p1", Container: "main"}
	cs.ID = ms.ID
	end := t0.Add(time.Duration(days) * 24 * time.Hour)
	for at := t0; at.Before(end); at = at.Add(time.Minute) {
		v := base
		if end.Sub(at) <= time.Hour {
			v = peak
		}
		ms.Samples = append(ms.Samples, metrics.Sample{Time: at, Value: v})
		cs.Samples = append(cs.Samples, metrics.Sample{Time: at, Value: 0.3})
	}
	m.Add(w, metrics.SignalMemory, ms)
	m.Add(w, metrics.SignalCompute, cs)
	return m, end
}

// TestKeptRecommendationReportsTheFreshPeak: a written recommendation kept because the
// new one is within noise (a target held at the policy's minMemory or maxMemory, which
// does not move while the workload's memory does) still reports the observed peak of
// now. observedPeakMemory is what the annotations and kai-nvfractions backends place a
// pod by (the observed-peak request) and what the updater's near-limit and used-up rules
// compare a pod's allocation with: a stale one packs pods by memory they no longer hold
// below what they use.
func TestKeptRecommendationReportsTheFreshPeak(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	c := Config{}.WithDefaults()
	for _, tc := range []struct {
		name       string
		cp         gpufracv1.ContainerPolicy
		base, peak float64
	}{
		{"held at minMemory, peak 2 -> 6 GiB", gpufracv1.ContainerPolicy{ContainerName: "*", MinMemory: q("20Gi")}, 2 * gib, 6 * gib},
		{"held at minMemory, peak 2 -> 12 GiB", gpufracv1.ContainerPolicy{ContainerName: "*", MinMemory: q("20Gi")}, 2 * gib, 12 * gib},
		{"held at minMemory, peak 2 -> 16 GiB", gpufracv1.ContainerPolicy{ContainerName: "*", MinMemory: q("20Gi")}, 2 * gib, 16 * gib},
		{"capped at maxMemory, peak 10 -> 14 GiB", gpufracv1.ContainerPolicy{ContainerName: "*", MaxMemory: q("8Gi")}, 10 * gib, 14 * gib},
		{"capped at maxMemory, peak 10 -> 30 GiB", gpufracv1.ContainerPolicy{ContainerName: "*", MaxMemory: q("8Gi")}, 10 * gib, 30 * gib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &gpufracv1.GPUFractionAutoscalerSpec{ResourcePolicy: &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{tc.cp}}}
			before, at := memoryModel(w, tc.base, tc.base, 7)
			written, _, _ := c.Recommend(before, w, spec, nil, nil, gpufracv1.GuardrailNone, at)
			after, at := memoryModel(w, tc.base, tc.peak, 7)
			recs, _, _ := c.Recommend(after, w, spec, nil, written, gpufracv1.GuardrailNone, at)
			if len(written) != 1 || len(recs) != 1 {
				t.Fatalf("recommendations %d, %d", len(written), len(recs))
			}
			if recs[0].Target.Memory.Cmp(*written[0].Target.Memory) != 0 {
				t.Fatalf("target %s, written %s: not the kept-within-noise case this test is for", recs[0].Target.Memory, written[0].Target.Memory)
			}
			if got := recs[0].ObservedPeakMemory.AsApproximateFloat64(); got < tc.peak {
				t.Errorf("observedPeakMemory %.1f GiB, the peak of now is %.1f GiB", got/gib, tc.peak/gib)
			}
		})
	}
}

// TestKeptTargetNotBelowThePeak: over many histories whose peak rises a little above
// the one the written recommendation was made from, the recommendation made with it as
// prev never has a memory target below the observed peak of now, whatever the policy's
// memoryHeadroomPercent (0 included): the noise keeps a written target only while it
// still holds what the workload was seen to use. Outside that, lowerBound ≤ target ≤
// upperBound.
func TestKeptTargetNotBelowThePeak(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	c := Config{}.WithDefaults()
	for _, headroom := range []int32{0, 1, 2, 5, 15, 100, 200} {
		for _, base := range []float64{1.3 * gib, 5 * gib, 9.7 * gib, 23 * gib} {
			for _, rise := range []float64{0.001, 0.005, 0.01, 0.015, 0.019, 0.03} {
				name := fmt.Sprintf("headroom %d%%, %.1f GiB +%.1f%%", headroom, base/gib, rise*100)
				cp := gpufracv1.ContainerPolicy{ContainerName: "*", MemoryHeadroomPercent: &headroom}
				spec := &gpufracv1.GPUFractionAutoscalerSpec{ResourcePolicy: &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{cp}}}
				before, at := memoryModel(w, base, base, 3)
				written, _, _ := c.Recommend(before, w, spec, nil, nil, gpufracv1.GuardrailNone, at)
				after, at := memoryModel(w, base, base*(1+rise), 3)
				recs, _, _ := c.Recommend(after, w, spec, nil, written, gpufracv1.GuardrailNone, at)
				if len(recs) != 1 {
					t.Fatalf("%s: %d recommendations", name, len(recs))
				}
				r := recs[0]
				if got, peak := r.Target.Memory.AsApproximateFloat64(), base*(1+rise); got < peak {
					t.Errorf("%s: memory target %.0f MiB below the observed peak %.0f MiB", name, got/(1<<20), peak/(1<<20))
				}
				if r.LowerBound.Memory.Cmp(*r.Target.Memory) > 0 || r.Target.Memory.Cmp(*r.UpperBound.Memory) > 0 {
					t.Errorf("%s: memory %s ≤ %s ≤ %s does not hold", name, r.LowerBound.Memory, r.Target.Memory, r.UpperBound.Memory)
				}
			}
		}
	}
}
