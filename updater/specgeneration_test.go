package updater

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// An autoscaler whose spec was edited after its recommendation was computed (a policy
// bound changed mid-replacement: maxMemory lowered, memoryHeadroomPercent raised;
// status.observedGeneration of the recommendation below metadata.generation) has a
// recommendation made for the former spec: the updater replaces no pod towards it (each
// would be replaced again once the recommender recomputes), until the recommender has
// written for the current generation. Protective growth still goes ahead: an old target
// still protects a pod from what it uses now. A recommendation without an
// observedGeneration (a recommender that does not write one) is not held.
func TestRecommendationOfAnOlderSpecReplacesNothing(t *testing.T) {
	for _, tc := range []struct {
		name          string
		gen, observed int64
		oom           bool
		replaced      int
	}{
		{"computed for the spec", 2, 2, false, 1},
		{"no observedGeneration written", 2, 0, false, 1},
		{"computed for an older spec", 3, 2, false, 0},
		{"older spec, out of memory", 3, 2, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 4) // 4Gi pods, target 1Gi
			f.gfa.Generation = tc.gen
			f.gfr.Status.ObservedGeneration = tc.observed
			if tc.oom {
				f.setTarget("8Gi", "6Gi", "10Gi")
				f.gfr.Status.ObservedGeneration = tc.observed
				f.pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1, LastTerminationState: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}
			}
			f.build()
			f.run()
			if tc.oom {
				f.run() // the exit's floor is published first (awaiting-floor)
			}
			st := f.status()
			if got := 2 - len(f.livePods()); got != tc.replaced {
				t.Fatalf("%d pod(s) replaced, want %d (blocked %s: %s; updates %+v)", got, tc.replaced, st.BlockedReason, st.BlockedMessage, st.Updates)
			}
			if tc.replaced == 0 && st.BlockedReason != SkipRecommendationOutdated {
				t.Errorf("blocked %q (%s), want %q", st.BlockedReason, st.BlockedMessage, SkipRecommendationOutdated)
			}
		})
	}
}
