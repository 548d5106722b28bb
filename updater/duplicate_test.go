package updater

import (
	"context"
	"strings"
	"testing"
	"time"

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
	f.gfa.CreationTimestamp = metav1.NewTime(f.now.Add(-time.Hour))
	old := f.gfa.DeepCopy()
	old.Name, old.UID = "web-old", "gfa-old-uid"
	old.CreationTimestamp = metav1.NewTime(f.now.Add(-2 * time.Hour))
	oldRec := f.gfr.DeepCopy()
	oldRec.Name, oldRec.ResourceVersion = "web-old", ""
	oldRec.OwnerReferences[0].Name, oldRec.OwnerReferences[0].UID = old.Name, old.UID
	f.objs = append(f.objs, old, oldRec)
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
