package updater

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// A PodDisruptionBudget that allows no disruption for half an hour: the workload's
// evictions are tried after --retry-backoff, then after twice as long each time, at most
// MaxRefusalBackoff, whichever pod of the workload is tried; status.updater says when
// the next try is. Before, each cycle tried one of the workload's pods (the others were
// past their own 1m retry), 30 Eviction calls (and admission Lease reads, Warning events)
// in 30 cycles, one a minute for as long as the budget held. Once the budget lets an
// eviction through, the next refusal waits --retry-backoff again; a rollback after
// refused shrinks is tried at once.
func TestRefusedEvictionsBackOff(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
	f.cfg.RetryBackoff = time.Minute
	refuse := true
	calls := 0
	f.funcs.SubResourceCreate = func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
		calls++
		if refuse {
			err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: "DisruptionBudget", Message: "The disruption budget web-pdb needs 3 healthy pods and has 3 currently"}}
			return err
		}
		return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
	}
	f.build()
	now := f.now
	f.u.Now = func() time.Time { return now }
	var tries []time.Duration
	for i := range 31 {
		before := calls
		f.run()
		if calls > before {
			tries = append(tries, time.Duration(i)*time.Minute)
		}
		if i == 3 {
			st := f.status()
			if st.BlockedReason != SkipPDB || !strings.Contains(st.BlockedMessage, "web-pdb") || !strings.Contains(st.BlockedMessage, "3 refusal(s) in a row; next try at") {
				t.Errorf("status after three refusals: blocked %q %q", st.BlockedReason, st.BlockedMessage)
			}
		}
		now = now.Add(time.Minute)
	}
	// 0, 1m, then 2m, 4m, 8m, 15m (capped) after each.
	want := []time.Duration{0, time.Minute, 3 * time.Minute, 7 * time.Minute, 15 * time.Minute, 30 * time.Minute}
	if len(tries) != len(want) {
		t.Fatalf("evictions tried at %v, want at %v", tries, want)
	}
	for i := range want {
		if tries[i] != want[i] {
			t.Fatalf("evictions tried at %v, want at %v", tries, want)
		}
	}
	if len(f.livePods()) != 3 {
		t.Fatal("a refused eviction evicted")
	}
	if evs := f.events(); countEvents(evs, EventEvictionRefused) != len(want) {
		t.Errorf("%d EvictionRefused events, want %d: %q", countEvents(evs, EventEvictionRefused), len(want), evs)
	}

	// The budget lets one through: the backoff starts over.
	refuse = false
	now = now.Add(15 * time.Minute)
	f.run()
	if len(f.livePods()) != 2 {
		t.Fatalf("pods %v: want one evicted once the budget allows", f.livePods())
	}
	if len(f.u.refusals) != 0 {
		t.Errorf("refusal state kept after an accepted eviction: %+v", f.u.refusals)
	}
}

// The refusal backoff holds needs as urgent as the ones refused, not more urgent ones:
// a rollback after refused shrinks is tried at once, and its own refusals start the
// count over.
func TestRefusalBackoffLetsMoreUrgentThrough(t *testing.T) {
	u := New(nil, nil, Config{RetryBackoff: time.Minute})
	now := time.Now()
	ref := workload.Ref{Namespace: ns, Kind: "Deployment", Name: "web"}
	c := func(n Need) *candidate { return &candidate{p: &plan{ref: ref}, need: n} }
	shrink, urgent, rollback := Need{Shrink: true}, Need{Grow: true, Urgent: true, Protective: true}, Need{Grow: true, Urgent: true, Rollback: true}
	for range 3 {
		u.refused(ref, shrink, "eviction refused", now)
	}
	if s := u.refusals[ref]; s.n != 3 || s.until != now.Add(4*time.Minute) {
		t.Fatalf("after 3 refusals %+v, want 3 in a row, next try in 4m", s)
	}
	gate := u.refusalGate(now.Add(time.Minute))
	if r, _ := gate(c(shrink)); r != SkipPDB {
		t.Errorf("a shrink passed the backoff (%q)", r)
	}
	for _, n := range []Need{urgent, rollback} {
		if r, msg := gate(c(n)); r != "" {
			t.Errorf("need %+v held: %s", n, msg)
		}
	}
	if s := u.refused(ref, urgent, "eviction refused", now.Add(time.Minute)); s.n != 1 || s.class != 1 {
		t.Errorf("urgent growth refused after shrinks: %+v, want the count started over", s)
	}
	if r, _ := u.refusalGate(now.Add(90 * time.Second))(c(urgent)); r != SkipPDB {
		t.Error("urgent growth passed its own backoff")
	}
}
