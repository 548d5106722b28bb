package updater

import (
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func testPod(name string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	p.Status.Phase = corev1.PodRunning
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return p
}

func pods(ready, notReady, terminating int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range ready {
		out = append(out, testPod(fmt.Sprintf("r%d", i), true))
	}
	for i := range notReady {
		p := testPod(fmt.Sprintf("n%d", i), false)
		p.Status.Phase = corev1.PodPending
		out = append(out, p)
	}
	for i := range terminating {
		p := testPod(fmt.Sprintf("t%d", i), true)
		p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		out = append(out, p)
	}
	return out
}

func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		ready, notReady, term, awaited int
		minReplicas                    int32
		fraction                       float64
		allowed                        int    // evictions allowed in a row
		firstDenial                    string // reason after those
	}{
		{name: "single replica, default minReplicas 2", ready: 1, minReplicas: 2, fraction: 0.5, allowed: 0, firstDenial: SkipMinReplicas},
		{name: "single replica opted in", ready: 1, minReplicas: 1, fraction: 0.5, allowed: 1, firstDenial: SkipMinReplicas},
		{name: "two replicas: one at a time", ready: 2, minReplicas: 2, fraction: 0.5, allowed: 1, firstDenial: SkipMinReplicas},
		{name: "ten replicas, 50%", ready: 10, minReplicas: 2, fraction: 0.5, allowed: 5, firstDenial: SkipInFlight},
		{name: "ten replicas, 20%", ready: 10, minReplicas: 2, fraction: 0.2, allowed: 2, firstDenial: SkipInFlight},
		{name: "ten replicas, 100%, minReplicas 8", ready: 10, minReplicas: 8, fraction: 1, allowed: 3, firstDenial: SkipMinReplicas},
		{name: "three replicas, one not ready: in flight", ready: 2, notReady: 1, minReplicas: 2, fraction: 0.5, allowed: 0, firstDenial: SkipInFlight},
		{name: "three replicas, one terminating", ready: 2, term: 1, minReplicas: 2, fraction: 0.5, allowed: 0, firstDenial: SkipInFlight},
		{name: "replacement awaited, not created yet", ready: 2, awaited: 1, minReplicas: 2, fraction: 0.5, allowed: 0, firstDenial: SkipInFlight},
		{name: "six replicas, one awaited and pending (counted once)", ready: 5, notReady: 1, awaited: 1, minReplicas: 2, fraction: 0.5, allowed: 2, firstDenial: SkipInFlight},
		{name: "fraction 0 means default 50%", ready: 4, minReplicas: 2, fraction: 0, allowed: 2, firstDenial: SkipInFlight},
		{name: "too small a fraction still allows one", ready: 4, minReplicas: 2, fraction: 0.01, allowed: 1, firstDenial: SkipInFlight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBudget(pods(tc.ready, tc.notReady, tc.term), nil, map[types.UID]int{"": tc.awaited}, nil, tc.minReplicas, tc.fraction)
			n := 0
			for {
				reason, msg := b.Allow()
				if reason != "" {
					if n != tc.allowed || reason != tc.firstDenial {
						t.Fatalf("allowed %d then %s (%s), want %d then %s (budget %+v)", n, reason, msg, tc.allowed, tc.firstDenial, b)
					}
					return
				}
				b.Took()
				n++
				if n > 100 {
					t.Fatal("no limit")
				}
			}
		})
	}
}

// The cache may still show an evicted pod as ready in the next cycle: it must not count
// as running (three replicas, one evicted and awaited: no second eviction).
func TestBudgetStaleEvictedPod(t *testing.T) {
	ps := pods(3, 0, 0)
	b := NewBudget(ps, nil, map[types.UID]int{"": 1}, map[types.UID]bool{ps[0].UID: true}, 2, 0.5)
	if reason, _ := b.Allow(); reason != SkipInFlight {
		t.Fatalf("budget %+v allows a second eviction", b)
	}
}

func TestSettle(t *testing.T) {
	now := time.Now()
	old1, old2 := testPod("a", true), testPod("b", true)
	before := map[types.UID]bool{old1.UID: true, old2.UID: true, "uid-gone": true}
	e1 := &expectation{at: now.Add(-time.Minute), evicted: "uid-gone", before: before, pod: "gone"}
	e2 := &expectation{at: now.Add(-30 * time.Second), evicted: "uid-gone2", before: before, pod: "gone2"}
	pending := testPod("c", false)
	pending.Status.Phase = corev1.PodPending
	// Only a pending replacement: both still awaited.
	aw, reps, exp := settle([]*expectation{e1, e2}, []*corev1.Pod{old1, old2, pending}, now, 10*time.Minute)
	if len(aw) != 2 || len(reps) != 0 || len(exp) != 0 {
		t.Fatalf("pending replacement: awaited %d replacements %d expired %d", len(aw), len(reps), len(exp))
	}
	// One ready replacement satisfies one expectation (the oldest).
	ready := testPod("d", true)
	aw, reps, _ = settle([]*expectation{e1, e2}, []*corev1.Pod{old1, old2, pending, ready}, now, 10*time.Minute)
	if len(aw) != 1 || aw[0] != e2 || len(reps) != 1 || reps[0] != ready {
		t.Fatalf("one ready replacement: awaited %v replacements %v", aw, reps)
	}
	// Timed out.
	_, _, exp = settle([]*expectation{e1}, []*corev1.Pod{old1}, now, 30*time.Second)
	if len(exp) != 1 {
		t.Fatalf("expired %d, want 1", len(exp))
	}
}

// owned sets p's controller to a kind named name (UID "uid-"+name).
func owned(ps []*corev1.Pod, kind, name string) []*corev1.Pod {
	for _, p := range ps {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: ptr.To(true)}}
	}
	return ps
}

// The budget counts, per controller whose wanted replicas are known, wanted − Ready pods
// (not terminating): no memory of the evictions needed. A Job's pods (its controller is
// not read) count as before, their pods not Ready, as do pods without a controller.
func TestBudgetFromWantedReplicas(t *testing.T) {
	for _, tc := range []struct {
		name              string
		pods              []*corev1.Pod
		wanted            map[types.UID]int32
		awaited           map[types.UID]int
		running, inFlight int
	}{
		{"replacement never created, nothing remembered", owned(pods(2, 0, 0), "ReplicaSet", "rs"), map[types.UID]int32{"uid-rs": 3}, nil, 2, 1},
		{"two never created of six", owned(pods(4, 0, 0), "ReplicaSet", "rs"), map[types.UID]int32{"uid-rs": 6}, nil, 4, 2},
		{"scaled down to the pods left", owned(pods(2, 0, 0), "ReplicaSet", "rs"), map[types.UID]int32{"uid-rs": 2}, nil, 2, 0},
		{"scaled down, pods terminating", owned(pods(2, 0, 2), "StatefulSet", "sts"), map[types.UID]int32{"uid-sts": 2}, nil, 2, 0},
		{"replacement pending", owned(pods(2, 1, 0), "DaemonSet", "ds"), map[types.UID]int32{"uid-ds": 3}, nil, 2, 1},
		{"awaited, cache not caught up", owned(pods(3, 0, 0), "ReplicaSet", "rs"), map[types.UID]int32{"uid-rs": 3}, map[types.UID]int{"uid-rs": 1}, 3, 1},
		{"controller not read: pods not ready", owned(pods(2, 1, 1), "ReplicaSet", "rs"), nil, nil, 2, 2},
		{"Job: pods not ready", owned(pods(3, 1, 0), "Job", "job"), nil, nil, 3, 1},
		{"Job with a replacement awaited", owned(pods(3, 0, 0), "Job", "job"), nil, map[types.UID]int{"uid-job": 1}, 3, 1},
		{"two ReplicaSets (a rollout)", append(owned(pods(2, 0, 0), "ReplicaSet", "old"), owned(pods(0, 1, 0), "ReplicaSet", "new")...),
			map[types.UID]int32{"uid-old": 2, "uid-new": 2}, nil, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, p := range tc.pods {
				p.UID = types.UID(fmt.Sprintf("%s-%d", p.UID, i)) // distinct across groups
			}
			b := NewBudget(tc.pods, tc.wanted, tc.awaited, nil, 2, 0.5)
			if b.Running != tc.running || b.InFlight != tc.inFlight {
				t.Fatalf("running %d in flight %d, want %d and %d", b.Running, b.InFlight, tc.running, tc.inFlight)
			}
		})
	}
}

// TestJobWanted: the pods a Job's controller keeps, which its replacements are counted
// against (desiredReplicas): min(parallelism, completions − succeeded); none while
// suspended or finished; a work queue's until one pod succeeded, then not known.
func TestJobWanted(t *testing.T) {
	done := func(typ batchv1.JobConditionType) []batchv1.JobCondition {
		return []batchv1.JobCondition{{Type: typ, Status: corev1.ConditionTrue}}
	}
	for _, tc := range []struct {
		name        string
		parallelism *int32
		completions *int32
		succeeded   int32
		suspend     bool
		conditions  []batchv1.JobCondition
		want        int32
		ok          bool
	}{
		{"parallelism 4 of 8 completions", ptr.To[int32](4), ptr.To[int32](8), 0, false, nil, 4, true},
		{"3 completions left", ptr.To[int32](4), ptr.To[int32](8), 5, false, nil, 3, true},
		{"all succeeded", ptr.To[int32](4), ptr.To[int32](8), 8, false, nil, 0, true},
		{"parallelism unset: 1", nil, ptr.To[int32](5), 0, false, nil, 1, true},
		{"work queue, none succeeded", ptr.To[int32](3), nil, 0, false, nil, 3, true},
		{"work queue, one succeeded: not known", ptr.To[int32](3), nil, 1, false, nil, 0, false},
		{"suspended", ptr.To[int32](4), ptr.To[int32](8), 0, true, nil, 0, true},
		{"complete", ptr.To[int32](4), ptr.To[int32](8), 8, false, done(batchv1.JobComplete), 0, true},
		{"failed (backoffLimit)", ptr.To[int32](4), ptr.To[int32](8), 2, false, done(batchv1.JobFailed), 0, true},
	} {
		job := &batchv1.Job{Spec: batchv1.JobSpec{Parallelism: tc.parallelism, Completions: tc.completions, Suspend: ptr.To(tc.suspend)},
			Status: batchv1.JobStatus{Succeeded: tc.succeeded, Conditions: tc.conditions}}
		if got, ok := jobWanted(job); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
