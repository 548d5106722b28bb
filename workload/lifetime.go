package workload

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Ended reports whether pod ran to its end: phase Succeeded (a Job's pod that
// completed) or Failed (evicted under node pressure, or failed and not restarted), kept
// until garbage collection. It runs no container and holds no GPU, whatever its
// annotations say was written into it.
func Ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// SampleInLife reports whether a sample of a container of a live pod, at time t with
// value v, can be the container's own usage. It rejects:
//   - samples from before the pod was created (an earlier pod of the same name, e.g. a
//     StatefulSet replica that was replaced: the workload's usage, which the
//     recommender keeps, but not this container's);
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

// LifeEnd returns when a container of a live pod stopped being able to use a GPU: the
// earlier of its current termination (FinishedAt) and the pod's deletion, and false
// while it runs.
func LifeEnd(pod *corev1.Pod, container string) (time.Time, bool) {
	var end time.Time
	if st := containerStatus(pod, container); st != nil {
		if term := st.State.Terminated; term != nil && !term.FinishedAt.IsZero() {
			end = term.FinishedAt.Time
		}
	}
	if d := pod.DeletionTimestamp; d != nil && (end.IsZero() || d.Time.Before(end)) {
		end = d.Time
	}
	return end, !end.IsZero()
}

// StampInLife returns the time an aggregated sample of a container of a live pod is
// kept at, and false when it is not the container's usage. A sample aggregates the
// window (t-window, t] (max_over_time, avg_over_time), and Prometheus stamps it at the
// evaluation time t, which for the window in which the container finished lies after
// its end: such a sample, whose window still covers the container's life, is stamped at
// the end of that life (LifeEnd), so the finished container's last peak is kept (and
// survives a recommender restart) instead of being dropped as outside its life. Every
// other sample is kept at t where SampleInLife accepts it.
func StampInLife(pod *corev1.Pod, container string, t time.Time, window time.Duration, v float64) (time.Time, bool) {
	if SampleInLife(pod, container, t, v) {
		return t, true
	}
	end, ok := LifeEnd(pod, container)
	if !ok || window <= 0 || !t.After(end) || !t.Add(-window).Before(end) {
		return t, false
	}
	return end, SampleInLife(pod, container, end, v)
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

// Life is one pod of a name as kube-state-metrics reported it (kube_pod_created,
// kube_pod_completion_time of one uid); a time not reported is zero.
type Life struct {
	Created   time.Time
	Completed time.Time // all its containers terminated (Succeeded or Failed)
}

// StampAfterCompletion returns the time an aggregated sample under a pod name, whose
// window is (t-window, t], is kept at, and false when it was taken while the name was
// held by a pod that had completed: from a pod's completion until the next pod of the
// name was created (a creation in lives, or createdNext, a live pod's; zero: none), no
// container of that name ran. The kubelet's pod-resources API lists a completed pod that
// is not deleted yet with the GPUs it had (kubernetes/kubernetes#119423), so
// dcgm-exporter keeps labelling the GPU with its name: the idle GPU's zeros, or the
// usage of the next pod given that GPU. A sample whose window still covers the life is
// stamped at the completion, as StampInLife does. With no completion known, every sample
// is kept at t: no data is not evidence of an end.
func StampAfterCompletion(lives map[string]Life, createdNext time.Time, t time.Time, window time.Duration) (time.Time, bool) {
	for _, l := range lives {
		if l.Completed.IsZero() || !t.After(l.Completed) {
			continue
		}
		next := createdNext
		if !next.After(l.Completed) {
			next = time.Time{}
		}
		for _, o := range lives {
			if o.Created.After(l.Completed) && (next.IsZero() || o.Created.Before(next)) {
				next = o.Created
			}
		}
		if !next.IsZero() && !t.Before(next) {
			continue // a later pod of the name
		}
		if window > 0 && t.Add(-window).Before(l.Completed) {
			return l.Completed, true
		}
		return t, false
	}
	return t, true
}
