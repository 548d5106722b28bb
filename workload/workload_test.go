package workload

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMatchesNamingConvention(t *testing.T) {
	for _, tc := range []struct {
		kind, name, pod string
		want            bool
	}{
		{"Deployment", "web", "web-7d9f8b6c5-x2k4p", true},
		{"Deployment", "web", "web-7d9f8b6c5", false},           // a ReplicaSet-style name, not a pod
		{"Deployment", "web", "web-api-7d9f8b6c5-x2k4p", false}, // "api" is not a template hash
		{"Deployment", "web", "web-7d9f8b6c5-xa2k4", false},     // vowel: not a generated suffix
		{"StatefulSet", "db", "db-0", true},
		{"StatefulSet", "db", "db-12", true},
		{"StatefulSet", "db", "db-x", false},
		{"DaemonSet", "agent", "agent-x2k4p", true},
		{"Job", "train", "train-x2k4p", true},
		{"Job", "train", "train-x2k4p-1", false},
		{"Deployment", "sd", "sd-000-7d9f8b6c5-x2k4p", false},
	} {
		if got := MatchesNamingConvention(tc.kind, tc.name, tc.pod); got != tc.want {
			t.Errorf("MatchesNamingConvention(%s, %s, %s) = %v, want %v", tc.kind, tc.name, tc.pod, got, tc.want)
		}
	}
}

func TestAttributor(t *testing.T) {
	ksm := NewOwnership()
	ksm.Pods[[2]string{"ns", "old-pod"}] = Owner{Kind: "ReplicaSet", Name: "sd-5c9f7b8d6"}
	ksm.ReplicaSets[[2]string{"ns", "sd-5c9f7b8d6"}] = Owner{Kind: "Deployment", Name: "sd"}
	ksm.Pods[[2]string{"ns", "rs-unknown-pod"}] = Owner{Kind: "ReplicaSet", Name: "web-5c9f7b8d6"}
	a := &Attributor{
		Live: map[[2]string]Ref{{"ns", "live"}: {Namespace: "ns", Kind: "Deployment", Name: "sd"}},
		KSM:  ksm,
		Targets: map[string][]Ref{"ns": {
			{Namespace: "ns", Kind: "Deployment", Name: "web"},
			{Namespace: "ns", Kind: "Deployment", Name: "web-2b4c6"},
		}},
	}
	for _, tc := range []struct {
		pod    string
		want   string
		method Method
	}{
		{"live", "sd", MethodOwnerReferences},
		{"old-pod", "sd", MethodKubeStateMetrics},
		{"rs-unknown-pod", "web", MethodKubeStateMetrics},                  // RS owner from the hash convention
		{"web-2b4c6-7d9f8b6c5-x2k4p", "web-2b4c6", MethodNamingConvention}, // longest target wins
		{"web-7d9f8b6c5-x2k4p", "web", MethodNamingConvention},
		{"other-7d9f8b6c5-x2k4p", "", MethodNone},
	} {
		ref, m := a.Attribute("ns", tc.pod)
		if ref.Name != tc.want || m != tc.method {
			t.Errorf("Attribute(%s) = %s/%v, want %s/%v", tc.pod, ref.Name, m, tc.want, tc.method)
		}
	}
}

// A CronJob's pods that no longer exist (its finished Jobs cleaned up by the history
// limits or ttlSecondsAfterFinished) are its history: kube_pod_owner names their Job
// "<cronjob>-<scheduled minutes>", and without kube-state-metrics the pod is named
// "<job>-<suffix>". Before, they were attributed to the Job, which no autoscaler targets,
// or to nothing, and the CronJob's history began with the pods still kept.
func TestAttributorCronJob(t *testing.T) {
	ksm := NewOwnership()
	ksm.Pods[[2]string{"ns", "nightly-29068597-x2k4p"}] = Owner{Kind: "Job", Name: "nightly-29068597"}
	ksm.Pods[[2]string{"ns", "train-x2k4p"}] = Owner{Kind: "Job", Name: "train"}
	ksm.Pods[[2]string{"ns", "nightly-manual-x2k4p"}] = Owner{Kind: "Job", Name: "nightly-manual"}
	targets := map[string][]Ref{"ns": {{Namespace: "ns", Kind: "CronJob", Name: "nightly"}}}
	for _, tc := range []struct {
		ksm    *Ownership
		pod    string
		want   Ref
		method Method
	}{
		{ksm, "nightly-29068597-x2k4p", Ref{Namespace: "ns", Kind: "CronJob", Name: "nightly"}, MethodKubeStateMetrics},
		{ksm, "train-x2k4p", Ref{Namespace: "ns", Kind: "Job", Name: "train"}, MethodKubeStateMetrics},                   // a Job of no CronJob target
		{ksm, "nightly-manual-x2k4p", Ref{Namespace: "ns", Kind: "Job", Name: "nightly-manual"}, MethodKubeStateMetrics}, // not a scheduled Job's name
		{nil, "nightly-29068597-x2k4p", Ref{Namespace: "ns", Kind: "CronJob", Name: "nightly"}, MethodNamingConvention},
		{nil, "nightly-x2k4p", Ref{}, MethodNone},
	} {
		a := &Attributor{KSM: tc.ksm, Targets: targets}
		if ref, m := a.Attribute("ns", tc.pod); ref != tc.want || m != tc.method {
			t.Errorf("Attribute(%s) with kube-state-metrics %v = %v/%v, want %v/%v", tc.pod, tc.ksm != nil, ref, m, tc.want, tc.method)
		}
	}
}

// An Argo Rollout (a target through its scale subresource) manages ReplicaSets
// "<rollout>-<hash>" as a Deployment does: its pods that no longer exist are its history
// when kube-state-metrics holds no owner for their ReplicaSet, and by the Deployment's
// naming convention without kube-state-metrics. Before, they went to a Deployment of the
// Rollout's name, or to nothing.
func TestAttributorRollout(t *testing.T) {
	ksm := NewOwnership()
	ksm.Pods[[2]string{"ns", "llm-7d9f8b6c5-x2k4p"}] = Owner{Kind: "ReplicaSet", Name: "llm-7d9f8b6c5"}
	ksm.Pods[[2]string{"ns", "web-7d9f8b6c5-x2k4p"}] = Owner{Kind: "ReplicaSet", Name: "web-7d9f8b6c5"}
	rollout := Ref{Namespace: "ns", Kind: "Rollout", Name: "llm"}
	targets := map[string][]Ref{"ns": {rollout, {Namespace: "ns", Kind: "Deployment", Name: "web"}, {Namespace: "ns", Kind: "Rollout", Name: "web"}}}
	for _, tc := range []struct {
		ksm    *Ownership
		pod    string
		want   Ref
		method Method
	}{
		{ksm, "llm-7d9f8b6c5-x2k4p", rollout, MethodKubeStateMetrics},
		{ksm, "web-7d9f8b6c5-x2k4p", Ref{Namespace: "ns", Kind: "Deployment", Name: "web"}, MethodKubeStateMetrics}, // a Deployment of the name first
		{nil, "llm-7d9f8b6c5-x2k4p", rollout, MethodNamingConvention},
		{nil, "llm-x2k4p", Ref{}, MethodNone},
	} {
		a := &Attributor{KSM: tc.ksm, Targets: targets}
		if ref, m := a.Attribute("ns", tc.pod); ref != tc.want || m != tc.method {
			t.Errorf("Attribute(%s) with kube-state-metrics %v = %v/%v, want %v/%v", tc.pod, tc.ksm != nil, ref, m, tc.want, tc.method)
		}
	}
}

func TestSampleInLife(t *testing.T) {
	created := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return created.Add(time.Duration(m) * time.Minute) }
	pod := func(st corev1.ContainerStatus) *corev1.Pod {
		st.Name = "main"
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{st}}}
	}
	running := pod(corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at(1))}}})
	finished := pod(corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(at(30))}}})
	crashing := pod(corev1.ContainerStatus{RestartCount: 3,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(at(20))}}})
	restarted := pod(corev1.ContainerStatus{RestartCount: 1,
		State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at(40))}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(at(20))}}})
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		t    time.Time
		v    float64
		want bool
	}{
		{"before creation: an earlier pod of that name", running, at(-5), 5, false},
		{"running", running, at(10), 0, true},
		{"after the container finished: a lingering series", finished, at(31), 5, false},
		{"before it finished", finished, at(29), 5, true},
		{"crash-loop zero", crashing, at(25), 0, false},
		{"non-zero while waiting is still usage", crashing, at(25), 3, true},
		{"zero between restarts", restarted, at(30), 0, false},
		{"zero after the restart", restarted, at(41), 0, true},
	} {
		if got := SampleInLife(tc.pod, "main", tc.t, tc.v); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// FuzzAttribute: any pod name maps to a target only if it follows that target's naming
// convention, and attribution never panics.
func FuzzAttribute(f *testing.F) {
	for _, s := range []string{"web-7d9f8b6c5-x2k4p", "db-0", "web-", "-", "", "web-2b4c6-7d9f8b6c5-x2k4p", "agent-x2k4p"} {
		f.Add(s)
	}
	a := &Attributor{Targets: map[string][]Ref{"ns": {
		{Namespace: "ns", Kind: "Deployment", Name: "web"},
		{Namespace: "ns", Kind: "Deployment", Name: "web-2b4c6"},
		{Namespace: "ns", Kind: "StatefulSet", Name: "db"},
		{Namespace: "ns", Kind: "DaemonSet", Name: "agent"},
	}}}
	f.Fuzz(func(t *testing.T, pod string) {
		ref, m := a.Attribute("ns", pod)
		if m == MethodNone {
			return
		}
		if m != MethodNamingConvention || !MatchesNamingConvention(ref.Kind, ref.Name, pod) {
			t.Fatalf("%q attributed to %v by %v without matching its convention", pod, ref, m)
		}
	})
}

// StampAfterCompletion: what came under a name after its pod completed is dropped until
// the next pod of the name (kube-state-metrics' or a live one) was created; a window
// that still covers the life is stamped at the completion; no completion keeps all.
func TestStampAfterCompletion(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(h float64) time.Time { return t0.Add(time.Duration(h * float64(time.Hour))) }
	lives := map[string]Life{
		"u-1": {Created: at(0), Completed: at(2)},
		"u-2": {Created: at(5)}, // the name reused (a StatefulSet replica recreated)
	}
	for _, tc := range []struct {
		name        string
		lives       map[string]Life
		createdNext time.Time
		t           time.Time
		window      time.Duration
		want        time.Time
		keep        bool
	}{
		{"in life", lives, time.Time{}, at(1), time.Minute, at(1), true},
		{"at completion", lives, time.Time{}, at(2), time.Minute, at(2), true},
		{"window covers the life", lives, time.Time{}, at(2.5), time.Hour, at(2), true},
		{"after completion", lives, time.Time{}, at(3), time.Minute, at(3), false},
		{"next pod of the name", lives, time.Time{}, at(6), time.Minute, at(6), true},
		{"live pod created next", map[string]Life{"u-1": lives["u-1"]}, at(4), at(4.5), time.Minute, at(4.5), true},
		{"live pod created before the completion", map[string]Life{"u-1": lives["u-1"]}, at(1), at(3), time.Minute, at(3), false},
		{"no completion known", map[string]Life{"u-1": {Created: at(0)}}, time.Time{}, at(30), time.Minute, at(30), true},
		{"no lives", nil, time.Time{}, at(30), time.Minute, at(30), true},
	} {
		got, keep := StampAfterCompletion(tc.lives, tc.createdNext, tc.t, tc.window)
		if keep != tc.keep || (keep && !got.Equal(tc.want)) {
			t.Errorf("%s: got %v %v, want %v %v", tc.name, got, keep, tc.want, tc.keep)
		}
	}
}
