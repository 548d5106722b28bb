package admission

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/sharingplan/plantest"
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

// TestMutateDevicePlugin: the webhook binds nvidia-timeslicing to the pod's autoscaler,
// so the pod lands on the plan's pool (nodeSelector) with one replica and the applied
// record says the recommendation and the replica's share (20Gi of an 80Gi GPU at 4 per
// GPU). Without an applied plan the pod is admitted unchanged with reason
// no-sharing-plan, a warning and a FractionNotApplied event that says why.
func TestMutateDevicePlugin(t *testing.T) {
	gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendNVIDIATimeSlicing)
	gfr := recommendation("web", 80, containerRec("main", "6Gi", "200m"))
	m := planMutator(t, gfa, gfr, plantest.Policy("pool", gpufracv1.SharingModeTimeSlicing, 4, true))
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
