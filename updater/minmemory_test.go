package updater

import (
	"strings"
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestPolicyMinMemoryIsTheTarget: the webhook writes at least the container policy's
// minMemory (at most one GPU) when the recommendation predates it; the updater compares
// pods with the same (contract.WithPolicy). A pod written at minMemory is in date,
// not above a stale target (its replacement would come back the same: an eviction
// loop), and a pod below a raised minMemory grows to it.
func TestPolicyMinMemoryIsTheTarget(t *testing.T) {
	// The recommendation: 1Gi, bounds [768Mi, 1536Mi]; GPUs of 80Gi.
	for _, tc := range []struct {
		name        string
		container   string // the policy's containerName
		min         string
		podGi       int64
		computeOnly bool
		outOfDate   bool
		why         string // in the out-of-date pods' reason
	}{
		{name: "pods at minMemory", container: "main", min: "3Gi", podGi: 3},
		{name: "pods at minMemory, * policy", container: "*", min: "2Gi", podGi: 2},
		{name: "pods at minMemory past one GPU", container: "main", min: "100Gi", podGi: 80},
		{name: "pods below a raised minMemory", container: "main", min: "3Gi", podGi: 1, outOfDate: true, why: "memory 1Gi below lower bound 3Gi"},
		{name: "pods below a raised minMemory, * policy", container: "*", min: "4Gi", podGi: 2, outOfDate: true, why: "memory 2Gi below lower bound 4Gi"},
		{name: "pods above minMemory and the target", container: "main", min: "2Gi", podGi: 4, outOfDate: true, why: "memory 4Gi above upper bound 2Gi"},
		{name: "minMemory below the target: the target", container: "main", min: "512Mi", podGi: 1},
		{name: "memory not controlled: no floor", container: "main", min: "3Gi", podGi: 1, computeOnly: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, tc.podGi)
			f.cfg.Backend.GPUMemoryBytes = 80 << 30
			cp := gpufracv1.ContainerPolicy{ContainerName: tc.container, MinMemory: q(tc.min)}
			if tc.computeOnly {
				cp.ControlledResources = []gpufracv1.GPUResourceName{gpufracv1.ResourceCompute}
			}
			f.gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{cp}}
			f.build()
			f.run()
			st := f.status()
			evicted := 3 - len(f.livePods())
			if got := st.PodsOutOfDate > 0; got != tc.outOfDate || (evicted > 0) != tc.outOfDate {
				t.Fatalf("%d pods out of date, %d evicted; want out of date: %v (updates %+v)", st.PodsOutOfDate, evicted, tc.outOfDate, st.Updates)
			}
			for _, u := range st.Updates {
				if !strings.Contains(u.Reason, tc.why) {
					t.Errorf("update %+v, want %q", u, tc.why)
				}
			}
		})
	}
}
