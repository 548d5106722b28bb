package policy

import (
	"strings"
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/estimate"
)

// A maximum under the need holds the target at the cap and the shortfall is need − cap,
// in MiB and milli-GPU; a target below the need for another reason is no shortfall.
func TestCappedBelowNeed(t *testing.T) {
	const gib = 1 << 30
	cp := &gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("4Gi"), MaxCompute: q("500m")}
	est := estimate.Estimate{
		Target:     estimate.Resources{MemoryBytes: 6 * gib, Compute: 0.7},
		LowerBound: estimate.Resources{MemoryBytes: 5 * gib, Compute: 0.6},
		UpperBound: estimate.Resources{MemoryBytes: 7 * gib, Compute: 0.8},
		HasMemory:  true, HasCompute: true, Confidence: 1, RecentPeakBytes: 5 * gib,
	}
	rec := Config{FitMemoryHeadroomBytes: -1}.Recommend("main", est, cp, nil, gpufracv1.GuardrailNone)
	if rec.Target.Memory.Value() != 4*gib || rec.Target.Compute.MilliValue() != 500 {
		t.Fatalf("target %v/%v, want the caps 4Gi/500m", rec.Target.Memory, rec.Target.Compute)
	}
	s := CappedBelowNeed(rec, cp)
	if !s.Capped() || s.MemoryBytes != rec.UncappedTarget.Memory.Value()-4*gib || s.ComputeMilli != rec.UncappedTarget.Compute.MilliValue()-500 {
		t.Fatalf("shortfall %+v, uncapped %v/%v", s, rec.UncappedTarget.Memory, rec.UncappedTarget.Compute)
	}
	if got := s.String(); !strings.Contains(got, "memory capped below need by 2048 MiB") || !strings.Contains(got, "compute capped below need by 200 milli-GPU") {
		t.Errorf("message %q", got)
	}

	// No maximum: the same estimate is not capped.
	free := &gpufracv1.ContainerPolicy{ContainerName: "main"}
	if s := CappedBelowNeed(Config{FitMemoryHeadroomBytes: -1}.Recommend("main", est, free, nil, gpufracv1.GuardrailNone), free); s.Capped() {
		t.Errorf("no maximum, shortfall %+v", s)
	}
	if s := CappedBelowNeed(rec, nil); s.Capped() {
		t.Errorf("nil policy, shortfall %+v", s)
	}

	// Packing-aware rounding (FitShare) lowers the target under the need without a cap:
	// not a shortfall.
	big := &gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("60Gi")}
	fit := est
	fit.Target.MemoryBytes, fit.RecentPeakBytes = 42*gib, 30*gib
	r := Config{}.Recommend("main", fit, big, nil, gpufracv1.GuardrailNone)
	if r.Target.Memory.Cmp(*r.UncappedTarget.Memory) >= 0 {
		t.Fatalf("FitShare did not round 42Gi down: %v", r.Target.Memory)
	}
	if s := CappedBelowNeed(r, big); s.MemoryBytes != 0 {
		t.Errorf("rounded to a share, reported as capped: %+v", s)
	}

	// A target raised above the cap (a rollback floor) leaves need − target.
	raised := rec
	raised.Target.Memory = q("5Gi")
	if s := CappedBelowNeed(raised, cp); s.MemoryBytes != rec.UncappedTarget.Memory.Value()-5*gib {
		t.Errorf("floor above the cap: shortfall %d", s.MemoryBytes)
	}
}
