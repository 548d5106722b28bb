package updater

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestIsOOM(t *testing.T) {
	for _, tc := range []struct {
		reason, msg string
		want        bool
	}{
		{"OOMKilled", "", true},
		{"Error", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)", true},
		{"Error", "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported", true},
		{"Error", "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY", true},
		{"Error", "cudaErrorMemoryAllocation: out of memory", true},
		{"Error", "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)", true},
		{"Error", "ResourceExhaustedError: OOM when allocating tensor with shape[1024,1024]", true},
		{"Error", "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate", true},
		// Other spellings of a GPU out-of-memory error.
		{"Error", "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 64.00MiB (67108864B) on device ordinal 0", true},
		{"Error", "[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: OutOfMemory (no further information)", true},
		{"Error", "[TRT] [E] Requested amount of GPU memory (1073741824 bytes) could not be allocated. There may not be enough free memory for allocation to succeed.", true},
		{"Error", "[HAMI-core ERROR (pid:12 thread=140 allocator.c:48)]: Device 0 OOM 8589934592 / 8589934592", true},
		// gRPC's RESOURCE_EXHAUSTED is a message size or a quota, not memory: no floor
		// may be raised for it.
		{"Error", "grpc._channel._InactiveRpcError: status = StatusCode.RESOURCE_EXHAUSTED details = \"Received message larger than max (8388653 vs. 4194304)\"", false},
		{"Error", "rpc error: code = ResourceExhausted desc = RESOURCE_EXHAUSTED: quota exceeded for requests per minute", false},
		{"Error", "panic: index out of range", false},
		{"Completed", "", false},
		{"Error", "", false},
	} {
		if got := IsOOM(tc.reason, tc.msg); got != tc.want {
			t.Errorf("IsOOM(%q, %q) = %v, want %v", tc.reason, tc.msg, got, tc.want)
		}
	}
}

func TestTerminations(t *testing.T) {
	fin := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	pod := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Name: "main", RestartCount: 2, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", Message: "CUDA out of memory", FinishedAt: fin}}},
		{Name: "sidecar", RestartCount: 0},
		{Name: "crashed", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: fin}}},
		{Name: "done", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}},
	}}}
	// A native sidecar's run counts like a regular container's; an init container that
	// ran to completion (or failed: not gpufrac's fraction) does not.
	pod.Spec.InitContainers = []corev1.Container{{Name: "warmup"}, {Name: "gpu-proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: "warmup", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: fin}}},
		{Name: "gpu-proxy", RestartCount: 1, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Message: "Device 0 OOM 4096 / 4000", FinishedAt: fin}}},
	}
	ts := Terminations(pod)
	if len(ts) != 3 || ts[0].Container != "main" || !ts[0].OOM || ts[0].Restarts != 2 || ts[1].Container != "crashed" || !ts[1].OOM ||
		ts[2].Container != "gpu-proxy" || !ts[2].OOM || ts[2].Restarts != 1 {
		t.Fatalf("terminations %+v", ts)
	}
	if s := ts[0].String(); !strings.Contains(s, "exited 1 (Error)") || !strings.Contains(s, "out of memory") {
		t.Errorf("String() = %q", s)
	}
}
