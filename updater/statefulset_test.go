package updater

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// A StatefulSet recreates a pod only once the old one is gone, so its replacement can
// take the GPU (and the HAMi device memory) the pod frees: the placement check counts
// them as free for it. A ReplicaSet's replacement is created while the pod still holds
// them, so the same pod of a Deployment is kept on a full cluster.
func TestStatefulSetReplacementTakesThePodsOwnGPU(t *testing.T) {
	for _, tc := range []struct {
		name, kind   string
		memGi        int64  // applied memory
		target       string // recommendation (bounds ±25 %)
		lower, upper string
		register     string // HAMi registration of n1 ("": none)
		evicted      bool
	}{
		{"Deployment, whole GPU, shrink", "Deployment", 3, "1Gi", "768Mi", "1536Mi", "", false},
		{"StatefulSet, whole GPU, shrink", "StatefulSet", 3, "1Gi", "768Mi", "1536Mi", "", true},
		{"Deployment, HAMi device, growth", "Deployment", 3, "3584Mi", "3328Mi", "4Gi", "GPU-1,10,4096,100,NVIDIA,0,true:", false},
		{"StatefulSet, HAMi device, growth", "StatefulSet", 3, "3584Mi", "3328Mi", "4Gi", "GPU-1,10,4096,100,NVIDIA,0,true:", true},
		{"StatefulSet, HAMi device, growth past the device", "StatefulSet", 3, "5Gi", "4608Mi", "6Gi", "GPU-1,10,4096,100,NVIDIA,0,true:", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 1, tc.memGi)
			f.setTarget(tc.target, tc.lower, tc.upper)
			f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
			if tc.kind == "StatefulSet" {
				sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "sts-uid"}}
				f.objs = append(f.objs, sts)
				f.gfa.Spec.TargetRef.Kind = "StatefulSet"
				f.pods[0].OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: sts.UID, Controller: ptr.To(true)}}
			}
			p := f.pods[0]
			p.Spec.NodeName = "n1"
			var ann map[string]string
			if tc.register != "" {
				p.Annotations[workload.HAMiAllocatedAnnotation] = "GPU-1,NVIDIA,3072,25:;"
				ann = map[string]string{AnnotationHAMiNodeRegister: tc.register}
			}
			f.objs = append(f.objs, gpuNode("n1", 1, ann, nil))
			f.build()
			f.run()
			if got := !f.livePods()[p.Name]; got != tc.evicted {
				st := f.status()
				t.Fatalf("evicted %v, want %v (blocked %s: %s)", got, tc.evicted, st.BlockedReason, st.BlockedMessage)
			}
		})
	}
}
