package updater

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// oomPatterns are lower-case fragments of termination messages that mean a GPU (or
// host) out-of-memory error. GPU out-of-memory errors end the process with an
// application exit code (often 1), not as OOMKilled: only the message tells.
var oomPatterns = []string{
	"cuda out of memory",             // PyTorch: "CUDA out of memory. Tried to allocate …"
	"cuda_error_out_of_memory",       // CUDA driver API
	"cudaerrormemoryallocation",      // CUDA runtime API
	"outofmemory",                    // torch.cuda.OutOfMemoryError, java.lang.OutOfMemoryError, TensorRT "Error Code 2: OutOfMemory"
	"cublas_status_alloc_failed",     // cuBLAS
	"cudnn_status_alloc_failed",      // cuDNN
	"out of memory",                  // generic ("CUDA error: out of memory")
	"oom when allocating",            // TensorFlow ResourceExhaustedError
	"failed to allocate memory",      // TensorRT, ONNX Runtime
	"nvml_error_insufficient_memory", // NVML
	"ran out of memory",              // XLA: "Ran out of memory in memory space hbm"
	"amount of gpu memory",           // TensorRT: "Requested amount of GPU memory (… bytes) could not be allocated"
}

// resourceExhausted is the status TensorFlow and XLA report an allocation failure with
// ("RESOURCE_EXHAUSTED: Failed to allocate request for 64.00MiB … on device ordinal
// 0"), and gRPC a message over its size limit or a quota: it is an out-of-memory error
// only when the message also speaks of memory or an allocation (resourceExhaustedOOM).
const resourceExhausted = "resource_exhausted"

// resourceExhaustedOOM are the fragments that make a RESOURCE_EXHAUSTED message an
// out-of-memory error.
var resourceExhaustedOOM = []string{"alloc", "memory"}

// hamiOOM matches HAMi-core's out-of-memory log line, "Device 0 OOM <used> / <limit>"
// (bytes), which no generic pattern matches.
var hamiOOM = regexp.MustCompile(`(?i)device\s+\d+\s+oom\s+(\d+)\s*/\s*(\d+)`)

// OOM bump of VPA's recommender: after an out-of-memory exit a container needs at least
// max(used + OOMMinBump, used × OOMBumpRatio).
const (
	// OOMMinBump is the least memory added after an out-of-memory exit, bytes (100 MiB).
	OOMMinBump int64 = 100 << 20
	// OOMBumpRatio is the least factor applied to the memory used at an out-of-memory exit.
	OOMBumpRatio = 1.2
)

// OOMUsed returns the memory, bytes, that an out-of-memory message reports as in use
// when the allocation failed (HAMi-core's "Device 0 OOM <used> / <limit>"), or -1.
func OOMUsed(message string) int64 {
	m := hamiOOM.FindStringSubmatch(message)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || v <= 0 {
		return -1
	}
	return v
}

// OOMBump returns the memory, bytes, a container needs after the out-of-memory exit t:
// max(used + OOMMinBump, used × OOMBumpRatio), where used is what the message reports
// (OOMUsed) or, failing that, applied (the container's memory, bytes; -1 unknown). It
// returns -1 when t is not an out-of-memory exit or neither value is known.
func OOMBump(t Termination, applied int64) int64 {
	if !t.OOM {
		return -1
	}
	used := max(OOMUsed(t.Message), applied)
	if used <= 0 {
		return -1
	}
	return max(used+OOMMinBump, int64(float64(used)*OOMBumpRatio))
}

// Termination is one ended run of a container, from its status.
type Termination struct {
	// Container is the container's name.
	Container string
	// ExitCode, Reason and Message are the kubelet's terminated state (Message is the
	// container's termination message, e.g. /dev/termination-log or the log tail with
	// terminationMessagePolicy FallbackToLogsOnError).
	ExitCode int32
	Reason   string
	Message  string
	// FinishedAt is when the run ended.
	FinishedAt time.Time
	// Restarts is the container's restart count.
	Restarts int32
	// OOM is true when Reason is OOMKilled or Message names an out-of-memory error.
	OOM bool
}

// String renders the termination for events and status, e.g. `container main exited
// 1 (Error): "CUDA out of memory…", out of memory, 2 restarts`.
func (t Termination) String() string {
	s := fmt.Sprintf("container %s exited %d", t.Container, t.ExitCode)
	if t.Reason != "" {
		s += " (" + t.Reason + ")"
	}
	if m := strings.TrimSpace(t.Message); m != "" {
		if len(m) > 120 {
			m = m[:120] + "…"
		}
		s += fmt.Sprintf(": %q", m)
	}
	if t.OOM {
		s += ", out of memory"
	}
	return s + fmt.Sprintf(", %d restarts", t.Restarts)
}

// IsOOM reports whether a terminated state is an out-of-memory exit: reason OOMKilled
// (whatever the restart count or restart policy), HAMi-core's "Device N OOM <used> /
// <limit>", or a message with a GPU or host out-of-memory error (oomPatterns, or
// RESOURCE_EXHAUSTED about memory or an allocation; gRPC's message-size and quota
// RESOURCE_EXHAUSTED is not one).
func IsOOM(reason, message string) bool {
	if reason == "OOMKilled" {
		return true
	}
	if hamiOOM.MatchString(message) {
		return true
	}
	m := strings.ToLower(message)
	for _, p := range oomPatterns {
		if strings.Contains(m, p) {
			return true
		}
	}
	if strings.Contains(m, resourceExhausted) {
		for _, p := range resourceExhaustedOOM {
			if strings.Contains(m, p) {
				return true
			}
		}
	}
	return false
}

// Terminations returns the ended runs of a pod's regular containers and native
// sidecars (whose fractions the webhook writes alike) that restarted or are terminated
// with a failure: each container's lastState.terminated, and its current terminated
// state when it failed (exit code ≠ 0). Init containers that run to completion are
// ignored: the webhook writes nothing into them.
//
// FinishedAt is the kubelet's clock. A run cannot end before its pod was created (the
// API server's clock), so a time before the pod's creation (the node's clock behind the
// API server's) is taken as the creation: an out-of-memory exit stamped days back by a
// node whose clock is behind still raises the rollback floor (RaiseOOMFloor) and a
// restart after a shrink still trips the guardrail.
func Terminations(pod *corev1.Pod) []Termination {
	var out []Termination
	created := pod.CreationTimestamp.Time
	statuses := pod.Status.ContainerStatuses
	for _, cs := range pod.Status.InitContainerStatuses {
		if t, ok := workload.ContainerTypeOf(pod, cs.Name); ok && t == gpufracv1.ContainerTypeSidecar {
			statuses = append(statuses[:len(statuses):len(statuses)], cs)
		}
	}
	for _, cs := range statuses {
		add := func(t *corev1.ContainerStateTerminated) {
			if t == nil {
				return
			}
			out = append(out, Termination{
				Container: cs.Name, ExitCode: t.ExitCode, Reason: t.Reason, Message: t.Message,
				FinishedAt: laterOf(t.FinishedAt.Time, created), Restarts: cs.RestartCount, OOM: IsOOM(t.Reason, t.Message),
			})
		}
		if cs.RestartCount > 0 {
			add(cs.LastTerminationState.Terminated)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			add(t)
		}
	}
	return out
}

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
