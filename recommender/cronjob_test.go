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

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// A CronJob's earlier runs whose Jobs and pods were cleaned up (successfulJobsHistoryLimit,
// ttlSecondsAfterFinished) are its history: a recommender (re)started while today's run
// is going reads yesterday's run at 20000 MiB under a pod name no pod has now
// (nightly-<scheduled minutes>-<suffix>, no kube-state-metrics), and the memory target
// must cover it. Before, that pod was attributed to no workload and the target was
// today's young 4000 MiB alone.
func TestCronJobKeepsEarlierRuns(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "nightly", UID: "ml-nightly"}}
	jobName := "nightly-29406960" // scheduled 2026-11-30 11:00 UTC, in minutes
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: jobName, UID: "ml-nightly-job",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID, Controller: ptr.To(true)}}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: jobName + "-x7k2p", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	g := gfa("ml", "nightly", "nightly")
	g.Spec.TargetRef.APIVersion, g.Spec.TargetRef.Kind = "batch/v1", "CronJob"
	h := newEngineHarness(t, []client.Object{cj, job, pod, g}, metrics.DCGM{})
	h.now = now
	yesterday := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "nightly-29405520-b5m2q", UID: types.UID("gone")}}
	addDCGM(t, h.prom, yesterday, "GPU-1", now.Add(-22*time.Hour), 2*120, 20000, 0.3)
	addDCGM(t, h.prom, pod, "GPU-1", now, 118, 4000, 0.3)

	h.runCycles(t, 1, nil)

	memoryTargetCovers(t, h.gfr(t, "ml", "nightly").Status, 20000, "yesterday's run")
}
