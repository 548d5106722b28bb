package updater

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// A pod that runs to completion (restartPolicy Never or OnFailure: a Job's, whatever
// owns it) is never evicted for a change that is not urgent: the eviction would end its
// run and count as a failure against the Job's backoffLimit. An out-of-memory exit
// still replaces it; a pod with restartPolicy Always of the same shape is evicted.
func TestRunToCompletionPodsNotEvictedForNonUrgentChanges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  corev1.RestartPolicy
		oom     bool
		evicted bool
		skip    string
	}{
		{"Never, shrink", corev1.RestartPolicyNever, false, false, SkipRunToCompletion},
		{"OnFailure, shrink", corev1.RestartPolicyOnFailure, false, false, SkipRunToCompletion},
		{"OnFailure, out of memory", corev1.RestartPolicyOnFailure, true, true, ""},
		{"Always, shrink", corev1.RestartPolicyAlways, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := int64(3) // above the upper bound: a shrink
			if tc.oom {
				mem = 1 // at the target; the OOM makes it urgent growth
			}
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, mem)
			if tc.oom {
				f.setTarget("2Gi", "1536Mi", "3Gi")
			}
			f.ownedByJob(tc.policy)
			if tc.oom {
				f.pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1, LastTerminationState: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "torch.OutOfMemoryError: CUDA out of memory.",
						FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}
			}
			f.build()
			f.run()
			if tc.oom {
				f.run() // the floor is published first (awaiting-floor)
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
			for _, u := range st.Updates {
				if u.SkipReason != tc.skip {
					t.Errorf("pod %s: skip %q (%s), want %q", u.Pod, u.SkipReason, u.SkipMessage, tc.skip)
				}
			}
		})
	}
}

// A Job's pod that ended out of memory raises the workload's rollback floor (oomFloor),
// which the webhook writes into the Job's next pods. Its siblings still running below
// that floor are not failing: evicting them for the rollback would end their runs, each
// a failure against the Job's backoffLimit (one exit in an 8-way parallel Job: 1 + 7
// failures, past the default backoffLimit 6), so they are held (SkipRunToCompletion).
// Growth for a pod's own out-of-memory exit still replaces it, and a pod with
// restartPolicy Always below the floor is rolled back as before.
func TestRunToCompletionSiblingsKeptBelowAnotherPodsFloor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  corev1.RestartPolicy
		evicted bool
	}{
		{"Never", corev1.RestartPolicyNever, false},
		{"OnFailure", corev1.RestartPolicyOnFailure, false},
		{"Always", corev1.RestartPolicyAlways, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
			owner := f.ownedByJob(tc.policy)
			failed := f.addPod("train-failed", 1, &appsv1.ReplicaSet{})
			failed.OwnerReferences = owner
			failed.Spec.RestartPolicy = corev1.RestartPolicyNever
			failed.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled",
					FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}}
			f.build()
			f.run()
			f.run() // the floor is published first (awaiting-floor)
			st := f.status()
			if st.Floor == nil {
				t.Fatal("no floor raised")
			}
			gone := 0
			live := f.livePods()
			for _, p := range f.pods[:3] {
				if !live[p.Name] {
					gone++
				}
			}
			if (gone > 0) != tc.evicted {
				t.Fatalf("%d evicted, want evicted %v (updates %+v)", gone, tc.evicted, st.Updates)
			}
			if tc.evicted {
				return
			}
			for _, u := range st.Updates {
				if u.SkipReason != SkipRunToCompletion || !strings.Contains(u.SkipMessage, "floor") {
					t.Errorf("pod %s: skip %q (%s), want %q naming the floor", u.Pod, u.SkipReason, u.SkipMessage, SkipRunToCompletion)
				}
			}
		})
	}
}

// A latency breach makes a workload's growth protective, but it is the workload's, not a
// run-to-completion pod's own memory running out: the pod is held (SkipRunToCompletion)
// and its workload's next pods get the recommendation.
func TestRunToCompletionKeptThroughLatencyBreach(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
	f.setTarget("2Gi", "1536Mi", "3Gi")
	f.ownedByJob(corev1.RestartPolicyNever)
	f.build()
	f.breachLatency(t)
	f.run()
	f.run()
	if len(f.livePods()) != 3 {
		t.Fatalf("a run-to-completion pod evicted for a latency breach (pods %v, updates %+v)", f.livePods(), f.status().Updates)
	}
	for _, u := range f.status().Updates {
		if !u.Urgent || u.SkipReason != SkipRunToCompletion {
			t.Errorf("pod %s: urgent %v, skip %q (%s), want urgent and %q", u.Pod, u.Urgent, u.SkipReason, u.SkipMessage, SkipRunToCompletion)
		}
	}
}

// The observed peak is the workload's (the highest sample of any of its pods, earlier
// runs' included), not a run-to-completion pod's own: one large shard of a Job near its
// memory made every sibling "near its limit" and evicted each urgently, every eviction a
// failure of the Job. A pod that runs to completion grows only on its own out-of-memory
// exit; held, it finishes or runs out itself (at most the one failure its eviction cost
// for certain). A pod with restartPolicy Always still grows urgently on the peak.
func TestRunToCompletionNotEvictedForTheWorkloadsPeak(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  corev1.RestartPolicy
		evicted bool
	}{
		{"Never", corev1.RestartPolicyNever, false},
		{"OnFailure", corev1.RestartPolicyOnFailure, false},
		{"Always", corev1.RestartPolicyAlways, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
			f.setTarget("2Gi", "768Mi", "3Gi") // 1Gi is inside the bounds
			f.gfr.Status.ContainerRecommendations[0].ObservedPeakMemory = q("1000Mi")
			f.ownedByJob(tc.policy)
			for _, p := range f.pods {
				p.CreationTimestamp = metav1.NewTime(f.now.Add(-time.Minute)) // young: only protective growth
			}
			f.build()
			f.run()
			if got := len(f.livePods()) < 3; got != tc.evicted {
				t.Fatalf("evicted %v, want %v (updates %+v)", got, tc.evicted, f.status().Updates)
			}
			if tc.evicted {
				return
			}
			for _, u := range f.status().Updates {
				if !u.Urgent || u.SkipReason != SkipRunToCompletion || !strings.Contains(u.SkipMessage, "observed peak") {
					t.Errorf("pod %s: urgent %v, skip %q (%s), want urgent and %q naming the peak", u.Pod, u.Urgent, u.SkipReason, u.SkipMessage, SkipRunToCompletion)
				}
			}
		})
	}
}

// ownedByJob makes f's autoscaler target a Job "train" and its pods that Job's, with
// restart policy policy; it returns the pods' owner references.
func (f *fixture) ownedByJob(policy corev1.RestartPolicy) []metav1.OwnerReference {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train", UID: "job-uid"}}
	f.objs = append(f.objs, job)
	f.gfa.Spec.TargetRef.APIVersion, f.gfa.Spec.TargetRef.Kind, f.gfa.Spec.TargetRef.Name = "batch/v1", "Job", "train"
	owner := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: job.UID, Controller: ptr.To(true)}}
	for _, p := range f.pods {
		p.OwnerReferences = owner
		p.Spec.RestartPolicy = policy
	}
	return owner
}
