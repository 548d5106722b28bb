package workload

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// SampleInLife reports whether a sample of a container of a live pod, at time t with
// value v, can be the container's own usage. It rejects:
//   - samples from before the pod was created (an earlier pod of the same name, e.g. a
//     StatefulSet replica that was replaced);
//   - samples after the pod's deletion or after its container terminated (series that
//     linger in exporter caches or in Prometheus' staleness window);
//   - zeros while the container waits to restart or before its current start (crash
//     loops), which would drag percentiles down.
func SampleInLife(pod *corev1.Pod, container string, t time.Time, v float64) bool {
	if t.Before(pod.CreationTimestamp.Time) {
		return false
	}
	if pod.DeletionTimestamp != nil && t.After(pod.DeletionTimestamp.Time) {
		return false
	}
	st := containerStatus(pod, container)
	if st == nil {
		return true
	}
	if term := st.State.Terminated; term != nil && !term.FinishedAt.IsZero() && t.After(term.FinishedAt.Time) {
		return false
	}
	if v != 0 {
		return true
	}
	if st.State.Waiting != nil {
		if last := st.LastTerminationState.Terminated; last != nil && t.After(last.FinishedAt.Time) {
			return false
		}
	}
	if run := st.State.Running; run != nil && st.RestartCount > 0 && t.Before(run.StartedAt.Time) {
		if last := st.LastTerminationState.Terminated; last != nil && t.After(last.FinishedAt.Time) {
			return false
		}
	}
	return true
}

func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
