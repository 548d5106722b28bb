package updater

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func TestUnreadyBackoff(t *testing.T) {
	base, limit := time.Minute, 10*time.Minute
	for n, want := range map[int]time.Duration{1: time.Minute, 2: 2 * time.Minute, 3: 4 * time.Minute, 4: 8 * time.Minute, 5: 10 * time.Minute, 40: 10 * time.Minute} {
		if got := UnreadyBackoff(n, base, limit); got != want {
			t.Errorf("UnreadyBackoff(%d) = %v, want %v", n, got, want)
		}
	}
}

// crashLooping marks pod not Ready for 10 minutes, with restarts after GPU OOMs.
func crashLooping(p *corev1.Pod, now time.Time) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(now.Add(-10 * time.Minute))}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 7,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
}

// TestCrashLoopBehindBudget: both replicas crash-loop below a raised recommendation
// (1Gi, lower bound 3Gi). Without the opt-in nothing is evicted (the budget counts both
// as unavailable), and a ReplacementDeadlock condition and one event name the pods and
// the annotation. With gpufrac.io/replace-unready-pods=true one pod is deleted, the
// second waits for the backoff (--retry-backoff), then goes; the condition turns False
// (issue 14 kind 8).
func TestCrashLoopBehindBudget(t *testing.T) {
	setup := func(t *testing.T, optIn bool) *fixture {
		f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 1)
		f.setTarget("4Gi", "3Gi", "6Gi")
		for _, p := range f.pods {
			crashLooping(p, f.now)
		}
		if optIn {
			f.gfa.Annotations = map[string]string{AnnotationReplaceUnready: "true"}
		}
		f.cfg.RetryBackoff = time.Minute
		f.build()
		f.u.Now = func() time.Time { return f.now }
		return f
	}
	t.Run("deadlock reported", func(t *testing.T) {
		f := setup(t, false)
		f.run()
		f.run()
		if n := len(f.livePods()); n != 2 {
			t.Fatalf("%d pods left, want 2: nothing may be replaced without the opt-in", n)
		}
		c := meta.FindStatusCondition(f.status().Conditions, ConditionReplacementDeadlock)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonUnreadyBehindBudget ||
			!strings.Contains(c.Message, "web-abc-0") || !strings.Contains(c.Message, "web-abc-1") || !strings.Contains(c.Message, AnnotationReplaceUnready) {
			t.Fatalf("condition %+v, want ReplacementDeadlock True naming both pods and %s", c, AnnotationReplaceUnready)
		}
		n := countEvents(f.events(), EventReplacementDeadlock)
		if n != 1 {
			t.Errorf("%d %s events over two cycles, want 1", n, EventReplacementDeadlock)
		}
	})
	t.Run("opt-in replaces with backoff", func(t *testing.T) {
		f := setup(t, true)
		f.run()
		live := f.livePods()
		if len(live) != 1 {
			t.Fatalf("pods %v after one cycle, want one not-Ready pod deleted", live)
		}
		if evs := f.events(); !hasEvent(evs, EventReplacedUnready) {
			t.Errorf("events %v: want %s", evs, EventReplacedUnready)
		}
		if c := meta.FindStatusCondition(f.status().Conditions, ConditionReplacementDeadlock); c != nil && c.Status == metav1.ConditionTrue {
			t.Errorf("deadlock reported although opted in: %+v", c)
		}
		// 30s later: the second waits for the backoff.
		f.now = f.now.Add(30 * time.Second)
		f.run()
		if n := len(f.livePods()); n != 1 {
			t.Fatalf("%d pods, want the second kept inside the backoff", n)
		}
		held := false
		for _, u := range f.status().Updates {
			held = held || u.SkipReason == SkipUnreadyBackoff
		}
		if !held {
			t.Errorf("updates %+v: want %s", f.status().Updates, SkipUnreadyBackoff)
		}
		// Past the backoff: the second goes; the next wait doubles.
		f.now = f.now.Add(time.Minute)
		f.run()
		if n := len(f.livePods()); n != 0 {
			t.Fatalf("%d pods, want the second deleted after the backoff", n)
		}
		if len(f.u.unready) != 1 {
			t.Fatalf("backoff states %+v, want the workload's", f.u.unready)
		}
		for _, s := range f.u.unready {
			if s.n != 2 || s.next.Sub(f.now) != 2*time.Minute {
				t.Errorf("backoff state %+v, want 2 replacements and the next in 2m", s)
			}
		}
	})
	t.Run("a starting pod is not crash-looping", func(t *testing.T) {
		f := setup(t, true)
		for _, p := range f.pods {
			p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(f.now.Add(-10 * time.Second))
		}
		f.build()
		f.u.Now = func() time.Time { return f.now }
		f.run()
		if n := len(f.livePods()); n != 2 {
			t.Fatalf("%d pods, want both kept: not Ready for less than --retry-backoff", n)
		}
	})
}
