package admission

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/backend"
)

func TestDiffPod(t *testing.T) {
	withEnv := gpuContainer("a", 1)
	withEnv.Env = []corev1.EnvVar{{Name: "X", Value: "1"}, {Name: "Y", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	for name, tc := range map[string]struct {
		orig *corev1.Pod
		mod  func(*corev1.Pod)
	}{
		"annotations from nil, escaped keys": {podOf(gpuContainer("a", 1)), func(p *corev1.Pod) {
			backend.SetAnnotation(p, "nvidia.com/container.a.gpu-memory.request", "1Gi")
			backend.SetAnnotation(p, "we~ird/key", "")
		}},
		"annotations changed and removed": {func() *corev1.Pod {
			p := podOf(gpuContainer("a", 1))
			p.Annotations = map[string]string{"gpu-fraction": "0.5", "keep": "x", "gpu-memory": "1"}
			return p
		}(), func(p *corev1.Pod) { delete(p.Annotations, "gpu-fraction"); p.Annotations["gpu-memory"] = "2048" }},
		"labels and scheduler": {podOf(gpuContainer("a", 1)), func(p *corev1.Pod) {
			p.Labels["kai.scheduler/queue"] = "q"
			p.Spec.SchedulerName = "kai-scheduler"
		}},
		"resources of an empty container": {podOf(corev1.Container{Name: "a"}), func(p *corev1.Pod) { backend.SetResource(&p.Spec.Containers[0], "nvidia.com/gpumem", 10) }},
		"resources replaced, gpu removed": {podOf(corev1.Container{Name: "s"}, gpuContainer("a", 1)), func(p *corev1.Pod) {
			backend.SetResource(&p.Spec.Containers[1], "nvidia.com/gpumem", 10)
			backend.RemoveResource(&p.Spec.Containers[1], "nvidia.com/gpu")
		}},
		"only limits before": {podOf(corev1.Container{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}), func(p *corev1.Pod) {
			backend.SetResource(&p.Spec.Containers[0], "nvidia.com/gpucores", 30)
		}},
		"env from nil": {podOf(gpuContainer("a", 1)), func(p *corev1.Pod) { backend.SetEnv(&p.Spec.Containers[0], "A", "1") }},
		"env replaced in place and appended": {podOf(withEnv), func(p *corev1.Pod) {
			backend.SetEnv(&p.Spec.Containers[0], "Y", "2")
			backend.SetEnv(&p.Spec.Containers[0], "Z", "3")
		}},
		"claim template": {func() *corev1.Pod {
			p := podOf(gpuContainer("a", 1))
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "other", ResourceClaimName: ptr.To("shared")}, {Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
			return p
		}(), func(p *corev1.Pod) {
			p.Spec.ResourceClaims[1].ResourceClaimTemplateName = ptr.To("gpu-gpufrac-0a1b2c3d")
		}},
		"no change": {podOf(gpuContainer("a", 1)), func(*corev1.Pod) {}},
		"native sidecar resources and env, regular container untouched": {func() *corev1.Pod {
			p := podOf(corev1.Container{Name: "app"})
			side := gpuContainer("gpu-server", 1)
			always := corev1.ContainerRestartPolicyAlways
			side.RestartPolicy = &always
			p.Spec.InitContainers = []corev1.Container{{Name: "wait"}, side}
			return p
		}(), func(p *corev1.Pod) {
			backend.SetResource(&p.Spec.InitContainers[1], "nvidia.com/gpumem", 3072)
			backend.SetEnv(&p.Spec.InitContainers[1], "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
		}},
	} {
		t.Run(name, func(t *testing.T) {
			mod := tc.orig.DeepCopy()
			tc.mod(mod)
			ops := diffPod(tc.orig, mod)
			raw, _ := json.Marshal(tc.orig)
			pb, _ := json.Marshal(ops)
			p, err := jsonpatch.DecodePatch(pb)
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.Apply(raw)
			if err != nil {
				t.Fatalf("apply %s: %v", pb, err)
			}
			got := &corev1.Pod{}
			if err := json.Unmarshal(out, got); err != nil {
				t.Fatal(err)
			}
			for _, op := range ops {
				if name == "native sidecar resources and env, regular container untouched" && !strings.HasPrefix(op.Path, "/spec/initContainers/1/") {
					t.Errorf("operation outside the sidecar: %s", op.Path)
				}
			}
			if !equality.Semantic.DeepEqual(got, mod) {
				t.Errorf("patched pod differs\npatch %s\ngot  %s", pb, out)
			}
		})
	}
}
