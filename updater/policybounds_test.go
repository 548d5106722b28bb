package updater

import (
	"strings"
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestPolicyBoundsAreTheTarget: a container policy edited after the recommendation was
// computed (a lowered maxMemory or maxCompute, a raised minCompute) holds for the pods
// the webhook writes at once, and the updater compares running pods with the same
// targets (contract.WithPolicy): a pod written at the new maximum is in date, not below
// a lower bound that predates it (its replacement would come back the same: an eviction
// loop). A pod above a lowered maximum is out of date, held while the recommendation is
// outdated (recommendation-outdated) as any change that is not protective.
func TestPolicyBoundsAreTheTarget(t *testing.T) {
	// The recommendation: 4Gi [3Gi, 5Gi] and 400m [300m, 500m].
	for _, tc := range []struct {
		name          string
		cp            gpufracv1.ContainerPolicy
		podGi         int64
		gen, observed int64
		outOfDate     bool
		evicted       int
		why           string
	}{
		{name: "pods at a lowered maxMemory", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("2Gi"), MaxCompute: q("250m")}, podGi: 2},
		{name: "pods at a lowered maxMemory, * policy, outdated", cp: gpufracv1.ContainerPolicy{ContainerName: "*", MaxMemory: q("2Gi"), MaxCompute: q("250m")}, podGi: 2, gen: 3, observed: 2},
		{name: "pods above a lowered maxMemory, outdated: held", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("2Gi"), MaxCompute: q("250m")}, podGi: 4, gen: 3, observed: 2, outOfDate: true},
		{name: "pods above a lowered maxMemory", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("2Gi"), MaxCompute: q("250m")}, podGi: 4, outOfDate: true, evicted: 1, why: "memory 4Gi above upper bound 2Gi"},
		{name: "pods below the target, maxCompute", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxCompute: q("250m")}, podGi: 2, outOfDate: true, evicted: 1, why: "memory 2Gi below lower bound 3Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, tc.podGi)
			f.cfg.Backend.GPUMemoryBytes = 80 << 30
			f.setTarget("4Gi", "3Gi", "5Gi")
			r := &f.gfr.Status.ContainerRecommendations[0]
			r.Target.Compute, r.LowerBound.Compute, r.UpperBound.Compute = q("400m"), q("300m"), q("500m")
			f.gfa.Generation, f.gfr.Status.ObservedGeneration = tc.gen, tc.observed
			f.gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{tc.cp}}
			f.build()
			f.run()
			st := f.status()
			evicted := 3 - len(f.livePods())
			if got := st.PodsOutOfDate > 0; got != tc.outOfDate || evicted != tc.evicted {
				t.Fatalf("%d pods out of date, %d evicted; want out of date: %v, %d evicted (blocked %s: %s; updates %+v)", st.PodsOutOfDate, evicted, tc.outOfDate, tc.evicted, st.BlockedReason, st.BlockedMessage, st.Updates)
			}
			if tc.outOfDate && tc.evicted == 0 && st.BlockedReason != SkipRecommendationOutdated {
				t.Errorf("blocked %q (%s), want %q", st.BlockedReason, st.BlockedMessage, SkipRecommendationOutdated)
			}
			for _, u := range st.Updates {
				if !strings.Contains(u.Reason, tc.why) {
					t.Errorf("update %+v, want %q", u, tc.why)
				}
			}
		})
	}
}
