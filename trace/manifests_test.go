package trace

import (
	"bytes"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/api/v1alpha1"
)

func TestWriteManifests(t *testing.T) {
	tr := tinyTrace()
	var buf bytes.Buffer
	if err := WriteManifests(&buf, tr, ManifestOptions{LatencyObjective: 45 * time.Second}); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(buf.String(), "---\n")
	// Namespaces ns and other, then Deployment + autoscaler for a and b.
	if len(docs) != 6 {
		t.Fatalf("%d documents, want 6:\n%s", len(docs), buf.String())
	}
	for i, name := range []string{"ns", "other"} {
		var ns corev1.Namespace
		if err := yaml.UnmarshalStrict([]byte(docs[i]), &ns); err != nil {
			t.Fatal(err)
		}
		if ns.Kind != "Namespace" || ns.Name != name {
			t.Errorf("document %d: %s %s, want Namespace %s", i, ns.Kind, ns.Name, name)
		}
	}
	for i, c := range []struct {
		ns, name, container string
		replicas            int32
	}{{"ns", "a", "inference", 2}, {"other", "b", "c", 1}} {
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict([]byte(docs[2+2*i]), &d); err != nil {
			t.Fatal(err)
		}
		ctr := d.Spec.Template.Spec.Containers
		if d.APIVersion != "apps/v1" || d.Kind != "Deployment" || d.Name != c.name || d.Namespace != c.ns ||
			*d.Spec.Replicas != c.replicas || d.Spec.Selector.MatchLabels["app"] != c.name ||
			d.Spec.Template.Labels["app"] != c.name || len(ctr) != 1 || ctr[0].Name != c.container ||
			ctr[0].Image != DefaultImage || ctr[0].Resources.Limits.Name(GPUResourceName, "").Value() != 1 ||
			ctr[0].Resources.Requests.Name(GPUResourceName, "").Value() != 1 {
			t.Errorf("Deployment %s:\n%s", c.name, docs[2+2*i])
		}
		// The autoscaler must decode strictly into the project's API type.
		var g v1alpha1.GPUFractionAutoscaler
		if err := yaml.UnmarshalStrict([]byte(docs[3+2*i]), &g); err != nil {
			t.Fatal(err)
		}
		wantQuery := `max(max_over_time(inference_latency_p95_seconds{namespace="` + c.ns + `",pod=~"` + c.name + `-.*"}[15m]))`
		if g.APIVersion != "autoscaling.gpufrac.io/v1alpha1" || g.Kind != "GPUFractionAutoscaler" || g.Name != c.name || g.Namespace != c.ns ||
			g.Spec.TargetRef.APIVersion != "apps/v1" || g.Spec.TargetRef.Kind != "Deployment" || g.Spec.TargetRef.Name != c.name ||
			g.Spec.UpdatePolicy == nil || g.Spec.UpdatePolicy.UpdateMode == nil || *g.Spec.UpdatePolicy.UpdateMode != v1alpha1.UpdateModeOff ||
			g.Spec.LatencyGuardrail == nil || g.Spec.LatencyGuardrail.Query != wantQuery || g.Spec.LatencyGuardrail.Objective.Duration != 45*time.Second {
			t.Errorf("autoscaler %s:\n%s", c.name, docs[3+2*i])
		}
	}
	if !strings.Contains(buf.String(), `updateMode: "Off"`) {
		t.Error(`updateMode Off must be quoted (YAML 1.1 reads Off as false)`)
	}
	if strings.Contains(buf.String(), "{}") || strings.Contains(buf.String(), "null") {
		t.Errorf("empty fields left in:\n%s", buf.String())
	}
}
