package workload

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGPUContainers(t *testing.T) {
	gpu := func(name, res string) corev1.Container {
		return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}}}
	}
	plain := func(name string) corev1.Container { return corev1.Container{Name: name} }
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		containers  []corev1.Container
		want        []string
	}{
		{"the one requesting nvidia.com/gpu", nil, []corev1.Container{plain("proxy"), gpu("model", "nvidia.com/gpu")}, []string{"model"}},
		{"HAMi memory resource", nil, []corev1.Container{gpu("model", "nvidia.com/gpumem"), plain("log")}, []string{"model"}},
		{"two GPU containers: ambiguous", nil, []corev1.Container{gpu("a", "nvidia.com/gpu"), gpu("b", "nvidia.com/gpu")}, []string{"a", "b"}},
		{"KAI names the container", map[string]string{"gpu-fraction": "0.5", KAIContainerNameAnnotation: "server"}, []corev1.Container{plain("proxy"), plain("server")}, []string{"server"}},
		{"KAI fraction goes to the first", map[string]string{"gpu-memory": "4096"}, []corev1.Container{plain("server"), plain("proxy")}, []string{"server"}},
		{"only container", nil, []corev1.Container{plain("main")}, []string{"main"}},
		{"no GPU container among several", nil, []corev1.Container{plain("a"), plain("b")}, nil},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}, Spec: corev1.PodSpec{Containers: tc.containers}}
		if got := GPUContainers(p); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
