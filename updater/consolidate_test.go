package updater

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/workload"
)

// TestConsolidation: three HAMi pods in date, two on GPU-0 and one on GPU-1 (2Gi each,
// 24Gi devices). With --consolidate the pod alone on GPU-1 is replaced (its 2Gi fit on
// GPU-0) with its reason and an event; without it, or while it is younger than
// --min-pod-age, or while a pod gpufrac does not manage shares each GPU, nothing is.
func TestConsolidation(t *testing.T) {
	fixture := func(consolidate bool) *fixture {
		f := hamiFixture(t, 3, 2, 24576)
		f.setTarget("2Gi", "1536Mi", "2560Mi")
		f.cfg.Consolidate = consolidate
		// The pods hold 250m each (HAMi's usedcores 25): let a GPU take three.
		f.cfg.ConsolidationComputeMilli = 1000
		return f
	}
	t.Run("the GPU holding least is emptied", func(t *testing.T) {
		f := fixture(true)
		f.pods[1].Finalizers = []string{"example.com/keep"} // terminating after its eviction
		f.build()
		f.run()
		if got := f.evictedOrGoing(); len(got) != 1 || got[0] != "web-abc-1" {
			t.Fatalf("evicted %v, want the one pod of GPU-1", got)
		}
		var reason string
		for _, u := range f.status().Updates {
			if u.Pod == "web-abc-1" {
				reason = u.Reason
			}
		}
		if reason != "" {
			t.Errorf("evicted pod still listed as an update: %q", reason)
		}
		// The replacement is awaited: no other GPU is emptied meanwhile (GPU-0's two pods
		// would fit on GPU-1, where the evicted pod still shows while it terminates).
		f.run()
		if got := f.evictedOrGoing(); len(got) != 1 {
			t.Fatalf("second cycle: %v evicted while the first replacement is awaited", got)
		}
		evs := f.events()
		if !hasEvent(evs, EventConsolidating) || !hasEvent(evs, EventEvicted) {
			t.Errorf("events %v: want %s and %s", evs, EventConsolidating, EventEvicted)
		}
		for _, e := range evs {
			if strings.Contains(e, EventEvicted) && !strings.Contains(e, "to empty a shared GPU: consolidation: the 1 pod(s) on GPU n1/GPU-1 fit") {
				t.Errorf("eviction event %q does not say why", e)
			}
		}
	})
	t.Run("a scheduler that refills the GPU stops it", func(t *testing.T) {
		f := fixture(true)
		f.build()
		f.run()
		if got := f.evictedOrGoing(); len(got) != 1 || got[0] != "web-abc-1" {
			t.Fatalf("evicted %v, want the one pod of GPU-1", got)
		}
		// A spreading scheduler puts the replacement back on the emptied GPU.
		repl := f.pods[1].DeepCopy()
		repl.Name, repl.UID, repl.ResourceVersion = "web-abc-new", "uid-new", ""
		repl.CreationTimestamp = metav1.NewTime(time.Now().Add(time.Minute))
		if err := f.c.Create(context.Background(), repl); err != nil {
			t.Fatal(err)
		}
		f.u.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
		f.run()
		f.run()
		var got corev1.Pod
		if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: repl.Namespace, Name: repl.Name}, &got); err != nil || got.DeletionTimestamp != nil {
			t.Fatalf("the replacement on the refilled GPU was evicted too (%v)", err)
		}
		if evs := f.events(); !hasEvent(evs, EventConsolidationUndone) {
			t.Errorf("events %v: want %s", evs, EventConsolidationUndone)
		}
	})
	t.Run("a pod goes only where it may run", func(t *testing.T) {
		node := gpuNode("n", 1, nil, func(n *corev1.Node) {
			n.Labels = map[string]string{"pool": "a"}
			n.Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		})
		pod := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": "a"}}}
		if runsOn(pod, node) {
			t.Error("runs on a node whose NoSchedule taint it does not tolerate")
		}
		pod.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
		if !runsOn(pod, node) {
			t.Error("does not run on a node it selects and tolerates")
		}
		pod.Spec.NodeSelector["pool"] = "b"
		if runsOn(pod, node) {
			t.Error("runs on a node its nodeSelector does not match")
		}
	})
	t.Run("not during the warm-up, and the GPU is not passed over for it", func(t *testing.T) {
		f := fixture(true)
		f.cfg.WarmUp = time.Hour
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 0 {
			t.Fatalf("evicted from %v during the warm-up", got)
		}
		f.u.started = time.Now().Add(-2 * time.Hour) // the warm-up is over
		f.run()
		if got := f.evictedDevices(); len(got) != 1 || got[0] != "GPU-1" {
			t.Fatalf("evicted from %v after the warm-up, want the one pod of GPU-1", got)
		}
	})
	t.Run("compute slack is kept", func(t *testing.T) {
		f := fixture(true)
		f.cfg.ConsolidationComputeMilli = 0 // the default, 500m: GPU-0's 500m takes no 250m more
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 0 {
			t.Fatalf("evicted from %v past --consolidation-compute", got)
		}
	})
	t.Run("a Job's pods stay", func(t *testing.T) {
		f := fixture(true)
		for _, p := range f.pods {
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
		}
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 0 {
			t.Fatalf("evicted run-to-completion pods from %v", got)
		}
	})
	t.Run("nothing moves while the guardrail holds", func(t *testing.T) {
		f := fixture(true)
		f.gfr.Status.Conditions[1] = metav1.Condition{Type: gpufracv1.ConditionLatencyGuardrailActive, Status: metav1.ConditionTrue, Reason: gpufracv1.ReasonLatencyNear, LastTransitionTime: metav1.Now()}
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 0 {
			t.Fatalf("evicted from %v while the latency guardrail holds", got)
		}
	})
	t.Run("a pod with two containers on the GPU is one tenant, evicted once", func(t *testing.T) {
		f := fixture(true)
		f.pods[1].Annotations[workload.HAMiAllocatedAnnotation] = "GPU-1,NVIDIA,1024,10:;GPU-1,NVIDIA,1024,10:;"
		var evictions int
		f.funcs.SubResourceCreate = func(ctx context.Context, c client.Client, sub string, obj client.Object, sr client.Object, opts ...client.SubResourceCreateOption) error {
			if sub == "eviction" {
				evictions++
			}
			return c.SubResource(sub).Create(ctx, obj, sr, opts...)
		}
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 1 || got[0] != "GPU-1" || evictions != 1 {
			t.Fatalf("evicted from %v with %d eviction calls, want GPU-1's pod once", got, evictions)
		}
		if evs := f.events(); !hasEvent(evs, "the 1 pod(s) on GPU n1/GPU-1") {
			t.Errorf("events %v: want the GPU's one pod counted once", evs)
		}
	})
	t.Run("off by default", func(t *testing.T) {
		f := fixture(false)
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 0 {
			t.Fatalf("evicted from %v without --consolidate", got)
		}
	})
	t.Run("young pods stay", func(t *testing.T) {
		f := fixture(true)
		f.cfg.MinPodAge = 2 * time.Hour // the pods are an hour old
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 0 {
			t.Fatalf("evicted from %v, pods younger than --min-pod-age", got)
		}
	})
	t.Run("a pod of no autoscaler keeps its GPU", func(t *testing.T) {
		f := fixture(true)
		for d := range 2 {
			other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: fmt.Sprintf("other-%d", d), UID: types.UID(fmt.Sprint("uid-other-", d)),
				Annotations: map[string]string{workload.HAMiAllocatedAnnotation: fmt.Sprintf("GPU-%d,NVIDIA,1024,10:;", d)}},
				Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "x"}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			f.objs = append(f.objs, other)
		}
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 0 {
			t.Fatalf("evicted from %v, though no GPU can be emptied", got)
		}
	})
	t.Run("Off mode moves nothing", func(t *testing.T) {
		f := fixture(true)
		off := gpufracv1.UpdateModeOff
		f.gfa.Spec.UpdatePolicy.UpdateMode = &off
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 0 {
			t.Fatalf("evicted from %v in updateMode Off", got)
		}
	})
}

// evictedOrGoing returns the fixture's pods that are gone or terminating.
func (f *fixture) evictedOrGoing() []string {
	f.t.Helper()
	var out []string
	for _, p := range f.pods {
		var got corev1.Pod
		err := f.c.Get(context.Background(), types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, &got)
		if err != nil || got.DeletionTimestamp != nil {
			out = append(out, p.Name)
		}
	}
	return out
}

// TestNVFractionsPlacement: a kai-nvfractions pod takes its containers' memory requests
// of its KAI GPU group (so consolidation and the placement check see it), and its
// replacement the request the webhook would write: with the observed-peak request, the
// peak plus overhead, not the target.
func TestNVFractionsPlacement(t *testing.T) {
	cfg := backend.Config{GPUMemoryBytes: 16384 * backend.MiB, NVFractions: backend.NVFractionsConfig{Request: backend.NVFractionsRequestObservedPeak}}.WithDefaults()
	node := gpuNode("k", 2, nil, func(n *corev1.Node) { n.Labels = map[string]string{LabelGPUMemory: "16384"} })
	pod := boundPod("a", "k", 0, corev1.PodRunning, map[string]string{cfg.NVFractions.Prefix + "c.gpu-memory.request": "3Gi", cfg.NVFractions.Prefix + "c.gpu-memory.limit": "5Gi"})
	pod.Labels = map[string]string{LabelKAIGPUGroup: "g1"}
	c := fake.NewClientBuilder().WithObjects(node, pod).Build()
	nodes := nodeCapacity(context.Background(), c, cfg)
	if len(nodes) != 1 || len(nodes[0].Shared) != 1 {
		t.Fatalf("nodes %+v, want one KAI group", nodes)
	}
	if g := nodes[0].Shared[0]; g.FreeMemory != (16384-3072)*backend.MiB || len(g.Tenants) != 1 || g.Tenants[0].MemoryBytes != 3072*backend.MiB {
		t.Errorf("group %+v, want 3Gi taken by the pod's request", g)
	}
	targets := map[string]contract.Target{"c": {Container: "c", ControlsMemory: true, Memory: 4 << 30, UpperMemory: 5 << 30, RequestPeakMemory: 3 << 29}}
	alloc := PodAllocation{Containers: map[string]Alloc{"c": {Memory: 3 << 30, Compute: -1}}}
	r := replacementNeed(pod, alloc, nil, targets, gpufracv1.BackendKAINVFractions, cfg, 256*backend.MiB, time.Time{})
	if want := int64(1536+256) * backend.MiB; r.SharedMemory != want || !r.OpensDevice {
		t.Errorf("replacement %+v, want %d bytes (peak 1.5Gi + 256Mi overhead) that may open a GPU", r, want)
	}
}
