package updater

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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
