package updater

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// A StatefulSet or DaemonSet with the OnDelete update strategy recreates a deleted pod
// from its newest template: the user releases a template change pod by pod by deleting
// them. An eviction of a pod still at an older revision would release it for them, so
// such a pod is not replaced (SkipUnreleasedRevision), also for protective growth. A pod
// at the newest revision, or one that a RollingUpdate replaces anyway, is replaced as
// before.
func TestOnDeleteUnreleasedRevisionKept(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     string
		onDelete bool
		current  bool // the pods are at the controller's newest revision
		oom      bool // protective growth (target above the pods, an out-of-memory exit)
		evicted  bool
	}{
		{"StatefulSet OnDelete, older revision", "StatefulSet", true, false, false, false},
		{"StatefulSet OnDelete, older revision, protective growth", "StatefulSet", true, false, true, false},
		{"StatefulSet OnDelete, newest revision", "StatefulSet", true, true, false, true},
		{"StatefulSet RollingUpdate, older revision", "StatefulSet", false, false, false, true},
		{"DaemonSet OnDelete, older template generation", "DaemonSet", true, false, false, false},
		{"DaemonSet OnDelete, newest template generation", "DaemonSet", true, true, false, true},
		{"DaemonSet RollingUpdate, older template generation", "DaemonSet", false, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 3)
			if tc.oom {
				f.setTarget("4Gi", "3584Mi", "5Gi")
			}
			f.gfa.Spec.TargetRef.Kind = tc.kind
			var owner client.Object
			podLabel, podValue := appsv1.ControllerRevisionHashLabelKey, "web-1"
			if tc.current {
				podValue = "web-2"
			}
			switch tc.kind {
			case "StatefulSet":
				sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "sts-uid"},
					Spec:   appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)},
					Status: appsv1.StatefulSetStatus{CurrentRevision: "web-1", UpdateRevision: "web-2"}}
				if tc.onDelete {
					sts.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
				} else {
					sts.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
				}
				owner = sts
			case "DaemonSet":
				ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "ds-uid",
					Annotations: map[string]string{"deprecated.daemonset.template.generation": "2"}}}
				ds.Status.DesiredNumberScheduled = 2
				if tc.onDelete {
					ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
				} else {
					ds.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
				}
				owner = ds
				podLabel, podValue = "pod-template-generation", "1"
				if tc.current {
					podValue = "2"
				}
			}
			f.objs = append(f.objs, owner)
			for i, p := range f.pods {
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: tc.kind, Name: "web", UID: owner.GetUID(), Controller: ptr.To(true)}}
				p.Labels[podLabel] = podValue
				if tc.kind == "DaemonSet" {
					p.Spec.NodeName = []string{"n1", "n2"}[i]
				}
				if tc.oom {
					oomKilled(p)
				}
			}
			f.build()
			f.run()
			f.run() // protective growth waits a cycle for its floor to be published
			live := f.livePods()
			evicted := !live[f.pods[0].Name] || !live[f.pods[1].Name]
			st := f.status()
			if evicted != tc.evicted {
				t.Fatalf("evicted %v, want %v (updates %+v)", evicted, tc.evicted, st.Updates)
			}
			if !tc.evicted {
				if len(st.Updates) == 0 || st.Updates[0].SkipReason != SkipUnreleasedRevision {
					t.Fatalf("updates %+v, want skip reason %s", st.Updates, SkipUnreleasedRevision)
				}
			}
		})
	}
}

// oomKilled gives p's container "main" a last termination OOMKilled a minute ago, the
// pod running again since.
func oomKilled(p *corev1.Pod) {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled",
			FinishedAt: metav1.NewTime(time.Now().Add(-time.Minute))}}}}
}
