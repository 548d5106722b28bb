package updater

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/workload"
)

// hamiFixture is n HAMi pods with 2Gi applied, on node n1, spread over the devices
// GPU-0 … GPU-(devices−1) of devMiB each (pod i on GPU-(i mod devices)), and a
// recommendation raising them to 3Gi (2Gi is below its lower bound 2560Mi).
func hamiFixture(t *testing.T, n, devices int, devMiB int64) *fixture {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, n, 2)
	f.setTarget("3Gi", "2560Mi", "3584Mi")
	var reg []string
	for d := range devices {
		reg = append(reg, fmt.Sprintf("GPU-%d,10,%d,100,NVIDIA,0,true", d, devMiB))
	}
	f.objs = append(f.objs, gpuNode("n1", 40, map[string]string{AnnotationHAMiNodeRegister: strings.Join(reg, ":") + ":"}, nil))
	for i, p := range f.pods {
		p.Spec.NodeName = "n1"
		p.Annotations[workload.HAMiAllocatedAnnotation] = fmt.Sprintf("GPU-%d,NVIDIA,2048,25:;", i%devices)
	}
	f.cfg.MaxInFlight = 1
	return f
}

// evictedDevices returns the devices of the fixture's pods that are gone.
func (f *fixture) evictedDevices() []string {
	live := f.livePods()
	var out []string
	for _, p := range f.pods {
		if !live[p.Name] {
			out = append(out, strings.Split(p.Annotations[workload.HAMiAllocatedAnnotation], ",")[0])
		}
	}
	return out
}

// TestDeviceOverCommit: raising twelve HAMi pods from 2Gi to 3Gi (issue 14 kind 10).
// Devices with room: one replacement per device in flight (two evictions, one from each
// GPU, where the budget allows twelve), PlacementHeld DeviceReplacementInFlight and its
// event. Devices without room for 3Gi more: nothing evicted, PlacementHeld NoCapacity,
// a ReplacementUnplaceable event.
func TestDeviceOverCommit(t *testing.T) {
	t.Run("one in flight per device", func(t *testing.T) {
		f := hamiFixture(t, 12, 2, 24576)
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 2 || got[0] == got[1] {
			t.Fatalf("evicted from devices %v, want one from each of the two", got)
		}
		st := f.status()
		c := meta.FindStatusCondition(st.Conditions, ConditionPlacementHeld)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonDeviceInFlight || !strings.Contains(c.Message, "10 out-of-date pod(s) wait") {
			t.Errorf("condition %+v", c)
		}
		if !hasEvent(f.events(), EventDeviceInFlight) {
			t.Error("no DeviceReplacementInFlight event")
		}
	})
	t.Run("no device holds 3Gi more", func(t *testing.T) {
		f := hamiFixture(t, 12, 2, 14336) // 6 × 2Gi = 12Gi of 14Gi used on each
		f.build()
		f.run()
		if got := f.evictedDevices(); len(got) != 0 {
			t.Fatalf("evicted from %v with 2Gi free per device for 3Gi replacements", got)
		}
		st := f.status()
		c := meta.FindStatusCondition(st.Conditions, ConditionPlacementHeld)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonNoCapacity || !strings.Contains(c.Message, "no shared GPU has 3Gi free (most: 2Gi on n1/GPU-0)") {
			t.Errorf("condition %+v", c)
		}
		if st.BlockedReason != SkipNoCapacity || !hasEvent(f.events(), EventReplacementUnplaceable) {
			t.Errorf("blocked %s, events: want no-capacity and a ReplacementUnplaceable event", st.BlockedReason)
		}
	})
}

// TestPendingReplacementReserved: a replacement not yet bound takes its memory before
// the next eviction is placed, so two cycles never send more replacements to a device
// than it holds (issue 14 kind 10).
func TestPendingReplacementReserved(t *testing.T) {
	f := hamiFixture(t, 4, 1, 12288) // 4 × 2Gi of 12Gi: 4Gi free, room for one 3Gi
	f.cfg.MaxInFlightPerDevice = -1  // the capacity alone decides here
	f.build()
	f.run()
	if got := f.evictedDevices(); len(got) != 1 {
		t.Fatalf("first cycle evicted %d, want 1", len(got))
	}
	// The ReplicaSet's replacement, not scheduled yet (the old pod's 2Gi is free now).
	repl := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-abc-new", UID: "uid-new",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-uid", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("3072")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if err := f.c.Create(context.Background(), repl); err != nil {
		t.Fatal(err)
	}
	f.run()
	// 6Gi free less the pending 3Gi: room for one more, not two.
	if got := f.evictedDevices(); len(got) != 2 {
		t.Fatalf("after the second cycle %d evicted, want 2 (the pending replacement's 3Gi counted)", len(got))
	}
	if st := f.status(); st.BlockedReason != "" && st.BlockedReason != SkipNoCapacity {
		t.Errorf("blocked %s", st.BlockedReason)
	}
	var l corev1.PodList
	if err := f.c.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pods left", len(l.Items))
}

// A pending HAMi pod whose native sidecar holds the GPU takes the sidecar's memory on a
// shared device, and its GPU counts once.
func TestPodNeedNativeSidecar(t *testing.T) {
	cfg := backend.Config{}.WithDefaults()
	l := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("3072")}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "gpu-server", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Resources: corev1.ResourceRequirements{Limits: l}}},
		Containers:     []corev1.Container{{Name: "app"}},
	}}
	if r := podNeed(pod, cfg); r.GPUs != 1 || r.SharedMemory != 3072*backend.MiB {
		t.Errorf("need %+v, want 1 GPU with 3072 MiB", r)
	}
}

// TestPlacementOnNodesThePodMayRun: a device with room on a node the pod does not
// tolerate (or select) does not make a replacement placeable; on a node it may run on,
// it does.
func TestPlacementOnNodesThePodMayRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		taint   bool
		evicted bool
	}{{"tainted node with room", true, false}, {"node with room", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := hamiFixture(t, 12, 2, 14336) // no room on n1 for 3Gi
			f.objs = append(f.objs, gpuNode("n2", 40, map[string]string{AnnotationHAMiNodeRegister: "GPU-9,10,81920,100,NVIDIA,0,true:"}, func(n *corev1.Node) {
				if tc.taint {
					n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "other", Effect: corev1.TaintEffectNoSchedule}}
				}
			}))
			f.build()
			f.run()
			if got := len(f.evictedDevices()) > 0; got != tc.evicted {
				t.Fatalf("evicted %v, want %v", f.evictedDevices(), tc.evicted)
			}
		})
	}
}

// A replacement its controller never created (missingReplacements) holds its workload's
// budget, but no device: nothing is placed there, and the pods of other workloads on the
// GPU it left would otherwise wait for it for as long as it is refused. One awaited
// normally still holds the device.
func TestMissingReplacementHoldsNoDevice(t *testing.T) {
	for _, tc := range []struct {
		name    string
		missing bool
		limit   int
		want    string
	}{
		{"awaited", false, 1, SkipDeviceInFlight},
		{"not created", true, 1, ""},
		{"awaited, two per device", false, 2, ""},
		{"not created, two per device", true, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := New(nil, nil, Config{MaxInFlightPerDevice: tc.limit})
			other := workload.Ref{Namespace: ns, Kind: "Deployment", Name: "other"}
			u.expect[other] = []*expectation{{pod: "other-0", devices: []string{"n1/GPU-0"}, missing: tc.missing}}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0",
				Annotations: map[string]string{workload.HAMiAllocatedAnnotation: "GPU-0,NVIDIA,2048,25:;"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
			c := &candidate{p: &plan{gfa: &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "gfa"}}}, pod: pod}
			if got, msg := u.deviceGate(c); got != tc.want {
				t.Errorf("device gate %q (%s), want %q", got, msg, tc.want)
			}
		})
	}
}

// DeviceAllows, the rule of the deviceGate and gpufrac simulate: fewer in flight than the
// limit; 0 is the default (one); negative, no limit.
func TestDeviceAllows(t *testing.T) {
	for _, tc := range []struct {
		inFlight, limit int
		want            bool
	}{
		{0, 1, true}, {1, 1, false}, {1, 2, true}, {2, 2, false},
		{0, 0, true}, {1, 0, false}, {5, -1, true},
	} {
		if got := DeviceAllows(tc.inFlight, tc.limit); got != tc.want {
			t.Errorf("DeviceAllows(%d, %d) = %v, want %v", tc.inFlight, tc.limit, got, tc.want)
		}
	}
}
