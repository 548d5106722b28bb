package admission

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
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

// A plan whose config name is no valid label value (a GPUSharingPolicy named with more
// than 55 characters: "gpufrac-" + its name; the planner applies it without error while
// its pool has no node to label, and a status can be edited) must not become the pod's
// nodeSelector: the API server validates the pod after admission and rejects it,
// whatever the webhook's failure policy, so no pod of the workload could be created.
// Such a plan is no plan (no-sharing-plan, for the updater too: backend.appliedPlan):
// the pod is admitted unchanged with a warning; the control (a name of 55 characters)
// is patched.
func TestMutateDevicePluginInvalidConfigName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chars   int
		patched bool
	}{{"56 characters", 56, false}, {"control: 55 characters", 55, true}} {
		t.Run(tc.name, func(t *testing.T) {
			gfa := autoscaler("web", gpufracv1.UpdateModeRecreate, gpufracv1.BackendNVIDIATimeSlicing)
			gfr := recommendation("web", 80, containerRec("main", "6Gi", "200m"))
			m := planMutator(t, gfa, gfr, plantest.Policy(strings.Repeat("p", tc.chars), gpufracv1.SharingModeTimeSlicing, 4, true))
			o, resp, got := handle(t, m, podOf(gpuContainer("main", 1)))
			if errs := metav1validation.ValidateLabels(got.Spec.NodeSelector, field.NewPath("spec", "nodeSelector")); len(errs) > 0 {
				t.Fatalf("the patched pod would be rejected: %v", errs.ToAggregate())
			}
			if patched := o.skip == ""; patched != tc.patched {
				t.Fatalf("patched %v (skip %s %v), want %v", patched, o.skip, o.warnings, tc.patched)
			}
			if !tc.patched && (o.skip != backend.UnsafeNoSharingPlan || len(resp.Warnings) == 0 || len(resp.Patches) != 0) {
				t.Errorf("skip %s, warnings %v, %d patches: want %s, a warning and the pod unchanged", o.skip, resp.Warnings, len(resp.Patches), backend.UnsafeNoSharingPlan)
			}
		})
	}
}

// invalidAfterPatch, the webhook's last check: a patch that would make a valid pod's
// labels or nodeSelector invalid (whatever backend wrote them) is not sent; a pod that
// was invalid before is not the webhook's to judge.
func TestInvalidAfterPatch(t *testing.T) {
	pod := podOf(gpuContainer("main", 1))
	long := strings.Repeat("v", 64)
	for _, tc := range []struct {
		name string
		mod  func(p *corev1.Pod)
		want string
	}{
		{"nodeSelector value too long", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"k": long} }, backend.UnsafeInvalidLabel},
		{"label value with a space", func(p *corev1.Pod) { p.Labels["queue"] = "a b" }, backend.UnsafeInvalidLabel},
		{"valid", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"k": "v"}; p.Labels["queue"] = "q" }, ""},
	} {
		mod := pod.DeepCopy()
		tc.mod(mod)
		err := invalidAfterPatch(pod, mod)
		var ue *backend.UnsafeError
		got := ""
		if errors.As(err, &ue) {
			got = ue.Reason
		} else if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	bad := pod.DeepCopy()
	bad.Spec.NodeSelector = map[string]string{"k": long}
	if err := invalidAfterPatch(bad, bad.DeepCopy()); err != nil {
		t.Errorf("a pod invalid before the patch: %v, want the patch sent", err)
	}
}

// A pod created with spec.nodeName set (a controller that places its own pods) is never
// seen by a scheduler: the kubelet runs it where it is. A fraction that a scheduler must
// place then breaks it: KAI's (kai, kai-nvfractions) lose their nvidia.com/gpu request
// and no KAI binder gives them a share, so the pod runs with no GPU; a device-plugin
// plan's nodeSelector makes the kubelet reject the pod on a node outside the pool; HAMi's
// and DRA's need their scheduler too. Such a pod is admitted unchanged (it keeps the
// whole GPU it asked for, as without gpufrac). The mps backend's limits need no
// scheduler, and the annotations backend writes metadata only (the updater's in-place
// path passes running pods through the same decision): both still apply.
func TestMutateNodeBoundPod(t *testing.T) {
	for _, tc := range []struct {
		bt      gpufracv1.BackendType
		mode    gpufracv1.SharingMode // plan of the device-plugin backends
		applies bool
	}{
		{gpufracv1.BackendKAI, "", false},
		{gpufracv1.BackendKAINVFractions, "", false},
		{gpufracv1.BackendHAMi, "", false},
		{gpufracv1.BackendNVIDIATimeSlicing, gpufracv1.SharingModeTimeSlicing, false},
		{gpufracv1.BackendNVIDIAMPS, gpufracv1.SharingModeMPS, false},
		{gpufracv1.BackendMPS, "", true},
		{gpufracv1.BackendAnnotations, "", true},
	} {
		for _, node := range []string{"", "gpu-node-7"} {
			t.Run(string(tc.bt)+"/node="+node, func(t *testing.T) {
				objs := []client.Object{autoscaler("web", gpufracv1.UpdateModeRecreate, tc.bt), recommendation("web", 80, containerRec("main", "6Gi", "200m"))}
				if tc.mode != "" {
					objs = append(objs, plantest.Policy("pool", tc.mode, 4, true))
				}
				m := planMutator(t, objs...)
				pod := podOf(gpuContainer("main", 1))
				pod.Spec.NodeName = node
				o, resp, got := handle(t, m, pod)
				if node == "" || tc.applies {
					if o.skip != "" {
						t.Fatalf("skipped %s %v, want the pod patched", o.skip, o.warnings)
					}
					return
				}
				if o.skip != backend.UnsafeNodeBound || len(resp.Patches) != 0 || len(resp.Warnings) != 1 || o.gfa == nil {
					t.Fatalf("skip %q, %d patches, warnings %v: want %s, the pod unchanged with a warning and an event", o.skip, len(resp.Patches), resp.Warnings, backend.UnsafeNodeBound)
				}
				if n, _ := resourceValue(&got.Spec.Containers[0], "limits", "nvidia.com/gpu"); n != 1 || len(got.Spec.NodeSelector) != 0 || got.Spec.SchedulerName != corev1.DefaultSchedulerName {
					t.Errorf("pod changed: gpu %d, nodeSelector %v, scheduler %s", n, got.Spec.NodeSelector, got.Spec.SchedulerName)
				}
			})
		}
	}
}
