package updater

import (
	"time"

	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/workload"
)

const gib = int64(1 << 30)

func TestPlaceable(t *testing.T) {
	full := NodeGPUs{Name: "full", FreeGPUs: 0}
	one := NodeGPUs{Name: "one", FreeGPUs: 1}
	shared := NodeGPUs{Name: "shared", FreeGPUs: 5, Shared: []SharedGPU{
		{ID: "GPU-a", FreeMemory: 4 * gib, FreeSlots: 2},
		{ID: "GPU-b", FreeMemory: 20 * gib, FreeSlots: 0}, // memory but no slot
	}}
	for _, tc := range []struct {
		name   string
		r      Replacement
		nodes  []NodeGPUs
		want   int    // node index, -1 none
		reason string // substring of the reason when -1
	}{
		{"whole GPU, none free anywhere", Replacement{GPUs: 1}, []NodeGPUs{full, full}, -1, "no node has 1 of the GPU resource free"},
		{"whole GPU, second node has one", Replacement{GPUs: 1}, []NodeGPUs{full, one}, 1, ""},
		{"two GPUs, one free", Replacement{GPUs: 2}, []NodeGPUs{one}, -1, "no node has 2"},
		{"shared: fits on a GPU with a slot", Replacement{GPUs: 1, SharedMemory: 3 * gib}, []NodeGPUs{full, shared}, 1, ""},
		{"shared: more than any GPU with a slot has", Replacement{GPUs: 1, SharedMemory: 6 * gib}, []NodeGPUs{shared}, -1, "no shared GPU has 6Gi free (most: 4Gi on shared/GPU-a)"},
		{"shared: node without a device list, slot check only", Replacement{GPUs: 1, SharedMemory: 60 * gib}, []NodeGPUs{one}, 0, ""},
		{"shared: slots free but no device slot", Replacement{GPUs: 1, SharedMemory: gib}, []NodeGPUs{{Name: "n", FreeGPUs: 3, Shared: []SharedGPU{{ID: "g", FreeMemory: 8 * gib}}}}, -1, "no shared GPU has a free slot"},
		{"needs nothing (KAI: no GPU request)", Replacement{}, []NodeGPUs{full}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Placeable(tc.r, tc.nodes)
			if got != tc.want {
				t.Fatalf("Placeable = %d (%q), want %d", got, why, tc.want)
			}
			if tc.want < 0 && !strings.Contains(why, tc.reason) {
				t.Errorf("reason %q, want it to contain %q", why, tc.reason)
			}
			if tc.want >= 0 && why != "" {
				t.Errorf("reason %q on a placeable replacement", why)
			}
		})
	}
	// Reserving the replacement makes the next one of the same size fail where only one
	// fitted.
	nodes := []NodeGPUs{{Name: "n", FreeGPUs: 2, Shared: []SharedGPU{{ID: "g", FreeMemory: 5 * gib, FreeSlots: 4}}}}
	r := Replacement{GPUs: 1, SharedMemory: 3 * gib}
	i, _ := Placeable(r, nodes)
	reserve(nodes, i, r)
	if j, why := Placeable(r, nodes); j != -1 || !strings.Contains(why, "2Gi") {
		t.Errorf("after reserving 3Gi of 5Gi: Placeable = %d %q, want none with 2Gi left", j, why)
	}
}

// TestPlaceableSharedDevices: a KAI fraction fits a GPU group with the memory free or
// opens a free GPU at least that large; a HAMi fraction goes only to registered devices
// once any node registers some (issue 14 kind 10).
func TestPlaceableSharedDevices(t *testing.T) {
	kaiNode := func(free int64, groups ...SharedGPU) NodeGPUs {
		return NodeGPUs{Name: "k", FreeGPUs: free, Shared: groups, GPUMemory: 16 * gib}
	}
	kai := Replacement{SharedMemory: 6 * gib, OpensDevice: true}
	for _, tc := range []struct {
		name   string
		r      Replacement
		nodes  []NodeGPUs
		want   int
		reason string
	}{
		{"kai: a group with room", kai, []NodeGPUs{kaiNode(0, SharedGPU{ID: "g1", FreeMemory: 8 * gib, FreeSlots: unlimitedSlots})}, 0, ""},
		{"kai: groups full, a free GPU opens", kai, []NodeGPUs{kaiNode(1, SharedGPU{ID: "g1", FreeMemory: 2 * gib, FreeSlots: unlimitedSlots})}, 0, ""},
		{"kai: groups full, no free GPU", kai, []NodeGPUs{kaiNode(0, SharedGPU{ID: "g1", FreeMemory: 2 * gib, FreeSlots: unlimitedSlots})}, -1,
			"no shared GPU has 6Gi free (most: 2Gi on k/g1) and no node has a free GPU that large"},
		{"kai: free GPU smaller than the fraction", Replacement{SharedMemory: 20 * gib, OpensDevice: true}, []NodeGPUs{kaiNode(2)}, -1, "no shared GPU has 20Gi free (none with a free slot)"},
		{"hami: unregistered node skipped once devices are registered", Replacement{GPUs: 1, SharedMemory: 6 * gib},
			[]NodeGPUs{{Name: "plain", FreeGPUs: 8}, {Name: "hami", FreeGPUs: 8, Shared: []SharedGPU{{ID: "GPU-1", FreeMemory: 4 * gib, FreeSlots: 5}}}}, -1,
			"no shared GPU has 6Gi free (most: 4Gi on hami/GPU-1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Placeable(tc.r, tc.nodes)
			if got != tc.want || (tc.want < 0 && !strings.Contains(why, tc.reason)) {
				t.Errorf("Placeable = %d %q, want %d naming %q", got, why, tc.want, tc.reason)
			}
		})
	}
	// Opening a GPU takes it: its rest is shared by the next fraction, then nothing is left.
	nodes := []NodeGPUs{kaiNode(1)}
	for i, want := range []int{0, 0, -1} {
		at, why := Placeable(kai, nodes)
		if at != want {
			t.Fatalf("fraction %d: Placeable = %d %q, want %d (nodes %+v)", i, at, why, want, nodes)
		}
		reserve(nodes, at, kai)
	}
}

func gpuNode(name string, gpus int64, ann map[string]string, mod func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if mod != nil {
		mod(n)
	}
	return n
}

func boundPod(name, node string, gpus int64, phase corev1.PodPhase, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: phase}}
}

// TestNodeCapacity: free GPUs are allocatable minus the requests of non-terminal bound
// pods; NotReady nodes offer nothing, a cordoned node only to pods that tolerate it
// (a DaemonSet's: runsOn); HAMi devices (JSON and legacy
// registrations) lose the memory and a slot per allocation; no node with the resource
// means unknown (nil).
func TestNodeCapacity(t *testing.T) {
	cfg := backend.Config{}.WithDefaults()
	objs := []client.Object{
		gpuNode("a", 4, nil, nil),
		gpuNode("b-hami-json", 20, map[string]string{AnnotationHAMiNodeRegister: `[{"id":"GPU-1","count":10,"devmem":16384,"devcore":100,"type":"NVIDIA-T4","health":true},{"id":"GPU-2","count":10,"devmem":16384,"health":false}]`}, nil),
		gpuNode("c-hami-legacy", 10, map[string]string{AnnotationHAMiNodeRegister: "GPU-3,10,15360,100,NVIDIA-T4,0,true:"}, nil),
		gpuNode("d-cordoned", 8, nil, func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		gpuNode("e-notready", 8, nil, func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "f-cpu"}},
		boundPod("p1", "a", 1, corev1.PodRunning, nil),
		boundPod("p2", "a", 2, corev1.PodPending, nil),
		boundPod("done", "a", 1, corev1.PodSucceeded, nil),
		boundPod("p3", "b-hami-json", 1, corev1.PodRunning, map[string]string{workload.HAMiAllocatedAnnotation: "GPU-1,NVIDIA,3000,30:;"}),
		boundPod("p4", "b-hami-json", 1, corev1.PodRunning, map[string]string{workload.HAMiAllocatedAnnotation: "GPU-1,NVIDIA,5000,0:;"}),
		boundPod("p5", "c-hami-legacy", 1, corev1.PodRunning, map[string]string{workload.HAMiAllocatedAnnotation: "GPU-3,NVIDIA,15000,0:;"}),
		boundPod("unbound", "", 1, corev1.PodPending, nil),
	}
	c := fake.NewClientBuilder().WithObjects(objs...).Build()
	nodes := nodeCapacity(context.Background(), c, cfg)
	mib := int64(backend.MiB)
	want := []NodeGPUs{
		{Name: "a", FreeGPUs: 1},
		{Name: "b-hami-json", FreeGPUs: 18, Shared: []SharedGPU{{ID: "GPU-1", FreeMemory: (16384 - 8000) * mib, FreeSlots: 8}}},
		{Name: "c-hami-legacy", FreeGPUs: 9, Shared: []SharedGPU{{ID: "GPU-3", FreeMemory: 360 * mib, FreeSlots: 9}}},
		{Name: "d-cordoned", FreeGPUs: 8},
	}
	if len(nodes) != len(want) {
		t.Fatalf("nodes %+v, want %+v", nodes, want)
	}
	for i := range want {
		g, w := nodes[i], want[i]
		if g.Name != w.Name || g.FreeGPUs != w.FreeGPUs || len(g.Shared) != len(w.Shared) {
			t.Errorf("node %d = %+v, want %+v", i, g, w)
			continue
		}
		for j := range w.Shared {
			if !sameFree(g.Shared[j], w.Shared[j]) {
				t.Errorf("node %s device %d = %+v, want %+v", g.Name, j, g.Shared[j], w.Shared[j])
			}
		}
	}
	plain := boundPod("r", "", 1, corev1.PodPending, nil)
	daemon := plain.DeepCopy()
	daemon.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	for i, n := range nodes {
		if got := runsOn(plain, n.node); got != (n.Name != "d-cordoned") {
			t.Errorf("node %s: a pod without the toleration runs there: %v", n.Name, got)
		}
		if !runsOn(daemon, nodes[i].node) {
			t.Errorf("node %s: a pod tolerating %s does not run there", n.Name, corev1.TaintNodeUnschedulable)
		}
	}
	// Nothing advertises the GPU resource: unknown, nil.
	c = fake.NewClientBuilder().WithObjects(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}}, boundPod("p", "cpu", 1, corev1.PodRunning, nil)).Build()
	if got := nodeCapacity(context.Background(), c, cfg); got != nil {
		t.Errorf("no GPU node: %+v, want nil (unknown)", got)
	}
}

// TestNodeCapacityKAI: KAI's GPU groups on a node are shared GPUs of the node's GPU
// memory (its nvidia.com/gpu.memory label) less the fractions on them, by gpu-memory or
// gpu-fraction; the reservation pod holds the GPU (issue 14 kind 10).
func TestNodeCapacityKAI(t *testing.T) {
	cfg := backend.Config{}.WithDefaults()
	node := gpuNode("k", 2, nil, func(n *corev1.Node) { n.Labels = map[string]string{LabelGPUMemory: "16384"} })
	group := func(p *corev1.Pod, g string) *corev1.Pod {
		p.Labels = map[string]string{LabelKAIGPUGroup: g}
		return p
	}
	mem := boundPod("a", "k", 0, corev1.PodRunning, map[string]string{cfg.KAI.MemoryAnnotation: "4000"})
	frac := boundPod("b", "k", 0, corev1.PodRunning, map[string]string{cfg.KAI.FractionAnnotation: "0.25"})
	c := fake.NewClientBuilder().WithObjects(node,
		group(boundPod("reservation", "k", 1, corev1.PodRunning, nil), "g1"), group(mem, "g1"), group(frac, "g1")).Build()
	nodes := nodeCapacity(context.Background(), c, cfg)
	want := SharedGPU{ID: "g1", FreeMemory: (16384 - 4000 - 4096) * backend.MiB, FreeSlots: unlimitedSlots}
	if len(nodes) != 1 || nodes[0].FreeGPUs != 1 || nodes[0].GPUMemory != 16384*backend.MiB || len(nodes[0].Shared) != 1 || !sameFree(nodes[0].Shared[0], want) {
		t.Fatalf("nodes %+v, want one free GPU of 16Gi and group %+v", nodes, want)
	}
	// The group's tenants, for consolidation: the two fractions, not the reservation pod.
	if g := nodes[0].Shared[0]; g.MemoryBytes != 16384*backend.MiB || len(g.Tenants) != 2 ||
		g.Tenants[0].MemoryBytes+g.Tenants[1].MemoryBytes != (4000+4096)*backend.MiB {
		t.Errorf("group g1 = %+v, want 16384 MiB with tenants of 4000 and 4096 MiB", g)
	}
}

// sameFree compares what two shared GPUs have free.
func sameFree(a, b SharedGPU) bool {
	return a.ID == b.ID && a.FreeMemory == b.FreeMemory && a.FreeSlots == b.FreeSlots
}

func TestPodRequest(t *testing.T) {
	c := func(n int64, req bool) corev1.Container {
		l := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(n, resource.DecimalSI)}
		if req {
			return corev1.Container{Resources: corev1.ResourceRequirements{Requests: l, Limits: l}}
		}
		return corev1.Container{Resources: corev1.ResourceRequirements{Limits: l}}
	}
	sidecar := c(1, true)
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	for _, tc := range []struct {
		name string
		pod  corev1.PodSpec
		want int64
	}{
		{"limit only", corev1.PodSpec{Containers: []corev1.Container{c(1, false)}}, 1},
		{"two containers", corev1.PodSpec{Containers: []corev1.Container{c(1, true), c(2, false)}}, 3},
		{"larger init container", corev1.PodSpec{InitContainers: []corev1.Container{c(4, true)}, Containers: []corev1.Container{c(1, true)}}, 4},
		{"native sidecar adds", corev1.PodSpec{InitContainers: []corev1.Container{sidecar}, Containers: []corev1.Container{c(1, true)}}, 2},
		{"an init container after a sidecar runs next to it", corev1.PodSpec{InitContainers: []corev1.Container{sidecar, c(2, true)}, Containers: []corev1.Container{c(1, true)}}, 3},
		{"an init container before a sidecar does not", corev1.PodSpec{InitContainers: []corev1.Container{c(2, true), sidecar}, Containers: []corev1.Container{c(1, true)}}, 2},
		{"none", corev1.PodSpec{Containers: []corev1.Container{{}}}, 0},
	} {
		if got := podRequest(&corev1.Pod{Spec: tc.pod}, "nvidia.com/gpu"); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestEvictionHeldWithoutRoom: three HAMi pods (3Gi, target 1Gi) on a node whose GPUs
// are all requested are kept with no-capacity and one ReplacementUnplaceable event; a free
// GPU, or the check turned off, lets the oldest be evicted; a HAMi node whose GPU lacks
// the replacement's memory keeps them too (issue 14 kind 9).
func TestEvictionHeldWithoutRoom(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gpus    int64
		ann     map[string]string
		off     bool
		evicted bool
		msg     string
	}{
		{"no free GPU", 3, nil, false, false, "no node has 1 of the GPU resource free"},
		{"a free GPU", 4, nil, false, true, ""},
		{"no free GPU, check off", 3, nil, true, true, ""},
		{"free slots, shared GPU too full for 1Gi", 30, map[string]string{AnnotationHAMiNodeRegister: "GPU-1,10,10000,100,NVIDIA,0,true:"}, false, false, "no shared GPU has 1Gi free"},
		{"free slots, shared GPU with room", 30, map[string]string{AnnotationHAMiNodeRegister: "GPU-1,10,16384,100,NVIDIA,0,true:"}, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
			for _, p := range f.pods {
				p.Spec.NodeName = "n1"
				p.Annotations[workload.HAMiAllocatedAnnotation] = "GPU-1,NVIDIA,3072,25:;"
			}
			f.objs = append(f.objs, gpuNode("n1", tc.gpus, tc.ann, nil))
			f.cfg.NoPlacementCheck = tc.off
			f.build()
			f.run()
			live := f.livePods()
			if got := !live["web-abc-0"]; got != tc.evicted {
				t.Fatalf("oldest pod evicted %v, want %v (pods %v)", got, tc.evicted, live)
			}
			evs := f.events()
			if tc.evicted {
				if hasEvent(evs, EventReplacementUnplaceable) {
					t.Errorf("events %v: unplaceable although evicted", evs)
				}
				return
			}
			st := f.status()
			if st.BlockedReason != SkipNoCapacity || !strings.Contains(st.BlockedMessage, tc.msg) {
				t.Errorf("blocked %s %q, want %s naming %q", st.BlockedReason, st.BlockedMessage, SkipNoCapacity, tc.msg)
			}
			n := countEvents(evs, EventReplacementUnplaceable)
			if n != 1 {
				t.Errorf("%d %s events, want one for the autoscaler: %v", n, EventReplacementUnplaceable, evs)
			}
			// The next cycle keeps the pod again without repeating the event.
			f.run()
			if len(f.livePods()) != 3 || hasEvent(f.events(), EventReplacementUnplaceable) {
				t.Error("second cycle evicted or repeated the event")
			}
		})
	}
}

// TestReplacementNeedUnderRaisedMinMemory: on kai-nvfractions with observed-peak
// requests, the replacement of a pod whose memory target minMemory raised (a
// recommendation that predates the floor) needs the floor on its GPU, as the webhook
// writes it (no request below the floor), not the observed peak: the placement check
// counted the peak and let the pod be evicted towards a GPU without room for it.
func TestReplacementNeedUnderRaisedMinMemory(t *testing.T) {
	cfg := backend.Config{GPUMemoryBytes: 80 * gib, GPUResource: "nvidia.com/gpu",
		NVFractions: backend.NVFractionsConfig{Limit: backend.NVFractionsLimitUpperBound, Request: backend.NVFractionsRequestObservedPeak}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
	alloc := PodAllocation{Containers: map[string]Alloc{"main": {Memory: 20 * gib, Compute: -1, Source: SourceAppliedRecord}}}
	for _, tc := range []struct {
		name string
		min  string // the container policy's minMemory; "" none
		want int64
	}{
		{"no floor: the observed peak", "", 6 * gib},
		{"floor below the peak: the peak", "4Gi", 6 * gib},
		{"floor raises the target: the floor", "30Gi", 30 * gib},
		{"floor past one GPU: one GPU", "100Gi", 80 * gib},
	} {
		gfa := &gpufracv1.GPUFractionAutoscaler{}
		if tc.min != "" {
			m := resource.MustParse(tc.min)
			gfa.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: "main", MinMemory: &m}}}
		}
		targets := contract.WithPolicy(gfa, map[string]contract.Target{"main": {Container: "main", Memory: 20 * gib,
			LowerMemory: 10 * gib, UpperMemory: 24 * gib, MemoryLimit: -1, PeakMemory: 6 * gib, RequestPeakMemory: 6 * gib, ControlsMemory: true}}, cfg.GPUMemoryBytes)
		if got := replacementNeed(pod, alloc, nil, targets, gpufracv1.BackendKAINVFractions, cfg, 0, time.Time{}).SharedMemory; got != tc.want {
			t.Errorf("%s: needs %d MiB, want %d MiB", tc.name, got>>20, tc.want>>20)
		}
	}
}

// TestReplacementNeedUnderRollbackFloor: under a rollback floor in force
// (status.updater.floor) above the recommendation, the replacement needs on its GPU what
// the webhook writes (contract.WrittenOf: max(target, floor) plus overhead, no
// observed-peak request below the floor), and on HAMi holds the floor's compute. Before,
// the placement check and consolidation counted the recommendation's target (and on
// kai-nvfractions its observed-peak request), so a pod evicted to grow to the floor was
// judged placeable on a GPU without room for the floor and its replacement stayed
// Pending.
func TestReplacementNeedUnderRollbackFloor(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	mk := func(floor bool) (*gpufracv1.GPUFractionAutoscaler, map[string]contract.Target) {
		gfa := &gpufracv1.GPUFractionAutoscaler{}
		if floor {
			m, c := resource.MustParse("12Gi"), resource.MustParse("600m")
			gfa.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{Until: metav1.NewTime(now.Add(time.Hour)), Reason: "out of memory",
				Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: &m, Compute: &c}}}}
		}
		mem, upper, peak, comp := resource.MustParse("8Gi"), resource.MustParse("10Gi"), resource.MustParse("6Gi"), resource.MustParse("300m")
		gfr := &gpufracv1.GPUFractionRecommendation{}
		gfr.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main",
			Target: gpufracv1.GPUResources{Memory: &mem, Compute: &comp}, UpperBound: gpufracv1.GPUResources{Memory: &upper, Compute: &comp},
			ObservedPeakMemory: &peak, SharingMode: gpufracv1.SharingModeMPS}}
		return gfa, contract.WithFloor(gfa, contract.TargetsOf(gfa, gfr), now)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
	alloc := PodAllocation{Containers: map[string]Alloc{"main": {Memory: 8 * gib, Compute: 300, Source: SourceAppliedRecord}}}
	const overhead = 256 * backend.MiB
	for _, tc := range []struct {
		name        string
		bt          gpufracv1.BackendType
		floor       bool
		want        int64
		wantCompute int64
	}{
		{"hami, no floor: the target", gpufracv1.BackendHAMi, false, 8*gib + overhead, 300},
		{"hami, floor: the floor", gpufracv1.BackendHAMi, true, 12*gib + overhead, 600},
		{"kai, floor: the floor", gpufracv1.BackendKAI, true, 12*gib + overhead, 0},
		{"kai-nvfractions, no floor: the observed peak", gpufracv1.BackendKAINVFractions, false, 6*gib + overhead, 0},
		{"kai-nvfractions, floor: the floor, no request below it", gpufracv1.BackendKAINVFractions, true, 12*gib + overhead, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := backend.Config{GPUMemoryBytes: 80 * gib, GPUResource: "nvidia.com/gpu",
				NVFractions: backend.NVFractionsConfig{Limit: backend.NVFractionsLimitUpperBound, Request: backend.NVFractionsRequestObservedPeak}}
			gfa, targets := mk(tc.floor)
			if got := replacementNeed(pod, alloc, gfa, targets, tc.bt, cfg, overhead, now).SharedMemory; got != tc.want {
				t.Errorf("needs %d MiB, want %d MiB", got>>20, tc.want>>20)
			}
			p := &plan{gfa: gfa, targets: targets, backend: tc.bt}
			if got := replacementCompute(alloc, p, now); got != tc.wantCompute {
				t.Errorf("compute %dm, want %dm", got, tc.wantCompute)
			}
		})
	}
}
