package recommender

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gpufrac/gpufrac/internal/scheme"
	"github.com/gpufrac/gpufrac/statuslease"
)

// TestStatusLeaseRenewedAfterCyclesThatRan: the recommender's status Lease is created
// and renewed after a cycle that ran all its steps, not after one that stopped early
// (listing failed), and released when the loop stops, so the updater holds the
// autoscalers of an instance that is not keeping their recommendations current. Which
// cycles ran: TestCycleStepsTimed.
func TestStatusLeaseRenewedAfterCyclesThatRan(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.MustNew()).Build()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	r := &Recommender{StatusLease: &statuslease.Renewer{Client: c, Namespace: "gpufrac", Name: statuslease.RecommenderLeaseName("team-a"),
		Identity: "rec-0", Component: "recommender", Now: func() time.Time { return now }}}
	renewTime := func() *time.Time {
		t.Helper()
		l := &coordinationv1.Lease{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: "gpufrac", Name: "gpufrac-recommender-status-team-a"}, l); err != nil {
			t.Fatal(err)
		}
		if l.Labels["app.kubernetes.io/component"] != "recommender" {
			t.Errorf("component label %q, want recommender", l.Labels["app.kubernetes.io/component"])
		}
		if l.Spec.RenewTime == nil {
			return nil
		}
		rt := l.Spec.RenewTime.Time
		return &rt
	}
	for _, step := range []struct {
		name  string
		ran   bool
		renew bool
	}{
		{"a cycle that ran", true, true},
		{"a cycle that stopped early", false, false},
	} {
		before := now
		now = now.Add(time.Minute)
		r.renewStatusLease(ctx, step.ran)
		got, want := renewTime(), now
		if !step.renew {
			want = before
		}
		if got == nil || !got.Equal(want) {
			t.Errorf("%s: renewTime %v, want %v", step.name, got, want)
		}
	}
	r.releaseStatusLease()
	if got := renewTime(); got != nil {
		t.Errorf("after the loop stopped: renewTime %v, want none", got)
	}
}
