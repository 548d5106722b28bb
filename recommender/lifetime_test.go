package recommender

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// finishedJob returns a Job and its one pod, whose container ran in [started, finished]
// and succeeded.
func finishedJob(ns, name string, started, finished time.Time) []client.Object {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-x7k2p", CreationTimestamp: metav1.NewTime(started.Add(-30 * time.Second)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: job.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0,
				StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(finished)}}}}},
	}
	return []client.Object{job, pod}
}

// Kind 7 (issue 13): a Job ran 15 minutes (10:05–10:20) and finished; its autoscaler is
// created at 12:00, so everything comes from the history load. The memory peak of the
// hour 10:00–11:00 is evaluated at 11:00, after the container finished; it must be kept
// (stamped at the container's end, inside its life), not dropped as outside the pod's
// life: the Job gets its measured memory peak, and no memory sample is dropped.
func TestFinishedJobKeepsItsHistory(t *testing.T) {
	started := time.Date(2026, 11, 30, 10, 5, 0, 0, time.UTC)
	finished := started.Add(15 * time.Minute)
	objs := finishedJob("ml", "train", started, finished)
	g := gfa("ml", "train", "train")
	g.Spec.TargetRef.APIVersion, g.Spec.TargetRef.Kind = "batch/v1", "Job"
	objs = append(objs, g)
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pod := podsOf(objs)[0]
	n := int(finished.Sub(started)/(30*time.Second)) + 1 // 31 samples, the last at the finish
	fb := promtest.Repeat(12000, n)
	fb[20] = 14000 // the Job's peak, 10:15
	h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, pod, "GPU-1"), started, 30*time.Second, fb...)
	h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, pod, "GPU-1"), started, 30*time.Second, promtest.Repeat(0.4, n)...)

	before := dropped(metrics.SignalMemory, metrics.DropOutsidePodLife)
	h.runCycles(t, 1, nil)

	if d := dropped(metrics.SignalMemory, metrics.DropOutsidePodLife) - before; d != 0 {
		t.Errorf("%v memory samples dropped as outside the pod's life; the finished Job's peaks were stamped after it", d)
	}
	k := history.ContainerKey{WorkloadKey: history.WorkloadKey{Namespace: "ml", Kind: "Job", Name: "train"}, Container: "main"}
	s := h.rec.model.Container(k)
	if s == nil {
		t.Fatal("no history for the finished Job")
	}
	if peak, ok := s.RecentPeak(h.now); !ok || peak != 14000*metrics.MiB {
		t.Errorf("recent memory peak %v (%v), want the Job's 14000 MiB", peak/metrics.MiB, ok)
	}
	if s.LastSample.After(finished) {
		t.Errorf("a sample stamped at %s, after the container finished at %s", s.LastSample, finished)
	}
	st := h.gfr(t, "ml", "train").Status
	if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].Target.Memory == nil {
		t.Fatalf("no memory recommendation for the finished Job: %+v", st.Conditions)
	}
	if m := st.ContainerRecommendations[0].Target.Memory.Value(); float64(m) < 14000*metrics.MiB {
		t.Errorf("memory target %d MiB below the Job's 14000 MiB peak", m>>20)
	}
	if c := condition(st, gpufracv1.ConditionRecommendationProvided); !isTrue(c) {
		t.Errorf("RecommendationProvided %+v, want True", c)
	}
}
