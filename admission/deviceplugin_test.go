package admission

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

// planMutator is a mutator whose device-plugin backends read the objects (policies
// among them) from its own fake reader, as cmd/admission's API reader.
func planMutator(t *testing.T, objs ...client.Object) *Mutator {
	t.Helper()
	m := mutator(t, Config{}, objs...)
	cfg := m.Config.Config
	cfg.DevicePlugin.Policies = m.Reader
	m.Backends = backend.New(cfg)
	return m
}

// appliedPolicy is an applied GPUSharingPolicy "pool" selecting every autoscaler, with
// mode × 4 on 80Gi GPUs.
func appliedPolicy(mode gpufracv1.SharingMode) *gpufracv1.GPUSharingPolicy {
	p := &gpufracv1.GPUSharingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec:       gpufracv1.GPUSharingPolicySpec{Mode: gpufracv1.PlanModeApply},
		Status: gpufracv1.GPUSharingPolicyStatus{SharingMode: mode, Replicas: 4, ConfigName: "gpufrac-pool",
			GPUMemory: resource.NewQuantity(80<<30, resource.BinarySI)},
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionApplied, Status: metav1.ConditionTrue, Reason: gpufracv1.ReasonApplied})
	return p
}

// TestMutateDevicePlugin: the webhook binds nvidia-timeslicing to the pod's autoscaler,
// so the pod lands on the plan's pool (nodeSelector) with one replica and the applied
// record says the recommendation and the replica's share (20Gi of an 80Gi GPU at 4 per
// GPU). Without an applied plan the pod is admitted unchanged with reason
// no-sharing-plan, a warning and a FractionNotApplied event that says why.
func TestMutateDevicePlugin(t *testing.T) {
	gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendNVIDIATimeSlicing)
	gfr := recommendation("web", 80, containerRec("main", "6Gi", "200m"))
	m := planMutator(t, gfa, gfr, appliedPolicy(gpufracv1.SharingModeTimeSlicing))
	o, _, got := handle(t, m, podOf(gpuContainer("main", 1)))
	if o.skip != "" {
		t.Fatalf("skipped %s %v", o.skip, o.warnings)
	}
	if got.Spec.NodeSelector[gpufracv1.DevicePluginConfigLabel] != "gpufrac-pool" {
		t.Errorf("nodeSelector %v", got.Spec.NodeSelector)
	}
	rec, err := gpufracv1.ParseApplied(got.Annotations)
	if err != nil || rec == nil || rec.Backend != gpufracv1.BackendNVIDIATimeSlicing || len(rec.Containers) != 1 {
		t.Fatalf("applied %+v (%v)", rec, err)
	}
	if c := rec.Containers[0]; c.Memory.String() != "6Gi" || c.WrittenMemory.String() != "20Gi" || c.WrittenCompute != nil {
		t.Errorf("applied container %+v, want memory 6Gi written as the 20Gi share, no compute", c)
	}

	m = planMutator(t, gfa, gfr) // no policy
	o, resp, got := handle(t, m, podOf(gpuContainer("main", 1)))
	if o.skip != backend.UnsafeNoSharingPlan || !strings.Contains(o.event, "no GPUSharingPolicy selects autoscaler "+testNS+"/web") || o.gfa == nil {
		t.Errorf("skip %q event %q, want %s with an event on the autoscaler", o.skip, o.event, backend.UnsafeNoSharingPlan)
	}
	if len(resp.Warnings) != 1 || len(got.Spec.NodeSelector) != 0 || got.Annotations[gpufracv1.AnnotationApplied] != "" {
		t.Errorf("warnings %v, pod %+v: want one warning and the pod unchanged", resp.Warnings, got.ObjectMeta)
	}
}
