package updater

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// notInPlace is an InPlacer that can change no pod in place (ErrNotInPlace), as when
// the webhook logic's patch touches more than annotations.
type notInPlace struct{ calls int }

func (n *notInPlace) Apply(context.Context, *corev1.Pod) (bool, error) {
	n.calls++
	return false, fmt.Errorf("%w: /spec/containers/0/resources", ErrNotInPlace)
}

// InPlaceOrRecreate recreates a pod it cannot change in place, and the recreation passes
// the gates of a recreation: a pod that runs to completion (a Job's: the eviction ends
// its run and counts against its backoffLimit) or of a Deployment's older ReplicaSet
// while it rolls out (recreated from the older template, then replaced by the rollout:
// restarted twice) is not evicted for a change that is not protective, whatever the
// action first chosen for it. A pod that no gate holds is recreated.
func TestInPlaceFallbackKeepsTheRecreateGates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(f *fixture)
		evicted bool
		skip    string
	}{
		{"Job pod, restartPolicy Never", func(f *fixture) { f.ownedByJob(corev1.RestartPolicyNever) }, false, SkipRunToCompletion},
		{"Job pod, restartPolicy OnFailure", func(f *fixture) { f.ownedByJob(corev1.RestartPolicyOnFailure) }, false, SkipRunToCompletion},
		{"older ReplicaSet mid-rollout", func(f *fixture) {
			for _, o := range f.objs {
				switch o := o.(type) {
				case *appsv1.Deployment:
					o.Annotations = map[string]string{revisionDeploymentAnnotation: "2"}
				case *appsv1.ReplicaSet:
					o.Annotations = map[string]string{revisionDeploymentAnnotation: "1"}
					newRS := o.DeepCopy()
					newRS.Name, newRS.UID, newRS.Annotations = "web-new", "rs-new-uid", map[string]string{revisionDeploymentAnnotation: "2"}
					newRS.Spec.Replicas = ptr.To[int32](0)
					f.objs = append(f.objs, newRS)
				}
			}
		}, false, SkipRollout},
		{"Deployment pod, no rollout", func(*fixture) {}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 3Gi, above the upper bound 1536Mi: a shrink, not protective.
			f := newFixture(t, gpufracv1.UpdateModeInPlaceOrRecreate, gpufracv1.BackendAnnotations, 3, 3)
			tc.setup(f)
			u := f.build()
			ip := &notInPlace{}
			u.InPlace = ip
			f.run()
			if ip.calls == 0 {
				t.Fatal("the in-place change was never tried")
			}
			if got := len(f.livePods()) < 3; got != tc.evicted {
				t.Fatalf("evicted %v, want %v (pods %v)", got, tc.evicted, f.livePods())
			}
			if tc.skip == "" {
				return
			}
			st := f.status()
			if len(st.Updates) != 3 {
				t.Fatalf("updates %+v, want the 3 pods listed", st.Updates)
			}
			for _, upd := range st.Updates {
				if upd.SkipReason != tc.skip || upd.Action != gpufracv1.PodUpdateEvict {
					t.Errorf("pod %s: action %s, skip %q (%s), want evict held by %q", upd.Pod, upd.Action, upd.SkipReason, upd.SkipMessage, tc.skip)
				}
			}
		})
	}
}
