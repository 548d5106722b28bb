package recommender

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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
	memoryTargetCovers(t, st, 14000, "the Job's peak")
	if c := condition(st, gpufracv1.ConditionRecommendationProvided); !isTrue(c) {
		t.Errorf("RecommendationProvided %+v, want True", c)
	}
}

// A StatefulSet replica replaced (a rollout, or the updater applying a fraction) comes
// back under the same name: the samples of the earlier pod are the workload's history,
// not samples outside the new pod's life. A recommender (re)started an hour after the
// replacement reads 29 h at 20000 MiB by the earlier pod and an hour at 4000 MiB by the
// current one: the memory target must cover the 20000 MiB, from a confident history,
// instead of a young 4000 MiB workload (the earlier pod's samples were dropped, so the
// history began at the replacement).
func TestReplacedReplicaKeepsItsHistory(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	h, pod := replicaHarness(t, now, now.Add(-time.Hour))
	addDCGM(t, h.prom, pod, "GPU-1", now.Add(-time.Hour-time.Minute), 29*120, 20000, 0.3) // the earlier db-0
	addDCGM(t, h.prom, pod, "GPU-2", now, 118, 4000, 0.3)                                 // the current db-0

	before := dropped(metrics.SignalMemory, metrics.DropOutsidePodLife)
	h.runCycles(t, 1, nil)

	if d := dropped(metrics.SignalMemory, metrics.DropOutsidePodLife) - before; d != 0 {
		t.Errorf("%v memory samples of the earlier db-0 dropped as outside the pod's life", d)
	}
	st := h.gfr(t, "ml", "db").Status
	memoryTargetCovers(t, st, 20000, "what the replica used for 29 h before it was replaced")
	if c := condition(st, gpufracv1.ConditionLowConfidence); !isFalse(c) {
		t.Errorf("LowConfidence %+v: 30 h of the replica's history were read", c)
	}
}

// memoryTargetCovers fails t unless st has one container recommendation whose memory
// target is at least mib MiB (what: where the MiB come from).
func memoryTargetCovers(t *testing.T, st gpufracv1.GPUFractionRecommendationStatus, mib float64, what string) {
	t.Helper()
	if len(st.ContainerRecommendations) != 1 || st.ContainerRecommendations[0].Target.Memory == nil {
		t.Fatalf("no memory recommendation: %+v", st.Conditions)
	}
	if m := st.ContainerRecommendations[0].Target.Memory.Value(); float64(m) < mib*metrics.MiB {
		t.Errorf("memory target %d MiB below the %.0f MiB of %s", m>>20, mib, what)
	}
}

// replicaHarness is an engine harness with a StatefulSet "db" in namespace ml, its
// replica db-0 created at created, and an autoscaler of the StatefulSet, at now.
func replicaHarness(t *testing.T, now, created time.Time) (*engineHarness, *corev1.Pod) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "db", UID: "ml-db"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "db-0", CreationTimestamp: metav1.NewTime(created),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: sts.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	g := gfa("ml", "db", "db")
	g.Spec.TargetRef.Kind = "StatefulSet"
	h := newEngineHarness(t, []client.Object{sts, pod, g}, metrics.DCGM{})
	h.now = now
	return h, pod
}

// A StatefulSet replica replaced onto another GPU (by a rollout, a node drain, or the
// updater applying a fraction) half an hour ago: the hourly memory peak window reaches
// back over the earlier db-0 on GPU-1 and the current one on GPU-2, so both devices
// answer at one time. That is a move, not one pod on two GPUs: the workload keeps its
// recommendation instead of RecommendationProvided=False (MultipleGPUs) for as long as
// the recommender ran. A replica that uses two GPUs from its creation is still left
// alone.
func TestMovedReplicaIsNotMultiGPU(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	created := now.Add(-30 * time.Minute)
	for _, tc := range []struct {
		name  string
		gpus  []string // the current db-0's GPUs
		multi bool
	}{
		{"moved from GPU-1 to GPU-2", []string{"GPU-2"}, false},
		{"on GPU-2 and GPU-3 at once", []string{"GPU-2", "GPU-3"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, pod := replicaHarness(t, now, created)
			addDCGM(t, h.prom, pod, "GPU-1", created.Add(-time.Minute), 29*120, 20000, 0.3) // the earlier db-0
			for _, uuid := range tc.gpus {
				addDCGM(t, h.prom, pod, uuid, now, 59, 4000, 0.3)
			}
			h.runCycles(t, 3, nil)
			c := condition(h.gfr(t, "ml", "db").Status, gpufracv1.ConditionRecommendationProvided)
			if multi := c != nil && c.Reason == ReasonMultipleGPUs; multi != tc.multi || (!tc.multi && !isTrue(c)) {
				t.Errorf("RecommendationProvided %+v; want multi-GPU %v", c, tc.multi)
			}
		})
	}
}

// A StatefulSet replica moved from a node where gpufrac's agent reported it to a node
// where only dcgm-exporter runs: the agent's series of db-0 end when the earlier pod
// did. With --metric-source auto the current db-0 is read from dcgm, which reports it,
// instead of from the agent, the most precise source that ever reported the name (its
// 30000 MiB were never read: NoSamplesWhileRunning, and the recommendation stayed at
// the earlier pod's 20000 MiB).
func TestMovedReplicaReadFromItsOwnSource(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	created := now.Add(-2 * time.Hour)
	h, pod := replicaHarness(t, now, created)
	h.rec = New(h.c, &metrics.Reader{API: h.prom.API(t), Labels: metrics.DefaultLabels}, nil, Config{HistoryLength: 48 * time.Hour})
	h.rec.Now = func() time.Time { return h.now }
	addAgent(t, h.prom, pod, "GPU-1", created.Add(-time.Minute), 20*120, 20000, 0.3) // the earlier db-0
	addAgentDevice(t, h.prom, "GPU-1", created.Add(-20*time.Hour), 20*120)
	addDCGM(t, h.prom, pod, "GPU-1", created.Add(-time.Minute), 20*120, 20000, 0.3)
	addDCGM(t, h.prom, pod, "GPU-2", now, 239, 30000, 0.6) // the current db-0
	h.runCycles(t, 4, func(now time.Time) { addDCGM(t, h.prom, pod, "GPU-2", now, 2, 30000, 0.6) })

	st := h.gfr(t, "ml", "db").Status
	if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("MetricsUnavailable %+v: the current db-0's dcgm samples were not read", c)
	}
	memoryTargetCovers(t, st, 30000, "the current db-0's dcgm samples")
	if len(st.MetricSources) != 1 || st.MetricSources[0].Name != (metrics.DCGM{}).Name() {
		t.Errorf("metric sources %+v, want the current db-0 read from dcgm", st.MetricSources)
	}
}
