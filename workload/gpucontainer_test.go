package workload

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func TestGPUContainers(t *testing.T) {
	gpu := func(name, res string) corev1.Container {
		return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}}}
	}
	plain := func(name string) corev1.Container { return corev1.Container{Name: name} }
	sidecar := func(c corev1.Container) corev1.Container {
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		return c
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		containers  []corev1.Container
		want        []string
		init        []corev1.Container
	}{
		{"the one requesting nvidia.com/gpu", nil, []corev1.Container{plain("proxy"), gpu("model", "nvidia.com/gpu")}, []string{"model"}, nil},
		{"HAMi memory resource", nil, []corev1.Container{gpu("model", "nvidia.com/gpumem"), plain("log")}, []string{"model"}, nil},
		{"two GPU containers: ambiguous", nil, []corev1.Container{gpu("a", "nvidia.com/gpu"), gpu("b", "nvidia.com/gpu")}, []string{"a", "b"}, nil},
		{"KAI names the container", map[string]string{"gpu-fraction": "0.5", KAIContainerNameAnnotation: "server"}, []corev1.Container{plain("proxy"), plain("server")}, []string{"server"}, nil},
		{"KAI fraction goes to the first", map[string]string{"gpu-memory": "4096"}, []corev1.Container{plain("server"), plain("proxy")}, []string{"server"}, nil},
		{"only container", nil, []corev1.Container{plain("main")}, []string{"main"}, nil},
		{"no GPU container among several", nil, []corev1.Container{plain("a"), plain("b")}, nil, nil},
		{"native sidecar with the GPU", nil, []corev1.Container{plain("app")}, []string{"gpu-proxy"}, []corev1.Container{sidecar(gpu("gpu-proxy", "nvidia.com/gpu"))}},
		{"sidecar and regular GPU containers: ambiguous", nil, []corev1.Container{gpu("app", "nvidia.com/gpu")}, []string{"gpu-proxy", "app"}, []corev1.Container{sidecar(gpu("gpu-proxy", "nvidia.com/gpu"))}},
		{"a GPU init container is never the pod's", nil, []corev1.Container{gpu("app", "nvidia.com/gpu")}, []string{"app"}, []corev1.Container{gpu("warmup", "nvidia.com/gpu")}},
		{"only running container next to an init container", nil, []corev1.Container{plain("app")}, []string{"app"}, []corev1.Container{plain("wait-for-db")}},
		{"only container next to a sidecar: ambiguous", nil, []corev1.Container{plain("app")}, nil, []corev1.Container{sidecar(plain("mesh"))}},
		{"KAI names a sidecar", map[string]string{"gpu-fraction": "0.5", KAIContainerNameAnnotation: "mesh"}, []corev1.Container{plain("app")}, []string{"mesh"}, []corev1.Container{sidecar(plain("mesh"))}},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}, Spec: corev1.PodSpec{Containers: tc.containers, InitContainers: tc.init}}
		if got := GPUContainers(p); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestContainerTypeOf(t *testing.T) {
	always := ptr.To(corev1.ContainerRestartPolicyAlways)
	p := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "warmup"}, {Name: "mesh", RestartPolicy: always}},
		Containers:     []corev1.Container{{Name: "app"}},
	}}
	for name, want := range map[string]gpufracv1.ContainerType{"warmup": gpufracv1.ContainerTypeInit, "mesh": gpufracv1.ContainerTypeSidecar, "app": gpufracv1.ContainerTypeRegular} {
		if got, ok := ContainerTypeOf(p, name); !ok || got != want {
			t.Errorf("%s: %q %t, want %q", name, got, ok, want)
		}
	}
	if _, ok := ContainerTypeOf(p, "gone"); ok {
		t.Error("a container the pod lacks has a type")
	}
	// Start order and positions: init list first, each with its own index.
	var got []string
	for _, c := range Containers(p) {
		got = append(got, fmt.Sprintf("%s/%s/%d/%t", c.Container.Name, c.Type, c.Index, c.InitList()))
	}
	if want := []string{"warmup/Init/0/true", "mesh/Sidecar/1/true", "app/Regular/0/false"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Containers: %v, want %v", got, want)
	}
}
