package updater

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/statuswrite"
)

// A status.updater write that failed every cycle was visible only in the updater's log.
// From the third failure in a row of the same autoscaler a StatusWriteFailed Warning
// event goes on it (once per message) and each failure counts in
// gpufrac_updater_status_write_failures_total by the API status reason.
func TestStatusWriteFailuresReported(t *testing.T) {
	gr := schema.GroupResource{Group: gpufracv1.GroupVersion.Group, Resource: "gpufractionautoscalers"}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "GPUFractionAutoscaler"}, "web", nil)
	for _, tc := range []struct {
		name       string
		err        func(i int) error // the i-th failure's error
		reason     string
		fails      int // cycles whose write fails, from the first
		wantEvents int
	}{
		{"invalid twice: transient", func(int) error { return invalid }, "Invalid", 2, 0},
		{"invalid three times", func(int) error { return invalid }, "Invalid", 3, 1},
		{"invalid six times: one event", func(int) error { return invalid }, "Invalid", 6, 1},
		{"forbidden five times", func(int) error { return apierrors.NewForbidden(gr, "web", errors.New("RBAC")) }, "Forbidden", 5, 1},
		{"connection refused four times", func(int) error { return errors.New("dial tcp: connection refused") }, "Unknown", 4, 1},
		{"a new message each time from the third", func(i int) error { return apierrors.NewServerTimeout(gr, fmt.Sprintf("patch-%d", i), 1) }, "ServerTimeout", 5, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1) // nothing to evict
			i := 0
			f.funcs.SubResourcePatch = func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if i < tc.fails {
					i++
					return tc.err(i)
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			}
			f.build()
			before := testutil.ToFloat64(statusWriteFailures.WithLabelValues(tc.reason))
			for range tc.fails {
				if err := f.u.RunOnce(t.Context()); err == nil {
					t.Fatal("the status write did not fail")
				}
			}
			f.run() // the write succeeds
			if got := countEvents(f.events(), statuswrite.EventReason); got != tc.wantEvents {
				t.Errorf("%d %s events, want %d", got, statuswrite.EventReason, tc.wantEvents)
			}
			wantCount := float64(max(0, tc.fails-statuswrite.Threshold+1))
			if got := testutil.ToFloat64(statusWriteFailures.WithLabelValues(tc.reason)) - before; got != wantCount {
				t.Errorf("status write failures counted %v (reason %s), want %v", got, tc.reason, wantCount)
			}
			// The streak ended: two more failures are transient again.
			i, tc.fails = 0, 2
			for range 2 {
				_ = f.u.RunOnce(t.Context())
			}
			if got := countEvents(f.events(), statuswrite.EventReason); got != 0 {
				t.Errorf("%d events after a success and two failures, want none", got)
			}
		})
	}
}
