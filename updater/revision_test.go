package updater

import (
	"fmt"
	"strings"
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
// at the newest revision is replaced as before; one at an older revision under
// RollingUpdate is its rolling update's (SkipRollout).
func TestOnDeleteUnreleasedRevisionKept(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     string
		onDelete bool
		current  bool   // the pods are at the controller's newest revision
		oom      bool   // protective growth (target above the pods, an out-of-memory exit)
		skip     string // the pods' skip reason ("": one is evicted)
	}{
		{"StatefulSet OnDelete, older revision", "StatefulSet", true, false, false, SkipUnreleasedRevision},
		{"StatefulSet OnDelete, older revision, protective growth", "StatefulSet", true, false, true, SkipUnreleasedRevision},
		{"StatefulSet OnDelete, newest revision", "StatefulSet", true, true, false, ""},
		{"StatefulSet RollingUpdate, older revision", "StatefulSet", false, false, false, SkipRollout},
		{"StatefulSet RollingUpdate, newest revision", "StatefulSet", false, true, false, ""},
		{"DaemonSet OnDelete, older template generation", "DaemonSet", true, false, false, SkipUnreleasedRevision},
		{"DaemonSet OnDelete, newest template generation", "DaemonSet", true, true, false, ""},
		{"DaemonSet RollingUpdate, older template generation", "DaemonSet", false, false, false, SkipRollout},
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
				switch tc.kind {
				case "StatefulSet":
					p.Name = fmt.Sprintf("web-%d", i)
				case "DaemonSet":
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
			if evicted != (tc.skip == "") {
				t.Fatalf("evicted %v, want %v (updates %+v)", evicted, tc.skip == "", st.Updates)
			}
			if tc.skip != "" {
				if len(st.Updates) != 2 || st.Updates[0].SkipReason != tc.skip || st.Updates[1].SkipReason != tc.skip {
					t.Fatalf("updates %+v, want skip reason %s", st.Updates, tc.skip)
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

// A Deployment rolling out a newer template replaces the pods of its older ReplicaSets
// itself, and the webhook writes their replacements: evicting one would restart it twice
// (its ReplicaSet recreates it, the rollout then removes that). Such a pod is replaced
// only for protective growth (SkipRollout); the pods of the newest ReplicaSet are
// replaced as before, the older ones counted in the budget once. A rollout that stalled
// (ProgressDeadlineExceeded) still holds them, and says so. A rollout paused midway
// (spec.paused) replaces nothing while paused, for hours or days: before, its older
// pods were held all that time for "the rollout replaces it"; now they are replaced as
// any pod, by their own ReplicaSet from their own template (releasing nothing of the
// newer one).
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
		// spec.paused: the rollout replaces nothing while paused; the older ReplicaSet
		// recreates its pod from its own template (TestPausedRolloutReleasesOlderPods).
		{"rollout paused", false, false, "web-abc-0", ""},
		{"rollout stalled", false, false, "", SkipRollout},
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
					o.Spec.Paused = tc.name == "rollout paused"
					if tc.name == "rollout stalled" {
						o.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
							Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "web-new" has timed out progressing.`, LastUpdateTime: metav1.NewTime(f.now.Add(-time.Hour))}}
					}
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
				if tc.name == "rollout stalled" && (!strings.Contains(u.SkipMessage, "stalled") || !strings.Contains(u.SkipMessage, "timed out progressing")) {
					t.Errorf("pod %s: %q does not say the rollout stalled", u.Pod, u.SkipMessage)
				}
			}
		})
	}
}

// A StatefulSet in a rolling update recreates a deleted pod at ordinal partition or
// above at its update revision: its controller moves the pods there one at a time, from
// the highest ordinal down, each once the one before is Ready. An eviction of a pod not
// updated yet would move it out of that order (a broken new revision spreads past the
// pod the rollout stopped at), so it is not replaced, not even for protective growth
// (SkipRollout); a pod below the partition, recreated at the current revision, is. A
// DaemonSet's rolling update likewise.
func TestRollingStatefulSetPodsKeepTheirOrder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kind      string
		partition int32 // StatefulSet; -1: the DaemonSet counts every pod updated
		oom       bool
		evicted   bool
	}{
		{"StatefulSet, rolling update stopped at its last pod", "StatefulSet", 0, false, false},
		{"StatefulSet, rolling update, protective growth", "StatefulSet", 0, true, false},
		{"StatefulSet, pods below the partition", "StatefulSet", 2, false, true},
		{"DaemonSet, rolling update", "DaemonSet", 0, false, false},
		{"DaemonSet, every pod updated (by its hash, after a rollback)", "DaemonSet", -1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 3)
			if tc.oom {
				f.setTarget("4Gi", "3584Mi", "5Gi")
			}
			f.gfa.Spec.TargetRef.Kind = tc.kind
			var owner client.Object
			podLabel, podValue := appsv1.ControllerRevisionHashLabelKey, "web-1"
			switch tc.kind {
			case "StatefulSet":
				sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "sts-uid"},
					Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
						Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(tc.partition)}}},
					Status: appsv1.StatefulSetStatus{CurrentRevision: "web-1", UpdateRevision: "web-2"}}
				owner = sts
			case "DaemonSet":
				ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "ds-uid",
					Annotations: map[string]string{"deprecated.daemonset.template.generation": "2"}}}
				ds.Status.DesiredNumberScheduled = 3
				if tc.partition < 0 {
					ds.Status.UpdatedNumberScheduled = 3
				}
				ds.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
				owner = ds
				podLabel, podValue = "pod-template-generation", "1"
			}
			f.objs = append(f.objs, owner)
			for i, p := range f.pods {
				if tc.kind == "StatefulSet" {
					p.Name = fmt.Sprintf("web-%d", i)
				}
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: tc.kind, Name: "web", UID: owner.GetUID(), Controller: ptr.To(true)}}
				p.Labels[podLabel] = podValue
				p.Spec.NodeName = []string{"n1", "n2"}[i]
				if tc.oom {
					oomKilled(p)
				}
			}
			// The third pod, updated and Ready: the rollout has moved it already.
			third := f.addPod("web-2", 1, &appsv1.ReplicaSet{})
			third.OwnerReferences = f.pods[0].OwnerReferences
			third.Labels[podLabel] = map[string]string{"StatefulSet": "web-2", "DaemonSet": "2"}[tc.kind]
			third.Spec.NodeName = "n3"
			f.setTarget(map[bool]string{false: "1Gi", true: "4Gi"}[tc.oom], map[bool]string{false: "768Mi", true: "3584Mi"}[tc.oom], map[bool]string{false: "1536Mi", true: "5Gi"}[tc.oom])
			f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](2)
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
				for _, u := range st.Updates {
					if u.Pod != "web-2" && u.SkipReason != SkipRollout {
						t.Errorf("pod %s skipped for %s (%s), want %s", u.Pod, u.SkipReason, u.SkipMessage, SkipRollout)
					}
				}
			}
		})
	}
}

// A StatefulSet whose template was just changed has status.updateRevision of the
// template before until its controller observes the change (status.observedGeneration
// below metadata.generation): a pod at that revision only looks released. Its deletion
// gets the newest template, so it is held as a pod at an older revision is
// (SkipUnreleasedRevision under OnDelete; SkipRollout at or above a rolling update's
// partition), until the controller has observed it; a pod below the partition, recreated
// at the current revision, is not. Before, the pod was evicted and recreated from a
// template the user had not released (OnDelete), or ahead of its rolling update.
func TestStatefulSetStatusNotObservedHolds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		onDelete  bool
		partition int32
		observed  int64 // status.observedGeneration; the StatefulSet is at generation 3
		skip      string
	}{
		{"OnDelete, template change not observed", true, 0, 2, SkipUnreleasedRevision},
		{"OnDelete, observed", true, 0, 3, ""},
		{"RollingUpdate, template change not observed", false, 0, 2, SkipRollout},
		{"RollingUpdate, below the partition, not observed", false, 2, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 3)
			f.gfa.Spec.TargetRef.Kind = "StatefulSet"
			sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "sts-uid", Generation: 3},
				Spec:   appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)},
				Status: appsv1.StatefulSetStatus{ObservedGeneration: tc.observed, CurrentRevision: "web-2", UpdateRevision: "web-2"}}
			sts.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
			sts.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(tc.partition)}
			if tc.onDelete {
				sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
			}
			f.objs = append(f.objs, sts)
			for i, p := range f.pods {
				p.Name = fmt.Sprintf("web-%d", i)
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: sts.UID, Controller: ptr.To(true)}}
				p.Labels[appsv1.ControllerRevisionHashLabelKey] = "web-2"
			}
			f.build()
			f.run()
			live := f.livePods()
			evicted := !live[f.pods[0].Name] || !live[f.pods[1].Name]
			st := f.status()
			if evicted != (tc.skip == "") {
				t.Fatalf("evicted %v, want %v (updates %+v)", evicted, tc.skip == "", st.Updates)
			}
			for _, u := range st.Updates {
				if tc.skip != "" && (u.SkipReason != tc.skip || !strings.Contains(u.SkipMessage, "generation 3")) {
					t.Errorf("pod %s skipped for %s (%s), want %s naming generation 3", u.Pod, u.SkipReason, u.SkipMessage, tc.skip)
				}
			}
		})
	}
}
