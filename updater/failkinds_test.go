package updater

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// updateMode changed from Recreate to Off while the replacement of an evicted pod is
// awaited, and back: Off evicts nothing, and back in Recreate the replacement is still
// awaited, so no second pod is evicted before it is there (never two evictions for one
// replacement, whatever the mode did meanwhile).
func TestModeOffWhileReplacementPending(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
	f.build()
	f.run()
	if live := f.livePods(); len(live) != 2 {
		t.Fatalf("first cycle: pods %v, want one evicted", live)
	}
	setMode := func(m gpufracv1.UpdateMode) {
		var g gpufracv1.GPUFractionAutoscaler
		if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, &g); err != nil {
			t.Fatal(err)
		}
		g.Spec.UpdatePolicy.UpdateMode = &m
		g.Generation++
		if err := f.c.Update(context.Background(), &g); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		mode gpufracv1.UpdateMode
		want string // status.updater.blockedReason
	}{{gpufracv1.UpdateModeOff, SkipModeOff}, {gpufracv1.UpdateModeRecreate, SkipInFlight}} {
		setMode(step.mode)
		f.run()
		if live := f.livePods(); len(live) != 2 {
			t.Fatalf("%s: a second pod evicted before the first one's replacement: pods %v", step.mode, live)
		}
		if st := f.status(); st.BlockedReason != step.want {
			t.Errorf("%s: blocked %q, want %s", step.mode, st.BlockedReason, step.want)
		}
	}
}
