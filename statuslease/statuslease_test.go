package statuslease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestStatusLease(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock = func() time.Time { return now }
	defer func() { clock = time.Now }()

	fresh, err := Fresh(ctx, c, "gpufrac-system", DefaultName, 30*time.Second)
	if err != nil || fresh {
		t.Fatalf("missing lease: fresh=%v err=%v", fresh, err)
	}
	a := &Renewer{Client: c, Namespace: "gpufrac-system", Identity: "a", Now: func() time.Time { return now }}
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if fresh, _ := Fresh(ctx, c, "gpufrac-system", DefaultName, 30*time.Second); !fresh {
		t.Fatal("just renewed, not fresh")
	}
	now = now.Add(31 * time.Second)
	if fresh, _ := Fresh(ctx, c, "gpufrac-system", DefaultName, 30*time.Second); fresh {
		t.Fatal("31s old, still fresh with maxAge 30s")
	}
	// Another replica renews; the first one's release then leaves it alone.
	b := &Renewer{Client: c, Namespace: "gpufrac-system", Identity: "b", Now: func() time.Time { return now }}
	if err := b.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if fresh, _ := Fresh(ctx, c, "gpufrac-system", DefaultName, 30*time.Second); !fresh {
		t.Fatal("released by a replica that is not the holder")
	}
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "gpufrac-system", Name: DefaultName}, l); err != nil {
		t.Fatal(err)
	}
	if *l.Spec.HolderIdentity != "b" || *l.Spec.LeaseDurationSeconds != 30 {
		t.Errorf("lease spec %+v", l.Spec)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if fresh, _ := Fresh(ctx, c, "gpufrac-system", DefaultName, 30*time.Second); fresh {
		t.Fatal("fresh after the holder released it")
	}
	if _, err := Fresh(ctx, c, "gpufrac-system", DefaultName, 0); err == nil {
		t.Error("maxAge 0 accepted")
	}
}

func TestStatusLeaseRenewsOnlyWhenReady(t *testing.T) {
	c := newFakeClient(t)
	var ok atomic.Bool
	l := &Renewer{Client: c, Namespace: "ns", Identity: "a", RenewInterval: 10 * time.Millisecond, Ready: func() error {
		if !ok.Load() {
			return errors.New("not ready")
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Start(ctx); close(done) }()
	time.Sleep(50 * time.Millisecond)
	if fresh, _ := Fresh(context.Background(), c, "ns", DefaultName, time.Minute); fresh {
		t.Fatal("renewed while not ready")
	}
	ok.Store(true)
	deadline := time.Now().Add(2 * time.Second)
	for {
		if fresh, _ := Fresh(context.Background(), c, "ns", DefaultName, time.Minute); fresh {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not renewed once ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if fresh, _ := Fresh(context.Background(), c, "ns", DefaultName, time.Minute); fresh {
		t.Fatal("still fresh after shutdown: not released")
	}
}

func newFakeClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).Build()
}

// TestFreshOrDeclared: a Lease whose leaseDurationSeconds (3 × the recommender's
// --interval) is longer than maxAge is fresh up to that duration; a shorter declared
// duration never tightens maxAge; Fresh itself ignores the declared duration.
func TestFreshOrDeclared(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock = func() time.Time { return now }
	defer func() { clock = time.Now }()
	for _, tc := range []struct {
		name          string
		declared, age time.Duration
		want          bool
		wantAllowed   time.Duration
	}{
		{"long interval, between cycles", 45 * time.Minute, 14 * time.Minute, true, 45 * time.Minute},
		{"long interval, three cycles missed", 45 * time.Minute, 46 * time.Minute, false, 45 * time.Minute},
		{"short interval, within maxAge", 3 * time.Minute, 9 * time.Minute, true, 10 * time.Minute},
		{"short interval, past maxAge", 3 * time.Minute, 11 * time.Minute, false, 10 * time.Minute},
	} {
		c := newFakeClient(t)
		r := &Renewer{Client: c, Namespace: "ns", Name: "rec", Identity: "a", Duration: tc.declared, Now: func() time.Time { return now.Add(-tc.age) }}
		if err := r.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		fresh, allowed, err := FreshOrDeclared(ctx, c, "ns", "rec", 10*time.Minute)
		if err != nil || fresh != tc.want || allowed != tc.wantAllowed {
			t.Errorf("%s: fresh %v allowed %v (%v), want %v %v", tc.name, fresh, allowed, err, tc.want, tc.wantAllowed)
		}
		if plain, _ := Fresh(ctx, c, "ns", "rec", 10*time.Minute); plain != (tc.age <= 10*time.Minute) {
			t.Errorf("%s: Fresh %v: it must ignore the declared duration", tc.name, plain)
		}
	}
}
