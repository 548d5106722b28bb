package recommender

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/statuswrite"
	"github.com/gpufrac/gpufrac/recommender/history"
)

// A recommendation whose write failed every cycle was visible only in the recommender's
// log (and the cycle-errors metric, without which object or why). From the third failure
// in a row of the same autoscaler a StatusWriteFailed Warning event goes on it (once per
// message), and each failure counts in gpufrac_recommender_status_write_failures_total
// by the API status reason. Another autoscaler's writes are unaffected.
func TestStatusWriteFailuresReported(t *testing.T) {
	gr := schema.GroupResource{Group: gpufracv1.GroupVersion.Group, Resource: "gpufractionrecommendations"}
	for _, tc := range []struct {
		name       string
		err        func(i int) error
		reason     string
		fails      int
		wantEvents int
	}{
		{"invalid twice: transient", func(int) error {
			return apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "GPUFractionRecommendation"}, "sd", nil)
		}, "Invalid", 2, 0},
		{"invalid four times", func(int) error {
			return apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "GPUFractionRecommendation"}, "sd", nil)
		}, "Invalid", 4, 1},
		{"forbidden three times", func(int) error { return apierrors.NewForbidden(gr, "sd", errors.New("RBAC")) }, "Forbidden", 3, 1},
		{"a webhook's own reason, five times", func(int) error {
			return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 400, Reason: "PolicyViolation", Message: "denied by policy"}}
		}, "Other", 5, 1},
		{"timeouts with new messages", func(i int) error { return apierrors.NewServerTimeout(gr, fmt.Sprintf("patch-%d", i), 1) }, "ServerTimeout", 5, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			for _, name := range []string{"sd", "other"} {
				for _, o := range deployment("ml", name, 2) {
					o.SetLabels(map[string]string{"gfa": name})
					objs = append(objs, o)
				}
			}
			objs = append(objs, gfa("ml", "sd", "sd"), gfa("ml", "other", "other"))
			h := newHarness(t, objs, promFor(objs, 20*gib, 0.3))
			rec := events.NewFakeRecorder(50)
			h.rec.Events = rec
			i := 0
			h.rec.Client = interceptor.NewClient(h.c.(client.WithWatch), interceptor.Funcs{List: slimPods.List,
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					if _, ok := obj.(*gpufracv1.GPUFractionRecommendation); ok && obj.GetName() == "sd" && i < tc.fails {
						i++
						return tc.err(i)
					}
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				}})
			before := testutil.ToFloat64(statusWriteFailures.WithLabelValues(tc.reason))
			ctx := context.Background()
			for range tc.fails {
				if err := h.rec.RunOnce(ctx); err == nil || !strings.Contains(err.Error(), "ml/sd") {
					t.Fatalf("cycle error %v, want the failed write of ml/sd", err)
				}
				h.now = h.now.Add(time.Minute)
			}
			if err := h.rec.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if len(h.gfr(t, "ml", "sd").Status.ContainerRecommendations) != 1 || len(h.gfr(t, "ml", "other").Status.ContainerRecommendations) != 1 {
				t.Fatal("a recommendation missing after the writes succeeded")
			}
			got := 0
			for done := false; !done; {
				select {
				case e := <-rec.Events:
					if strings.Contains(e, statuswrite.EventReason) {
						got++
					}
				default:
					done = true
				}
			}
			if got != tc.wantEvents {
				t.Errorf("%d %s events, want %d", got, statuswrite.EventReason, tc.wantEvents)
			}
			want := float64(max(0, tc.fails-statuswrite.Threshold+1))
			if n := testutil.ToFloat64(statusWriteFailures.WithLabelValues(tc.reason)) - before; n != want {
				t.Errorf("failures counted %v (reason %s), want %v", n, tc.reason, want)
			}
		})
	}
}

// Issue 17: a first cycle over 2,000 autoscalers made 6,000 writes one at a time, a
// third of the bootstrap. The writes of different autoscalers now run at once, at most
// Config.StatusWriteConcurrency, each autoscaler's own in order; a write that fails is
// still its own autoscaler's error, and every other recommendation is written.
func TestStatusWritesAtOnce(t *testing.T) {
	atLimits(t, func(t *testing.T, h *harness, limit int, writes *inFlight) {
		var mu sync.Mutex
		order := map[string][]string{} // per autoscaler, the kinds written in turn
		h.rec.Client = interceptor.NewClient(h.c.(client.WithWatch), interceptor.Funcs{List: slimPods.List,
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				mu.Lock()
				order[obj.GetName()] = append(order[obj.GetName()], fmt.Sprintf("%T", obj))
				mu.Unlock()
				defer writes.enter(limit > 1)()
				if _, ok := obj.(*gpufracv1.GPUFractionRecommendation); ok && obj.GetName() == "c" {
					return apierrors.NewServerTimeout(schema.GroupResource{Resource: "gpufractionrecommendations"}, "patch", 1)
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			}})
		err := h.rec.RunOnce(context.Background())
		if err == nil || !strings.Contains(err.Error(), "ml/c") || strings.Contains(err.Error(), "ml/a:") {
			t.Fatalf("cycle error %v, want ml/c's failed write alone", err)
		}
		writes.check(t, limit)
		for _, name := range writeNames {
			want := []string{"*v1alpha1.GPUFractionRecommendation", "*v1alpha1.GPUFractionAutoscaler"}
			if name == "c" {
				want = want[:1] // the autoscaler's status is written after its recommendation's
			}
			if got := order[name]; !slices.Equal(got, want) {
				t.Errorf("%s: status writes %v, want %v in that order", name, got, want)
			}
			if name != "c" && len(h.gfr(t, "ml", name).Status.ContainerRecommendations) == 0 {
				t.Errorf("%s: no recommendation written", name)
			}
		}
	})
}

// A cycle writes its checkpoints Config.StatusWriteConcurrency at once too: at limit 3
// two are in flight together and never more than 3, at limit 1 never two. A failed
// write is that workload's alone: it is not marked written (so the next cycle tries it
// again) and the others are.
func TestCheckpointWritesAtOnce(t *testing.T) {
	atLimits(t, func(t *testing.T, h *harness, limit int, writes *inFlight) {
		h.rec.Config.Checkpoints = true
		h.rec.Client = interceptor.NewClient(h.c.(client.WithWatch), interceptor.Funcs{List: slimPods.List,
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*gpufracv1.GPUFractionCheckpoint); !ok {
					return c.Create(ctx, obj, opts...)
				}
				defer writes.enter(limit > 1)()
				if obj.GetName() == "c" {
					return apierrors.NewServerTimeout(schema.GroupResource{Resource: "gpufractioncheckpoints"}, "create", 1)
				}
				return c.Create(ctx, obj, opts...)
			}})
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		writes.check(t, limit)
		for _, name := range writeNames {
			var cp gpufracv1.GPUFractionCheckpoint
			err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ml", Name: name}, &cp)
			_, marked := h.rec.checkpoints[history.WorkloadKey{Namespace: "ml", Kind: "Deployment", Name: name}]
			switch {
			case name == "c" && (err == nil || marked):
				t.Errorf("c: checkpoint written %v, marked %v; want neither after its failed write", err == nil, marked)
			case name != "c" && (err != nil || !marked || len(cp.Status.Containers) == 0):
				t.Errorf("%s: checkpoint %v (containers %d), marked %v; want it written and marked", name, err, len(cp.Status.Containers), marked)
			}
		}
	})
}

// writeNames are the autoscalers of the write tests' harness (writesHarness).
var writeNames = []string{"a", "b", "c", "d", "e", "f"}

// atLimits runs test at write limits 1 and 3, each on its own harness of writeNames
// with Config.StatusWriteConcurrency at the limit, and a fresh count of writes in flight.
func atLimits(t *testing.T, test func(t *testing.T, h *harness, limit int, writes *inFlight)) {
	for _, limit := range []int{1, 3} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			h := writesHarness(t, writeNames)
			h.rec.Config.StatusWriteConcurrency = limit
			test(t, h, limit, newInFlight())
		})
	}
}

// inFlight counts the writes a test's client has in flight at once: the first waits
// (up to 10 s, a bound on a failure; no figure is timed) for a second to start, so two
// overlap only if the cycle writes several at once.
type inFlight struct {
	mu          sync.Mutex
	now, most   int
	waited      bool
	second      chan struct{} // closed when two writes are first in flight at once
	closeSecond sync.Once
}

func newInFlight() *inFlight { return &inFlight{second: make(chan struct{})} }

// enter counts a write in flight until the returned leave is called; wait: whether the
// first write waits for a second.
func (f *inFlight) enter(wait bool) (leave func()) {
	f.mu.Lock()
	f.now++
	f.most = max(f.most, f.now)
	if f.now == 2 {
		f.closeSecond.Do(func() { close(f.second) })
	}
	first := !f.waited
	f.waited = true
	f.mu.Unlock()
	if first && wait {
		select {
		case <-f.second:
		case <-time.After(10 * time.Second):
		}
	}
	return func() { f.mu.Lock(); f.now--; f.mu.Unlock() }
}

// check fails t unless at most limit writes were in flight at once, and at least two
// where limit allows them.
func (f *inFlight) check(t *testing.T, limit int) {
	t.Helper()
	switch {
	case limit == 1 && f.most != 1:
		t.Errorf("%d writes in flight at once, want 1", f.most)
	case limit > 1 && (f.most < 2 || f.most > limit):
		t.Errorf("%d writes in flight at once, want 2-%d", f.most, limit)
	}
}

// writesHarness is a harness over one Deployment of one pod and its autoscaler per name,
// in namespace ml.
func writesHarness(t *testing.T, names []string) *harness {
	var objs []client.Object
	for _, name := range names {
		for _, o := range deployment("ml", name, 1) {
			o.SetLabels(map[string]string{"gfa": name})
			objs = append(objs, o)
		}
		objs = append(objs, gfa("ml", name, name))
	}
	return newHarness(t, objs, promFor(objs, 20*gib, 0.3))
}
