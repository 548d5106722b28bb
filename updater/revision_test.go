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

// A Deployment rolling out a newer template (or paused midway) replaces the pods of its
// older ReplicaSets itself, and the webhook writes their replacements: evicting one
// would restart it twice (its ReplicaSet recreates it, the rollout then removes that).
// Such a pod is replaced only for protective growth (SkipRollout); the pods of the
// newest ReplicaSet are replaced as before, the older ones counted in the budget once.
func TestRolloutReplacesOlderReplicaSetPods(t *testing.T) {
	for _, tc := range []struct {
		name       string
		newPod     bool // the newest ReplicaSet has a pod yet
		oom        bool
		wantGone   string // the pod evicted ("": none)
		wantReason string // the older pods' skip reason
	}{
		{"rollout started, no new pod yet", false, false, "", SkipRollout},
		{"new pod out of date too", true, false, "web-new-0", SkipRollout},
		{"protective growth of an older pod", false, true, "web-abc-0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 3)
			if tc.oom {
				f.setTarget("4Gi", "3584Mi", "5Gi")
				for _, p := range f.pods {
					oomKilled(p)
				}
			}
			var oldRS *appsv1.ReplicaSet
			for _, o := range f.objs {
				switch o := o.(type) {
				case *appsv1.Deployment:
					o.Annotations = map[string]string{"deployment.kubernetes.io/revision": "2"}
				case *appsv1.ReplicaSet:
					o.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
					oldRS = o
				}
			}
			newRS := oldRS.DeepCopy()
			newRS.Name, newRS.UID, newRS.Annotations = "web-new", "rs-new-uid", map[string]string{"deployment.kubernetes.io/revision": "2"}
			newRS.Spec.Replicas = ptr.To[int32](0)
			f.objs = append(f.objs, newRS)
			if tc.newPod {
				newRS.Spec.Replicas = ptr.To[int32](1)
				p := f.addPod("web-new-0", 3, newRS)
				p.CreationTimestamp = metav1.NewTime(f.now.Add(-30 * time.Minute))
			}
			f.build()
			f.run()
			f.run() // protective growth waits a cycle for its floor to be published
			live := f.livePods()
			st := f.status()
			var gone []string
			for _, p := range f.pods {
				if !live[p.Name] {
					gone = append(gone, p.Name)
				}
			}
			if want := []string{tc.wantGone}; tc.wantGone == "" && len(gone) != 0 || tc.wantGone != "" && (len(gone) != 1 || gone[0] != want[0]) {
				t.Fatalf("evicted %v, want %q (updates %+v)", gone, tc.wantGone, st.Updates)
			}
			if tc.wantReason == "" {
				return
			}
			for _, u := range st.Updates {
				if u.Pod != tc.wantGone && u.SkipReason != tc.wantReason {
					t.Errorf("pod %s skipped for %s (%s), want %s", u.Pod, u.SkipReason, u.SkipMessage, tc.wantReason)
				}
			}
		})
	}
}
