package updater

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/sharingplan/plantest"
)

// sharingFixture is three pods of a workload on nvidia-timeslicing under Recreate with
// minReplicas 1 and the given resize windows, whose autoscaler a GPUSharingPolicy plan
// (TimeSlicing × 4 on 80Gi) selects, applied or DryRun; the policy reader is the fake
// client and there is no warm-up.
func sharingFixture(t *testing.T, applied bool, windows ...gpufracv1.ResizeWindow) *fixture {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendNVIDIATimeSlicing, 3, 1)
	f.gfa.Labels = map[string]string{"gpufrac.io/share": "yes"}
	f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
	f.gfa.Spec.UpdatePolicy.ResizeWindows = windows
	pol := plantest.Policy("pool", gpufracv1.SharingModeTimeSlicing, 4, applied)
	pol.Spec.AutoscalerSelector.MatchLabels = map[string]string{"gpufrac.io/share": "yes"}
	f.objs = append(f.objs, pol)
	f.build()
	f.u.Config.Backend.DevicePlugin.Policies = f.c
	f.u.Config.WarmUp = 0
	return f
}

// onPlan makes pod p look as the webhook writes it onto the plan: an nvidia-timeslicing
// record of the 1Gi recommendation and the plan annotations (4 replicas of 80Gi).
func onPlan(t *testing.T, f *fixture, i int) {
	rec := gpufracv1.AppliedRecord{Backend: gpufracv1.BackendNVIDIATimeSlicing, Autoscaler: "web", Containers: []gpufracv1.AppliedContainer{{
		Name: "main", Memory: q("1Gi"), WrittenMemory: q("20Gi")}}}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	f.pods[i].Annotations = map[string]string{gpufracv1.AnnotationApplied: string(b),
		backend.AnnotationSharingReplicas: "4", backend.AnnotationSharingGPUMemory: "80Gi"}
}

// Issue 16 item 2: pods of a workload on nvidia-timeslicing that the webhook did not
// place on the plan (records of another backend: hami at the recommended 1Gi) hold a
// whole GPU, so they are out of date and are replaced — only while a resize window is
// open and a plan is applied; a pod already on the plan (its own record, matching the
// recommendation) is not.
func TestMoveOntoSharedCapacity(t *testing.T) {
	closed := gpufracv1.ResizeWindow{Schedule: "0 0 1 1 *", Duration: metav1.Duration{Duration: time.Minute}} // New Year's first minute
	if now := time.Now().UTC(); now.Month() == time.January && now.Day() == 1 && now.Hour() == 0 && now.Minute() < 2 {
		t.Skip("the closed window is open now")
	}
	for _, tc := range []struct {
		name        string
		applied     bool
		windows     []gpufracv1.ResizeWindow
		wantEvicted bool
		wantSkip    string
	}{
		{"window open, plan applied", true, nil, true, ""},
		{"window closed", true, []gpufracv1.ResizeWindow{closed}, false, SkipWindowClosed},
		{"plan not applied", false, nil, false, SkipNoSharingPlan},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := sharingFixture(t, tc.applied, tc.windows...)
			onPlan(t, f, 2)
			if err := f.c.Update(t.Context(), f.pods[2]); err != nil {
				t.Fatal(err)
			}
			f.run()
			live := f.livePods()
			if evicted := !live["web-abc-0"]; evicted != tc.wantEvicted || !live["web-abc-2"] {
				t.Fatalf("live %v: want web-abc-0 evicted %v, web-abc-2 (on the plan) kept", live, tc.wantEvicted)
			}
			st := f.status()
			if st.PodsOutOfDate != 2 {
				t.Errorf("out of date %d, want the 2 pods off the plan", st.PodsOutOfDate)
			}
			for _, u := range st.Updates {
				if u.Pod == "web-abc-2" {
					t.Errorf("pod on the plan listed: %+v", u)
				}
				if u.Pod == "web-abc-1" && tc.wantSkip != "" && u.SkipReason != tc.wantSkip {
					t.Errorf("web-abc-1 skipped %q (%s), want %s", u.SkipReason, u.SkipMessage, tc.wantSkip)
				}
				if u.Pod == "web-abc-1" && !strings.Contains(u.Reason, "memory 80Gi above upper bound 1536Mi") {
					t.Errorf("reason %q, want the whole GPU above the bound", u.Reason)
				}
			}
		})
	}
}

// listCounter counts the List calls made through a client.Reader.
type listCounter struct {
	client.Reader
	lists int
}

func (l *listCounter) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l.lists++
	return l.Reader.List(ctx, list, opts...)
}

// The policies are listed once per cycle, however many autoscalers on a device-plugin
// backend the cycle plans, and every one of them still finds its plan.
func TestSharingPoliciesListedOncePerCycle(t *testing.T) {
	f := sharingFixture(t, true)
	lc := &listCounter{Reader: f.c}
	f.u.Config.Backend.DevicePlugin.Policies = lc
	cy := &cycle{}
	for i := 0; i < 3; i++ {
		p := &plan{gfa: f.gfa, backend: gpufracv1.BackendNVIDIATimeSlicing}
		if skip, msg := f.u.sharingPlanGate(t.Context(), cy, p); skip != "" {
			t.Fatalf("autoscaler %d skipped %s: %s", i, skip, msg)
		}
	}
	if lc.lists != 1 {
		t.Errorf("%d policy lists in one cycle, want 1", lc.lists)
	}
	if skip, _ := f.u.sharingPlanGate(t.Context(), &cycle{}, &plan{gfa: f.gfa, backend: gpufracv1.BackendHAMi}); skip != "" || lc.lists != 1 {
		t.Errorf("a hami autoscaler: skip %q, lists %d: want no skip and no list", skip, lc.lists)
	}
}
