package admission

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/scheme"
)

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "serving.example.com", Version: "v1"}})
	m.Add(schema.GroupVersionKind{Group: "serving.example.com", Version: "v1", Kind: "Model"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "serving.example.com", Version: "v1", Kind: "Fleet"}, meta.RESTScopeRoot)
	return m
}

func validGFA() *gpufracv1.GPUFractionAutoscaler {
	a := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
	a.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "0 2 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}, TimeZone: "Europe/Berlin"}}
	a.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: "*", MinMemory: q("1Gi"), MaxMemory: q("40Gi"), MinCompute: q("100m"), MaxCompute: q("1")}}}
	a.Spec.LatencyGuardrail = &gpufracv1.LatencyGuardrail{
		Query:     `histogram_quantile(0.95, sum by (le) (rate(request_duration_seconds_bucket{job="sd"}[5m])))`,
		Objective: metav1.Duration{Duration: 250 * time.Millisecond},
	}
	return a
}

func validate(t *testing.T, v *Validator, op admissionv1.Operation, obj, old *gpufracv1.GPUFractionAutoscaler) admission.Response {
	t.Helper()
	raw, _ := json.Marshal(obj)
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "v", Kind: metav1.GroupVersionKind{Group: gpufracv1.GroupVersion.Group, Version: "v1alpha1", Kind: "GPUFractionAutoscaler"},
		Namespace: testNS, Name: obj.Name, Operation: op, Object: runtime.RawExtension{Raw: raw},
	}}
	if old != nil {
		req.OldObject.Raw, _ = json.Marshal(old)
	}
	return v.Handle(context.Background(), req)
}

func TestValidateAccepts(t *testing.T) {
	v := NewValidator(newFakeReader(t), testMapper(), scheme.MustNew())
	for name, mod := range map[string]func(*gpufracv1.GPUFractionAutoscaler){
		"full": func(*gpufracv1.GPUFractionAutoscaler) {},
		"minimal": func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec = gpufracv1.GPUFractionAutoscalerSpec{TargetRef: autoscalingRef("Deployment", "web")}
		},
		"scale kind": func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.TargetRef.APIVersion, a.Spec.TargetRef.Kind = "serving.example.com/v1", "Model"
		},
		"descriptor":         func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.UpdatePolicy.ResizeWindows[0].Schedule = "@daily" },
		"utc default":        func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.UpdatePolicy.ResizeWindows[0].TimeZone = "" },
		"scalar guardrail":   func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.LatencyGuardrail.Query = "scalar(up)" },
		"StatefulSet target": func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.TargetRef.Kind = "StatefulSet" },
	} {
		t.Run(name, func(t *testing.T) {
			a := validGFA()
			mod(a)
			if resp := validate(t, v, admissionv1.Create, a, nil); !resp.Allowed {
				t.Fatalf("denied: %s", resp.Result.Message)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	v := NewValidator(newFakeReader(t), testMapper(), scheme.MustNew())
	for _, tc := range []struct {
		name  string
		mod   func(*gpufracv1.GPUFractionAutoscaler)
		field string
	}{
		{"bad cron", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.UpdatePolicy.ResizeWindows[0].Schedule = "61 * * * *" }, "spec.updatePolicy.resizeWindows[0].schedule"},
		{"six fields", func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.UpdatePolicy.ResizeWindows[0].Schedule = "0 0 2 * * *"
		}, "spec.updatePolicy.resizeWindows[0].schedule"},
		{"tz in schedule", func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.UpdatePolicy.ResizeWindows[0].Schedule = "CRON_TZ=UTC 0 2 * * *"
		}, "spec.updatePolicy.resizeWindows[0].schedule"},
		{"no such date", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.UpdatePolicy.ResizeWindows[0].Schedule = "0 2 31 4 *" }, "spec.updatePolicy.resizeWindows[0].schedule"},
		{"@every", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.UpdatePolicy.ResizeWindows[0].Schedule = "@every 1h" }, "spec.updatePolicy.resizeWindows[0].schedule"},
		{"bad time zone", func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.UpdatePolicy.ResizeWindows[0].TimeZone = "Mars/Olympus"
		}, "spec.updatePolicy.resizeWindows[0].timeZone"},
		{"zero duration", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.UpdatePolicy.ResizeWindows[0].Duration.Duration = 0 }, "spec.updatePolicy.resizeWindows[0].duration"},
		{"duration under a minute", func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.UpdatePolicy.ResizeWindows[0].Duration.Duration = 30 * time.Second
		}, "spec.updatePolicy.resizeWindows[0].duration"},
		{"bad promql", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.LatencyGuardrail.Query = "rate(x[5m]" }, "spec.latencyGuardrail.query"},
		{"range vector", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.LatencyGuardrail.Query = "x[5m]" }, "spec.latencyGuardrail.query"},
		{"zero objective", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.LatencyGuardrail.Objective.Duration = 0 }, "spec.latencyGuardrail.objective"},
		{"min > max memory", func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.ResourcePolicy.ContainerPolicies[0].MinMemory = q("50Gi")
		}, "spec.resourcePolicy.containerPolicies[0].minMemory"},
		{"min > max compute", func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.ResourcePolicy.ContainerPolicies[0].MinCompute, a.Spec.ResourcePolicy.ContainerPolicies[0].MaxCompute = q("600m"), q("500m")
		}, "spec.resourcePolicy.containerPolicies[0].minCompute"},
		{"compute above 1", func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.ResourcePolicy.ContainerPolicies[0].MaxCompute = q("2")
		}, "spec.resourcePolicy.containerPolicies[0].maxCompute"},
		{"duplicate container", func(a *gpufracv1.GPUFractionAutoscaler) {
			p := &a.Spec.ResourcePolicy.ContainerPolicies
			*p = append(*p, (*p)[0])
		}, "spec.resourcePolicy.containerPolicies[1].containerName"},
		{"unknown mode", func(a *gpufracv1.GPUFractionAutoscaler) {
			m := gpufracv1.UpdateMode("Auto")
			a.Spec.UpdatePolicy.UpdateMode = &m
		}, "spec.updatePolicy.updateMode"},
		{"unknown backend", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.Backend.Type = "mig" }, "spec.backend.type"},
		{"negative overhead", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.Backend.MemoryOverhead = q("-1Mi") }, "spec.backend.memoryOverhead"},
		{"other namespace", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.TargetRef.Name = "kube-system/web" }, "spec.targetRef.name"},
		{"no name", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.TargetRef.Name = "" }, "spec.targetRef.name"},
		{"unknown kind", func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.TargetRef.APIVersion, a.Spec.TargetRef.Kind = "serving.example.com/v1", "Nope"
		}, "spec.targetRef.kind"},
		{"cluster-scoped kind", func(a *gpufracv1.GPUFractionAutoscaler) {
			a.Spec.TargetRef.APIVersion, a.Spec.TargetRef.Kind = "serving.example.com/v1", "Fleet"
		}, "spec.targetRef.kind"},
		{"native kind wrong group", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.TargetRef.APIVersion = "example.com/v1" }, "spec.targetRef.kind"},
		{"bad apiVersion", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.TargetRef.APIVersion = "a/b/c" }, "spec.targetRef.apiVersion"},
		{"minReplicas 0", func(a *gpufracv1.GPUFractionAutoscaler) { a.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](0) }, "spec.updatePolicy.minReplicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := validGFA()
			tc.mod(a)
			resp := validate(t, v, admissionv1.Create, a, nil)
			if resp.Allowed {
				t.Fatal("allowed")
			}
			if resp.Result.Code != 422 || !strings.Contains(resp.Result.Message, tc.field) {
				t.Fatalf("code %d message %q, want 422 naming %s", resp.Result.Code, resp.Result.Message, tc.field)
			}
			if resp.Result.Details == nil || len(resp.Result.Details.Causes) == 0 || resp.Result.Details.Causes[0].Field != tc.field {
				t.Errorf("causes %+v, want field %s", resp.Result.Details, tc.field)
			}
			t.Log(resp.Result.Message)
		})
	}
}

func TestValidateOneAutoscalerPerWorkload(t *testing.T) {
	first := validGFA()
	first.Name = "first"
	v := NewValidator(newFakeReader(t, first), testMapper(), scheme.MustNew())
	second := validGFA()
	second.Name = "second"
	resp := validate(t, v, admissionv1.Create, second, nil)
	if resp.Allowed || !strings.Contains(resp.Result.Message, "autoscaler first") || !strings.Contains(resp.Result.Message, "spec.targetRef") {
		t.Fatalf("second autoscaler: allowed=%v %v", resp.Allowed, resp.Result)
	}
	// Updating the first (same target) is fine.
	upd := first.DeepCopy()
	upd.Spec.Backend.Type = gpufracv1.BackendMPS
	if resp := validate(t, v, admissionv1.Update, upd, first); !resp.Allowed {
		t.Fatalf("update of the first denied: %v", resp.Result)
	}
	// Moving another autoscaler onto the target is not.
	other := validGFA()
	other.Name, other.Spec.TargetRef.Name = "other", "api"
	moved := other.DeepCopy()
	moved.Spec.TargetRef.Name = "web"
	if resp := validate(t, v, admissionv1.Update, moved, other); resp.Allowed {
		t.Fatal("retargeting onto a taken workload allowed")
	}
	// A different workload is fine.
	if resp := validate(t, v, admissionv1.Create, other, nil); !resp.Allowed {
		t.Fatalf("other workload denied: %v", resp.Result)
	}
}

func TestValidateMetadataOnlyUpdate(t *testing.T) {
	bad := validGFA()
	bad.Spec.UpdatePolicy.ResizeWindows[0].Schedule = "nonsense"
	v := NewValidator(newFakeReader(t), testMapper(), scheme.MustNew())
	upd := bad.DeepCopy()
	upd.Finalizers = nil
	upd.Labels = map[string]string{"x": "y"}
	if resp := validate(t, v, admissionv1.Update, upd, bad); !resp.Allowed {
		t.Fatalf("metadata-only update of an invalid object denied: %v", resp.Result)
	}
	upd.Spec.Backend.Type = gpufracv1.BackendMPS
	if resp := validate(t, v, admissionv1.Update, upd, bad); resp.Allowed {
		t.Fatal("spec update keeping an invalid schedule allowed")
	}
}

var _ client.Object = &gpufracv1.GPUFractionAutoscaler{}
