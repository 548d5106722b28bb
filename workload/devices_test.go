package workload

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAllocatedGPUs(t *testing.T) {
	pod := func(v string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{HAMiAllocatedAnnotation: v}}}
	}
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"GPU-1,NVIDIA,3000,30:;", []string{"GPU-1"}},
		{"GPU-1,NVIDIA,3000,30:GPU-2,NVIDIA,3000,30:;GPU-1,NVIDIA,1000,0:;", []string{"GPU-1", "GPU-2"}}, // two containers
		{"", nil},
		{";;", nil},
		{"garbage", nil},
	} {
		got, by := AllocatedGPUs(pod(c.in))
		if !slices.Equal(got, c.want) || (by != "") != (c.want != nil) {
			t.Errorf("%q: %v by %q, want %v", c.in, got, by, c.want)
		}
	}
	if got, by := AllocatedGPUs(&corev1.Pod{}); got != nil || by != "" {
		t.Errorf("no annotation: %v %q", got, by)
	}
}

func TestHAMiDevices(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		HAMiAllocatedAnnotation: "GPU-1,NVIDIA,3000,30:GPU-2,NVIDIA:;GPU-1,NVIDIA,-5,0:GPU-3,NVIDIA,x,0:,NVIDIA,1,0:;",
	}}}
	want := []HAMiDevice{{"GPU-1", 3000, 30}, {"GPU-2", -1, -1}, {"GPU-1", -1, 0}, {"GPU-3", -1, 0}}
	if got := HAMiDevices(pod); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := HAMiDevices(&corev1.Pod{}); got != nil {
		t.Errorf("no annotation: %v", got)
	}
}
