package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func TestPodIndex(t *testing.T) {
	cid := func(c byte) string {
		b := make([]byte, 64)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	pods := []*corev1.Pod{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "web-5d8f7-abcde", Namespace: "ml", UID: "1234abcd-5678-90ef-1234-567890abcdef",
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "server", Image: "x"}, {Name: "sidecar"}}},
			Status: corev1.PodStatus{
				Phase:                 corev1.PodRunning,
				ContainerStatuses:     []corev1.ContainerStatus{{Name: "server", ContainerID: "containerd://" + cid('a')}, {Name: "sidecar", ContainerID: "cri-o://" + cid('b')}},
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", ContainerID: "docker://" + cid('c')}},
			},
		},
		{
			// A mirror pod: its cgroup carries the static pod's hash, not its UID.
			ObjectMeta: metav1.ObjectMeta{Name: "static-gpu-1", Namespace: "kube-system", UID: "99999999-0000-4000-8000-000000000000",
				Annotations: map[string]string{MirrorPodAnnotation: "0123456789abcdef0123456789abcdef", "other": "dropped"}},
			Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "probe"}}},
		},
	}
	client := fake.NewClientset(pods[0], pods[1])
	// The fake clientset replays nothing to a watch that starts after a change: the
	// deletion below must wait until the informer watches (not only listed), or it is
	// missed for good when the test runs on a loaded machine.
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("pods", func(action clienttesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(watching) })
		return true, w, nil
	})
	idx := startPodIndex(t, client)
	for id, want := range map[string]Owner{
		cid('a'): {"ml", "web-5d8f7-abcde", "server"},
		cid('b'): {"ml", "web-5d8f7-abcde", "sidecar"},
		cid('c'): {"ml", "web-5d8f7-abcde", "init"},
	} {
		if got, ok := idx.LookupContainer(id); !ok || got != want {
			t.Errorf("LookupContainer(%s) = %+v, %v; want %+v", id[:4], got, ok, want)
		}
	}
	if _, ok := idx.LookupContainer(cid('d')); ok {
		t.Error("unknown container found")
	}
	if ns, name, cs, ok := idx.LookupPod("1234abcd-5678-90ef-1234-567890abcdef"); !ok || ns != "ml" || name != "web-5d8f7-abcde" || len(cs) != 2 {
		t.Errorf("LookupPod = %s %s %v %v", ns, name, cs, ok)
	}
	if _, name, cs, ok := idx.LookupPod("0123456789abcdef0123456789abcdef"); !ok || name != "static-gpu-1" || len(cs) != 1 {
		t.Errorf("mirror LookupPod = %s %v %v", name, cs, ok)
	}
	// Stored pods are stripped.
	for _, p := range idx.List() {
		if len(p.ManagedFields) > 0 || p.Annotations["other"] != "" || (len(p.Spec.Containers) > 0 && p.Spec.Containers[0].Image != "") {
			t.Errorf("pod %s not stripped: %+v", p.Name, p)
		}
	}
	// End to end through the cgroup path, with the pod deleted afterwards.
	a := resolve(idx, CgroupInfo{PodUID: "1234abcd-5678-90ef-1234-567890abcdef", ContainerID: cid('b')})
	if a.Reason != "" || a.Owner.Container != "sidecar" {
		t.Errorf("resolve = %+v", a)
	}
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("the informer never watched")
	}
	if err := client.CoreV1().Pods("ml").Delete(context.Background(), "web-5d8f7-abcde", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		a = resolve(idx, CgroupInfo{PodUID: "1234abcd-5678-90ef-1234-567890abcdef", ContainerID: cid('b')})
		if a.Reason == ReasonUnknownPod {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after delete: %+v", a)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := StripContainerIDScheme("containerd://ABC"); got != "abc" {
		t.Errorf("StripContainerIDScheme = %q", got)
	}
}

// TestLookupPodNamesEveryContainerThatMayRun: a process whose container ID is not yet in
// the pod's status (the window between a container's start and the kubelet's status
// update) is attributed by pod UID to the pod's only container. A native sidecar (an
// init container with restartPolicy Always), an init container still running or yet to
// run, and an ephemeral container not terminated (kubectl debug) run processes too, so
// such a pod has no only container: the process is unknown_container, not the main
// container's. Before, only spec.containers were counted, and a GPU sidecar's, a
// TensorRT engine-building init container's or a debug session's memory was the main
// container's (the recommender reading it as the main container's peak).
func TestLookupPodNamesEveryContainerThatMayRun(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	pod := func(uid string, init []corev1.Container, initSts []corev1.ContainerStatus, eph []corev1.EphemeralContainer, ephSts []corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid[:1], Namespace: "ml", UID: types.UID(uid)},
			Spec:       corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "main"}}, InitContainers: init, EphemeralContainers: eph},
			Status:     corev1.PodStatus{InitContainerStatuses: initSts, EphemeralContainerStatuses: ephSts},
		}
	}
	uid := func(c byte) string { return string(c) + "0000000-0000-4000-8000-000000000000" }
	debug := []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger"}}}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want int
	}{
		{"main alone", pod(uid('1'), nil, nil, nil, nil), 1},
		{"init container done", pod(uid('2'), []corev1.Container{{Name: "fetch"}}, []corev1.ContainerStatus{{Name: "fetch", State: terminated}}, nil, nil), 1},
		{"init container running", pod(uid('3'), []corev1.Container{{Name: "build-engine"}}, []corev1.ContainerStatus{{Name: "build-engine", State: running}}, nil, nil), 2},
		{"init container without a status yet", pod(uid('4'), []corev1.Container{{Name: "build-engine"}}, nil, nil, nil), 2},
		{"native sidecar", pod(uid('5'), []corev1.Container{{Name: "proxy", RestartPolicy: &always}}, []corev1.ContainerStatus{{Name: "proxy", State: running}}, nil, nil), 2},
		{"debug container running", pod(uid('6'), nil, nil, debug, []corev1.ContainerStatus{{Name: "debugger", State: running}}), 2},
		{"debug container ended", pod(uid('7'), nil, nil, debug, []corev1.ContainerStatus{{Name: "debugger", State: terminated}}), 1},
	}
	client := fake.NewClientset()
	for _, tc := range cases {
		if _, err := client.CoreV1().Pods("ml").Create(context.Background(), tc.pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	idx := startPodIndex(t, client)
	for _, tc := range cases {
		_, _, cs, ok := idx.LookupPod(string(tc.pod.UID))
		a := resolve(idx, CgroupInfo{PodUID: string(tc.pod.UID), ContainerID: strings.Repeat("e", 64)})
		wantReason := ""
		if tc.want > 1 {
			wantReason = ReasonUnknownContainer
		}
		if !ok || len(cs) != tc.want || a.Reason != wantReason {
			t.Errorf("%s: containers %v (found %v), attribution %+v; want %d and reason %q", tc.name, cs, ok, a, tc.want, wantReason)
		}
	}
}

// startPodIndex starts a PodIndex of node gpu-1 over client until the test ends and
// waits for its first sync; the test fails if it cannot.
func startPodIndex(t *testing.T, client kubernetes.Interface) *PodIndex {
	t.Helper()
	idx, err := NewPodIndex(client, "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	idx.Start(ctx)
	if !idx.WaitForSync(ctx, 10*time.Second) {
		t.Fatal("not synced")
	}
	return idx
}
