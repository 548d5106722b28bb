package updater

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// A DaemonSet's replacement runs on the pod's own node, never another: room elsewhere
// does not let it go. Without surge the DaemonSet creates it once the pod is gone, so
// what the pod holds is free for it; with maxSurge it comes while the pod still holds
// its GPU.
func TestDaemonSetReplacementOnItsOwnNode(t *testing.T) {
	for _, tc := range []struct {
		name         string
		target       string
		lower, upper string
		surge        bool
		evicted      bool
	}{
		{"growth past its device, room on another node", "5Gi", "4608Mi", "6Gi", false, false},
		{"growth within its device once the pod is gone", "3584Mi", "3328Mi", "4Gi", false, true},
		{"shrink on its full node, no surge", "1Gi", "768Mi", "1536Mi", false, true},
		{"shrink on its full node, maxSurge 1", "1Gi", "768Mi", "1536Mi", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 1, 3)
			f.setTarget(tc.target, tc.lower, tc.upper)
			f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "ds-uid"}}
			if tc.surge {
				ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
			}
			f.objs = append(f.objs, ds)
			f.gfa.Spec.TargetRef.Kind = "DaemonSet"
			p := f.pods[0]
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "web", UID: ds.UID, Controller: ptr.To(true)}}
			p.Spec.NodeName = "n1"
			p.Annotations[workload.HAMiAllocatedAnnotation] = "GPU-1,NVIDIA,3072,25:;"
			f.objs = append(f.objs,
				gpuNode("n1", 1, map[string]string{AnnotationHAMiNodeRegister: "GPU-1,10,4096,100,NVIDIA,0,true:"}, nil),
				gpuNode("n2", 4, map[string]string{AnnotationHAMiNodeRegister: "GPU-2,10,16384,100,NVIDIA,0,true:"}, nil))
			f.build()
			f.run()
			if got := !f.livePods()[p.Name]; got != tc.evicted {
				st := f.status()
				t.Fatalf("evicted %v, want %v (blocked %s: %s)", got, tc.evicted, st.BlockedReason, st.BlockedMessage)
			}
		})
	}
}

// A cordoned node (spec.unschedulable, with the node.kubernetes.io/unschedulable
// NoSchedule taint the node controller adds) takes no replacement but a DaemonSet's: the
// DaemonSet controller gives its pods that toleration and recreates an evicted pod on
// its node, cordoned or not, and the scheduler's NodeUnschedulable filter lets it bind
// there. So a DaemonSet's pod on a cordoned node is replaced as on any other (it was
// held as no-capacity while the node stayed cordoned), and a Deployment's pod whose
// only GPU node is cordoned is kept: its replacement could not be scheduled (with every
// GPU node cordoned the capacity read as unknown and the pod was evicted, its
// replacement left Pending).
func TestCordonedNode(t *testing.T) {
	cordon := func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
	}
	for _, tc := range []struct {
		name      string
		daemonSet bool
		other     bool // an uncordoned GPU node with room
		evicted   bool
	}{
		{"DaemonSet pod on its cordoned node", true, false, true},
		{"DaemonSet pod on its cordoned node, room elsewhere", true, true, true},
		{"Deployment pod, every GPU node cordoned", false, false, false},
		{"Deployment pod, room on an uncordoned node", false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 1, 3)
			f.setTarget("1Gi", "768Mi", "1536Mi") // a shrink
			f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
			p := f.pods[0]
			if tc.daemonSet {
				ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "ds-uid"}}
				f.objs = append(f.objs, ds)
				f.gfa.Spec.TargetRef.Kind = "DaemonSet"
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "web", UID: ds.UID, Controller: ptr.To(true)}}
				// What the DaemonSet controller adds to each of its pods.
				p.Spec.Tolerations = []corev1.Toleration{
					{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
					{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
					{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				}
			}
			p.Spec.NodeName = "n1"
			p.Annotations[workload.HAMiAllocatedAnnotation] = "GPU-1,NVIDIA,3072,25:;"
			f.objs = append(f.objs, gpuNode("n1", 1, map[string]string{AnnotationHAMiNodeRegister: "GPU-1,10,4096,100,NVIDIA,0,true:"}, cordon))
			if tc.other {
				f.objs = append(f.objs, gpuNode("n2", 4, map[string]string{AnnotationHAMiNodeRegister: "GPU-2,10,16384,100,NVIDIA,0,true:"}, nil))
			}
			f.build()
			f.run()
			st := f.status()
			if got := !f.livePods()[p.Name]; got != tc.evicted {
				t.Fatalf("evicted %v, want %v (blocked %s: %s)", got, tc.evicted, st.BlockedReason, st.BlockedMessage)
			}
			if !tc.evicted && st.BlockedReason != SkipNoCapacity {
				t.Errorf("blocked %q (%s), want %s", st.BlockedReason, st.BlockedMessage, SkipNoCapacity)
			}
		})
	}
}
