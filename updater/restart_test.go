package updater

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// The disruption budget counted the replacements this updater awaited in memory only:
// after a restart a workload whose replacement its controller never created (a
// ResourceQuota refusing it) had its pods counted as all there, and each restart cost
// it one more pod, down to minReplicas − 1. The budget now counts what the API server
// shows, as a PodDisruptionBudget does: the controller's wanted replicas (ReplicaSet,
// StatefulSet spec.replicas, DaemonSet status.desiredNumberScheduled) less its Ready
// pods. A scale-down to the pods left, or the replacements appearing late, free it.
func TestBudgetSurvivesRestart(t *testing.T) {
	for _, kind := range []string{"Deployment", "bare ReplicaSet", "StatefulSet", "DaemonSet"} {
		for _, tc := range []struct {
			name      string
			n         int
			scaleDown bool // the controller wants only the pods left, after the restart
			created   bool // the replacements appear (Ready) after the restart
			wantLive  int  // old pods after the cycles after the restart
		}{
			{"4 pods, never created", 4, false, false, 2},
			{"6 pods, never created", 6, false, false, 3},
			{"3 pods, never created", 3, false, false, 2},
			{"4 pods, scaled down", 4, true, false, 1},
			{"6 pods, scaled down", 6, true, false, 2},
			{"4 pods, created late", 4, false, true, 0},
			{"6 pods, created late", 6, false, true, 0},
		} {
			t.Run(kind+": "+tc.name, func(t *testing.T) {
				f, ctrl, want := controlledFixture(t, kind, tc.n)
				now := f.now
				left := f.evictFirst(t, tc.n, &now)
				if tc.scaleDown {
					f.setWanted(t, ctrl, want, int32(left))
				}
				if tc.created {
					f.createReplacements(t, tc.n-left, now)
				}
				now = f.restartEachCycle(now, 3)
				if old := f.oldPodsLeft(); old != tc.wantLive {
					st := f.status()
					t.Fatalf("%d old pods left, want %d (blocked %s: %s)", f.oldPodsLeft(), tc.wantLive, st.BlockedReason, st.BlockedMessage)
				}
				if !tc.scaleDown && !tc.created {
					st := f.status()
					if st.BlockedReason != SkipInFlight || !strings.Contains(st.BlockedMessage, "not created") || !strings.Contains(st.BlockedMessage, ctrl.GetName()) {
						t.Errorf("blocked %s: %q; want in-flight naming the controller short of a pod", st.BlockedReason, st.BlockedMessage)
					}
				}
			})
		}
	}
}

// controlledFixture returns a fixture of n pods (HAMi, Recreate) that a controller of
// kind controls ("Deployment": the fixture's ReplicaSet under its Deployment; "bare
// ReplicaSet": that ReplicaSet without it; "StatefulSet"; "DaemonSet"), the controller,
// and want, which sets how many pods the controller wants (spec.replicas, a DaemonSet's
// status.desiredNumberScheduled) on the object; it wants n. The fixture is not built.
func controlledFixture(t *testing.T, kind string, n int) (*fixture, client.Object, func(int32)) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, n, 3)
	var ctrl client.Object
	var want func(int32)
	var rs *appsv1.ReplicaSet
	for _, o := range f.objs {
		if r, ok := o.(*appsv1.ReplicaSet); ok {
			rs = r
		}
	}
	switch kind {
	case "Deployment":
		ctrl, want = rs, func(n int32) { rs.Spec.Replicas = ptr.To(n) }
	case "bare ReplicaSet":
		rs.OwnerReferences = nil
		f.gfa.Spec.TargetRef.Kind, f.gfa.Spec.TargetRef.Name = "ReplicaSet", rs.Name
		ctrl, want = rs, func(n int32) { rs.Spec.Replicas = ptr.To(n) }
	case "StatefulSet":
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "sts-uid"}}
		ctrl, want = sts, func(n int32) { sts.Spec.Replicas = ptr.To(n) }
	case "DaemonSet":
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "ds-uid"}}
		ctrl, want = ds, func(n int32) { ds.Status.DesiredNumberScheduled = n }
	default:
		t.Fatalf("controller kind %q", kind)
	}
	if kind == "StatefulSet" || kind == "DaemonSet" {
		f.objs = append(f.objs, ctrl)
		f.gfa.Spec.TargetRef.Kind = kind
		for _, p := range f.pods {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "web", UID: ctrl.GetUID(), Controller: ptr.To(true)}}
		}
	}
	want(int32(n))
	return f, ctrl, want
}

// evictFirst builds f with its clock at *now and runs a first cycle, which must evict
// max(1, n/2) of the n pods (the budget's default); it returns the pods left.
func (f *fixture) evictFirst(t *testing.T, n int, now *time.Time) int {
	t.Helper()
	f.build()
	f.u.Now = func() time.Time { return *now }
	f.run()
	left := len(f.livePods())
	if wantFirst := n - max(1, n/2); left != wantFirst {
		t.Fatalf("first cycle: %d pods left, want %d", left, wantFirst)
	}
	return left
}

// setWanted makes the controller want n pods in the API (controlledFixture's want; a
// DaemonSet's through its status).
func (f *fixture) setWanted(t *testing.T, ctrl client.Object, want func(int32), n int32) {
	t.Helper()
	ctx := t.Context()
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(ctrl), ctrl); err != nil {
		t.Fatal(err)
	}
	want(n)
	update := f.c.Update
	if _, ok := ctrl.(*appsv1.DaemonSet); ok {
		update = func(ctx context.Context, o client.Object, _ ...client.UpdateOption) error {
			return f.c.Status().Update(ctx, o)
		}
	}
	if err := update(ctx, ctrl); err != nil {
		t.Fatal(err)
	}
}

// createReplacements creates k Ready replacement pods web-new-0… created at, each with
// the applied record of a 1Gi HAMi fraction.
func (f *fixture) createReplacements(t *testing.T, k int, at time.Time) {
	t.Helper()
	for i := range k {
		p := f.pods[0].DeepCopy()
		p.Name, p.UID, p.ResourceVersion = fmt.Sprintf("web-new-%d", i), types.UID(fmt.Sprintf("uid-new-%d", i)), ""
		p.CreationTimestamp = metav1.NewTime(at)
		p.Annotations = map[string]string{gpufracv1.AnnotationApplied: `{"backend":"hami","autoscaler":"web","containers":[{"name":"main","memory":"1Gi","compute":"250m"}]}`}
		if err := f.c.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
}

// oldPodsLeft counts the fixture's original pods (web-abc-…) still live.
func (f *fixture) oldPodsLeft() int {
	old := 0
	for name := range f.livePods() {
		if strings.HasPrefix(name, "web-abc-") {
			old++
		}
	}
	return old
}

// TestJobBudgetSurvivesRestart: a Job's pods are replaced only for urgent growth (an
// out-of-memory exit, TestRunToCompletionPodsNotEvictedForNonUrgentChanges); a
// replacement its Job never created (a ResourceQuota refusing it) stays in flight
// across updater restarts, read from the Job as the pods it keeps active:
// min(spec.parallelism, spec.completions − status.succeeded), none while suspended or
// finished. A Job that wants no more pods than it has (its remaining completions are
// covered) lets the next pod go, as a scaled-down ReplicaSet does.
func TestJobBudgetSurvivesRestart(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		n                      int
		parallelism            int32
		completions            *int32
		succeeded              int32
		suspend, complete      bool
		wantLive               int
		wantBlockedNamesTheJob bool
	}{
		{"4 pods of 4 in parallel, 8 completions, never created", 4, 4, ptr.To[int32](8), 0, false, false, 2, true},
		{"6 pods of 6, 20 completions, never created", 6, 6, ptr.To[int32](20), 3, false, false, 3, true},
		{"4 pods, work queue (no completions, none succeeded), never created", 4, 4, nil, 0, false, false, 2, true},
		{"4 pods, 2 completions left: wants the 2 left", 4, 4, ptr.To[int32](8), 6, false, false, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, tc.n, 1)
			f.setTarget("2Gi", "1536Mi", "3Gi") // the pods at 1Gi ran out of memory: urgent growth
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train", UID: "job-uid"},
				Spec:   batchv1.JobSpec{Parallelism: ptr.To(tc.parallelism), Completions: tc.completions, Suspend: ptr.To(tc.suspend)},
				Status: batchv1.JobStatus{Succeeded: tc.succeeded}}
			f.objs = append(f.objs, job)
			f.gfa.Spec.TargetRef.APIVersion, f.gfa.Spec.TargetRef.Kind, f.gfa.Spec.TargetRef.Name = "batch/v1", "Job", "train"
			for _, p := range f.pods {
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: job.UID, Controller: ptr.To(true)}}
				p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Ready: true, RestartCount: 1, LastTerminationState: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "torch.OutOfMemoryError: CUDA out of memory.",
						FinishedAt: metav1.NewTime(f.now.Add(-time.Minute))}}}}
			}
			now := f.now
			f.build()
			f.u.Now = func() time.Time { return now }
			f.run()
			f.run() // the floor is published first (awaiting-floor)
			if left := len(f.livePods()); left != tc.n-max(1, tc.n/2) {
				t.Fatalf("first evictions: %d pods left, want %d", left, tc.n-max(1, tc.n/2))
			}
			now = f.restartEachCycle(now, 3)
			if old := f.oldPodsLeft(); old != tc.wantLive {
				st := f.status()
				t.Fatalf("%d old pods left, want %d (blocked %s: %s)", old, tc.wantLive, st.BlockedReason, st.BlockedMessage)
			}
			if tc.wantBlockedNamesTheJob {
				if st := f.status(); st.BlockedReason != SkipInFlight || !strings.Contains(st.BlockedMessage, "Job train") || !strings.Contains(st.BlockedMessage, "not created") {
					t.Errorf("blocked %s: %q; want in-flight naming Job train short of a pod", st.BlockedReason, st.BlockedMessage)
				}
			}
		})
	}
}

// TestCustomControllerBudgetSurvivesRestart: for pods of a controller whose wanted pods
// the updater cannot read (a custom kind, here an InferenceService), the budget counts
// the replacements this updater awaits, for up to --replacement-timeout; a restart
// forgot them, so each restart inside that time could evict more pods whose
// replacements had not come. The last eviction (status.updater.lastEvictionTime, which
// survives restarts) is awaited again after a restart, until a pod created since is
// Ready or the timeout passes, as without the restart.
func TestCustomControllerBudgetSurvivesRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		after    time.Duration // restart this long after the first evictions
		created  bool          // a replacement is Ready before the restart
		wantLive int           // old pods after the cycle after the restart
	}{
		{"4 pods, restart at once", 4, time.Second, false, 2},
		{"6 pods, restart after 5m", 6, 5 * time.Minute, false, 3},
		{"4 pods, restart after the timeout: expired as without a restart", 4, 11 * time.Minute, false, 1},
		{"4 pods, replacement ready", 4, time.Minute, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, tc.n, 3)
			f.gfa.Spec.TargetRef.APIVersion, f.gfa.Spec.TargetRef.Kind, f.gfa.Spec.TargetRef.Name = "serving.example.com/v1", "InferenceService", "web"
			for _, p := range f.pods {
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "serving.example.com/v1", Kind: "InferenceService", Name: "web", UID: "isvc-uid", Controller: ptr.To(true)}}
			}
			// The InferenceService has a scale subresource (workload.Resolve).
			scale := func(context.Context, string, schema.GroupVersionKind, string) error { return nil }
			now := f.now
			f.build()
			f.u.Scale, f.u.Now = scale, func() time.Time { return now }
			f.run()
			left := len(f.livePods())
			if left != tc.n-max(1, tc.n/2) {
				t.Fatalf("first cycle: %d pods left, want %d", left, tc.n-max(1, tc.n/2))
			}
			now = now.Add(tc.after)
			if tc.created {
				f.createReplacements(t, 1, now.Add(-time.Second))
			}
			f.u = New(f.c, f.c, f.cfg)
			f.u.Events, f.u.Scale = f.rec, scale
			f.u.Now = func() time.Time { return now }
			f.run()
			if old := f.oldPodsLeft(); old != tc.wantLive {
				st := f.status()
				t.Fatalf("%d old pods left of %d, want %d (blocked %s: %s)", old, left, tc.wantLive, st.BlockedReason, st.BlockedMessage)
			}
		})
	}
}

// restartEachCycle runs n cycles, each by a new Updater (a restart: nothing of the
// evictions is remembered but what the API server holds) a replacement timeout and a
// minute after the one before (the first after now); it returns the last cycle's time.
func (f *fixture) restartEachCycle(now time.Time, n int) time.Time {
	timeout := f.cfg.WithDefaults().ReplacementTimeout
	for range n {
		now = now.Add(timeout + time.Minute)
		at := now
		f.u = New(f.c, f.c, f.cfg)
		f.u.Events = f.rec
		f.u.Now = func() time.Time { return at }
		f.run()
	}
	return now
}
