package updater

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// ReplacesBefore: the more urgent need first whatever the workloads' last
// replacements; between needs as urgent, the workload replaced longest ago first, never
// replaced before any other.
func TestReplacesBefore(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	plain, urgent, rollback := Need{}, Need{Urgent: true}, Need{Urgent: true, Rollback: true}
	for _, tc := range []struct {
		name         string
		a            Need
		lastA        time.Time
		b            Need
		lastB        time.Time
		before, then bool // a before b, b before a
	}{
		{"urgent before plain replaced long ago", urgent, t0, plain, time.Time{}, true, false},
		{"rollback before urgent never replaced", rollback, t0, urgent, time.Time{}, true, false},
		{"never replaced before replaced", plain, time.Time{}, plain, t0, true, false},
		{"replaced longer ago first", plain, t0.Add(-time.Hour), plain, t0, true, false},
		{"urgent: replaced longer ago first", urgent, t0.Add(-time.Hour), urgent, t0, true, false},
		{"same time: neither (autoscaler order)", plain, t0, plain, t0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReplacesBefore(tc.a, tc.lastA, tc.b, tc.lastB); got != tc.before {
				t.Errorf("ReplacesBefore(a, b) = %v, want %v", got, tc.before)
			}
			if got := ReplacesBefore(tc.b, tc.lastB, tc.a, tc.lastA); got != tc.then {
				t.Errorf("ReplacesBefore(b, a) = %v, want %v", got, tc.then)
			}
		})
	}
}

// Two workloads out of date under an eviction rate of one replacement a cycle: "web"
// (listed first) and "zz", each with two pods to shrink and minReplicas 1. Each
// eviction's replacement comes at once, up to date, so web's budget never holds it.
// Before, the candidates went in autoscaler order alone: web's pods took the cycle's
// token in cycle after cycle, and zz waited for every replacement web needed (with a
// workload that keeps needing some, for ever). Now the workload replaced longest ago
// goes first: web in the first cycle (neither was replaced, web is listed first), zz in
// the second.
func TestWorkloadReplacedLongestAgoGoesFirst(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 3)
	f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
	f.addWorkload("zz", 2, 3)
	f.build()
	var order []string
	for cycle := range 2 {
		f.u.limiter = rate.NewLimiter(0, 1) // one eviction this cycle
		before := f.livePods()
		f.run()
		for name := range before {
			if !f.livePods()[name] {
				order = append(order, name)
				f.replace(t, name)
			}
		}
		if len(order) != cycle+1 {
			t.Fatalf("cycle %d: evicted %v in all, want one a cycle", cycle, order)
		}
	}
	if order[0][:3] != "web" || order[1][:2] != "zz" {
		t.Errorf("evicted %v, want web's pod, then zz's", order)
	}
}

// addWorkload adds a second Deployment name (ReplicaSet name-abc) of n running pods whose
// applied record says memGi, its autoscaler (as the fixture's, minReplicas 1) and a copy
// of the fixture's recommendation.
func (f *fixture) addWorkload(name string, n int, memGi int64) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-dep-uid")}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-abc", UID: types.UID(name + "-rs-uid"), OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: dep.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(n))}}
	gfa := f.gfa.DeepCopy()
	gfa.Name, gfa.UID = name, types.UID(name+"-gfa-uid")
	gfa.Spec.TargetRef.Name = name
	gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
	gfr := f.gfr.DeepCopy()
	gfr.Name, gfr.ResourceVersion = name, ""
	gfr.OwnerReferences[0].Name, gfr.OwnerReferences[0].UID = gfa.Name, gfa.UID
	f.objs = append(f.objs, dep, rs, gfa, gfr)
	for i := range n {
		p := f.addPod(fmt.Sprintf("%s-abc-%d", name, i), memGi, rs)
		rec := gpufracv1.AppliedRecord{Backend: gpufracv1.BackendHAMi, Autoscaler: name, Containers: []gpufracv1.AppliedContainer{{
			Name: "main", Memory: ptr.To(*resource.NewQuantity(memGi<<30, resource.BinarySI)), Compute: q("250m")}}}
		b, _ := json.Marshal(rec)
		p.Annotations[gpufracv1.AnnotationApplied] = string(b)
	}
}

// replace creates, as the evicted pod's ReplicaSet would, its Ready replacement
// "<name>-new" at the recommendation's 1Gi.
func (f *fixture) replace(t *testing.T, evicted string) {
	t.Helper()
	var orig *appsv1.ReplicaSet
	for _, o := range f.objs {
		if rs, ok := o.(*appsv1.ReplicaSet); ok && len(evicted) > len(rs.Name) && evicted[:len(rs.Name)] == rs.Name {
			orig = rs
		}
	}
	if orig == nil {
		t.Fatalf("no ReplicaSet of %s", evicted)
	}
	p := f.addPod(evicted+"-new", 1, orig)
	p.CreationTimestamp = metav1.NewTime(time.Now())
	var rec gpufracv1.AppliedRecord
	if err := json.Unmarshal([]byte(p.Annotations[gpufracv1.AnnotationApplied]), &rec); err != nil {
		t.Fatal(err)
	}
	rec.Autoscaler = orig.OwnerReferences[0].Name
	b, _ := json.Marshal(rec)
	p.Annotations[gpufracv1.AnnotationApplied] = string(b)
	if err := f.c.Create(t.Context(), p.DeepCopy()); err != nil {
		t.Fatal(err)
	}
}
