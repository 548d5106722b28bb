package updater

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Two autoscalers on a 2-replica Deployment, both with recommendations that put both
// pods out of bounds (the validating webhook was down when the second was created):
// only the older one acts, the workload's budget (one pod in flight) holds across
// them, and a restarted updater evicts nothing more while the first replacement is
// missing.
func TestDuplicateAutoscalersOneBudget(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 3)
	f.addOlderDuplicate()
	f.build()
	f.run()
	if n := len(f.livePods()); n != 1 {
		t.Fatalf("%d pods left after one cycle, want 1: two autoscalers must share the workload's budget", n)
	}
	st := f.status() // "web", the newer one
	if st.BlockedReason != SkipDuplicateTarget || !strings.Contains(st.BlockedMessage, "web-old") || st.LastEvictionTime != nil || len(st.Updates) != 0 {
		t.Errorf("newer autoscaler's status %+v, want blocked as duplicate-target naming web-old and nothing done", st)
	}
	var winner gpufracv1.GPUFractionAutoscaler
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web-old"}, &winner); err != nil {
		t.Fatal(err)
	}
	if winner.Status.Updater == nil || winner.Status.Updater.LastEvictionTime == nil {
		t.Errorf("older autoscaler did not act: %+v", winner.Status.Updater)
	}
	if evs := f.events(); !hasEvent(evs, EventUpdatesBlocked) || !hasEvent(evs, SkipDuplicateTarget) {
		t.Errorf("events %v: want UpdatesBlocked (duplicate-target) on the newer autoscaler", evs)
	}
	f.run()
	if n := len(f.livePods()); n != 1 {
		t.Fatalf("second cycle evicted the last replica")
	}
	// A restart forgets the awaited replacement; the budget still holds.
	f.u = New(f.c, f.c, f.cfg)
	f.u.Events = f.rec
	f.run()
	if n := len(f.livePods()); n != 1 {
		t.Fatalf("after a restart the last replica was evicted")
	}
}

// The autoscaler in charge of a workload holds a rollback floor (a shrink tripped the
// guardrail: pods stay at 3Gi though the recommendation says 1Gi), and another
// autoscaler of the workload (admitted while the validating webhook was down) waits.
// When the one in charge is deleted, the other takes charge with the floor: the pods
// are not shrunk back to where the guardrail tripped, and the webhook, which reads the
// floor of the autoscaler in charge, writes it into their replacements. The control: the
// same without a floor shrinks a pod once the other takes charge.
func TestFloorOutlivesTheAutoscalerInCharge(t *testing.T) {
	for _, tc := range []struct {
		name     string
		floor    bool
		wantKept bool
	}{{"floor", true, true}, {"control: no floor", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3) // 3Gi, target 1Gi: shrink
			old := f.addOlderDuplicate()
			if tc.floor {
				old.Status.Updater = &gpufracv1.UpdaterStatus{Floor: &gpufracv1.UpdaterFloor{
					Memory: q("3Gi"), Containers: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: q("3Gi")}},
					Until: metav1.NewTime(f.now.Add(24 * time.Hour)), Reason: "latency objective breached after the shrink"}}
			}
			f.build()
			f.run()
			if n := len(f.livePods()); n != 3 && tc.floor {
				t.Fatalf("%d pods left with the floor in charge, want 3", n)
			}
			ctx := t.Context()
			if !tc.floor {
				// The control's first cycle shrinks under web-old; start again from three
				// pods at 3Gi with web in charge: the ReplicaSet's replacement (Ready) and
				// a restarted updater.
				rs := &appsv1.ReplicaSet{}
				if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web-abc"}, rs); err != nil {
					t.Fatal(err)
				}
				if err := f.c.Create(ctx, f.addPod("web-abc-new", 3, rs).DeepCopy()); err != nil {
					t.Fatal(err)
				}
				f.u = New(f.c, f.c, f.cfg)
				f.u.Events = f.rec
			}
			g := &gpufracv1.GPUFractionAutoscaler{}
			if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web-old"}, g); err != nil {
				t.Fatal(err)
			}
			if err := f.c.Delete(ctx, g); err != nil {
				t.Fatal(err)
			}
			before := f.livePods()
			f.run()
			after := f.livePods()
			kept := len(after) == len(before)
			if kept != tc.wantKept {
				t.Fatalf("pods %v -> %v: kept=%v, want %v (status %+v)", before, after, kept, tc.wantKept, f.status())
			}
			if tc.floor {
				st := f.status()
				if st.Floor == nil || st.Floor.Memory.String() != "3Gi" {
					t.Errorf("status.updater.floor %+v, want the 3Gi floor taken over", st.Floor)
				}
				if st.BlockedReason != SkipBelowFloor {
					t.Errorf("blocked %q (%s), want %s", st.BlockedReason, st.BlockedMessage, SkipBelowFloor)
				}
			}
		})
	}
}

// addOlderDuplicate adds a second autoscaler of the fixture's workload, "web-old",
// created an hour before the fixture's own (so it is the one in charge), with a copy of
// the fixture's recommendation. It returns the autoscaler, to change before build.
func (f *fixture) addOlderDuplicate() *gpufracv1.GPUFractionAutoscaler {
	f.gfa.CreationTimestamp = metav1.NewTime(f.now.Add(-time.Hour))
	old := f.gfa.DeepCopy()
	old.Name, old.UID = "web-old", "gfa-old-uid"
	old.CreationTimestamp = metav1.NewTime(f.now.Add(-2 * time.Hour))
	oldRec := f.gfr.DeepCopy()
	oldRec.Name, oldRec.ResourceVersion = "web-old", ""
	oldRec.OwnerReferences[0].Name, oldRec.OwnerReferences[0].UID = old.Name, old.UID
	f.objs = append(f.objs, old, oldRec)
	return old
}
