package admission

import (
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

// TestMutateSpecBoundsOverAnOlderRecommendation: the autoscaler's container policy was
// edited after its recommendation was computed (status.observedGeneration below the
// autoscaler's generation: the recommender's next cycle has not run, or it keeps the
// last recommendation while Prometheus is down). A lowered maxMemory or maxCompute, or a
// raised minCompute, holds for new pods at once (contract.WithPolicy), as minMemory did:
// the webhook never writes more than the user's maximum into a new pod. The record says
// what the pod holds, which the updater compares with the same clamped target.
func TestMutateSpecBoundsOverAnOlderRecommendation(t *testing.T) {
	const gpu = 80 << 30
	for _, tc := range []struct {
		name                   string
		cp                     gpufracv1.ContainerPolicy
		wantMiB, wantMilli     int64
		wantRecMiB, wantRecMil int64
		warn                   bool
	}{
		{name: "no bounds", cp: gpufracv1.ContainerPolicy{ContainerName: "main"}, wantMiB: 4096, wantMilli: 500, wantRecMiB: 4096, wantRecMil: 500},
		{name: "maxMemory above the target", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("8Gi")}, wantMiB: 4096, wantMilli: 500, wantRecMiB: 4096, wantRecMil: 500},
		{name: "maxMemory lowered below the target", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxMemory: q("1Gi")}, wantMiB: 1024, wantMilli: 500, wantRecMiB: 1024, wantRecMil: 500, warn: true},
		{name: "maxMemory lowered, * policy", cp: gpufracv1.ContainerPolicy{ContainerName: "*", MaxMemory: q("3Gi")}, wantMiB: 3072, wantMilli: 500, wantRecMiB: 3072, wantRecMil: 500, warn: true},
		{name: "maxCompute lowered below the target", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MaxCompute: q("300m")}, wantMiB: 4096, wantMilli: 300, wantRecMiB: 4096, wantRecMil: 300, warn: true},
		{name: "minCompute raised above the target", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MinCompute: q("700m")}, wantMiB: 4096, wantMilli: 700, wantRecMiB: 4096, wantRecMil: 700, warn: true},
		// minMemory and maxMemory cross only in a spec the validation refuses; the
		// minimum wins, as the recommender clamps (policy.WithinPolicy).
		{name: "minMemory above maxMemory: the minimum", cp: gpufracv1.ContainerPolicy{ContainerName: "main", MinMemory: q("6Gi"), MaxMemory: q("2Gi")}, wantMiB: 6144, wantMilli: 500, wantRecMiB: 6144, wantRecMil: 500, warn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
			gfa.Generation = 2 // the recommendation was computed for generation 1
			gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{tc.cp}}
			r := containerRec("main", "4Gi", "500m")
			r.SharingMode = gpufracv1.SharingModeMPS
			m := mutator(t, Config{Config: backend.Config{GPUMemoryBytes: gpu}}, gfa, recommendation("web", 80, r))
			resp, got, ac := admitMain(t, m, tc.wantMiB)
			if ac.WrittenCompute == nil || ac.WrittenCompute.MilliValue() != tc.wantMilli {
				t.Errorf("written compute %v, want %dm", ac.WrittenCompute, tc.wantMilli)
			}
			if a := m.Backends[gpufracv1.BackendHAMi].Read(got)["main"]; a.Memory != tc.wantMiB<<20 {
				t.Errorf("the pod holds %d bytes, want %d MiB", a.Memory, tc.wantMiB)
			}
			if ac.Memory.Value() != tc.wantRecMiB<<20 || ac.Compute.MilliValue() != tc.wantRecMil {
				t.Errorf("record memory %s compute %s, want %d MiB %dm", ac.Memory, ac.Compute, tc.wantRecMiB, tc.wantRecMil)
			}
			if (len(resp.Warnings) > 0) != tc.warn {
				t.Errorf("warnings %v, want some: %v", resp.Warnings, tc.warn)
			}
		})
	}
}
