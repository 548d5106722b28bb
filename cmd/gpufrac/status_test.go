package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// A time-sliced pod has memory applied and compute not partitioned: status shows its
// compute as "-", never as 0, and sums what was applied over containers.
func TestStatusAppliedComputeNotWritten(t *testing.T) {
	pod := func(name string, cs ...gpufracv1.AppliedContainer) corev1.Pod {
		rec, err := json.Marshal(gpufracv1.AppliedRecord{Autoscaler: "web", Containers: cs})
		if err != nil {
			t.Fatal(err)
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Annotations: map[string]string{gpufracv1.AnnotationApplied: string(rec)}}}
	}
	gfa := gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want string
	}{
		{"time-sliced", pod("a", gpufracv1.AppliedContainer{Name: "c", Memory: qp("20Gi")}), "20Gi/-"},
		{"partitioned", pod("b", gpufracv1.AppliedContainer{Name: "c", Memory: qp("10Gi"), Compute: qp("250m")},
			gpufracv1.AppliedContainer{Name: "d", Memory: qp("10Gi"), Compute: qp("250m")}), "20Gi/500m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := writeStatus(&out, []gpufracv1.GPUFractionAutoscaler{gfa}, []corev1.Pod{tc.pod}, metav1.Now().Time); err != nil {
				t.Fatal(err)
			}
			row := strings.Fields(strings.Split(out.String(), "\n")[1])
			if len(row) < 6 || row[5] != tc.want {
				t.Fatalf("APPLIED column: got row %q, want %q", row, tc.want)
			}
		})
	}
}
