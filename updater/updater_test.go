package updater

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/scheme"
	"github.com/gpufrac/gpufrac/statuslease"
)

const (
	ns    = "ml"
	sysNS = "gpufrac-system"
)

// fixture is a Deployment "web" with n running pods whose applied record says memGi /
// 250m, an autoscaler in mode, and its recommendation (target 1Gi / 250m, bounds
// [768Mi, 1536Mi]).
type fixture struct {
	t      *testing.T
	scheme *runtime.Scheme
	objs   []client.Object
	gfa    *gpufracv1.GPUFractionAutoscaler
	gfr    *gpufracv1.GPUFractionRecommendation
	pods   []*corev1.Pod
	funcs  interceptor.Funcs
	cfg    Config
	rec    *events.FakeRecorder
	c      client.WithWatch
	u      *Updater
	now    time.Time
}

func newFixture(t *testing.T, mode gpufracv1.UpdateMode, backend gpufracv1.BackendType, n int, memGi int64) *fixture {
	t.Helper()
	s := scheme.MustNew()
	f := &fixture{t: t, scheme: s, now: time.Now()}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "dep-uid"}}
	// spec.replicas as the API server defaults it (unset would read as 1).
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-abc", UID: "rs-uid", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: dep.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(n))}}
	f.gfa = &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "gfa-uid", Generation: 1}}
	f.gfa.Spec.TargetRef.APIVersion, f.gfa.Spec.TargetRef.Kind, f.gfa.Spec.TargetRef.Name = "apps/v1", "Deployment", "web"
	f.gfa.Spec.UpdatePolicy = &gpufracv1.UpdatePolicy{UpdateMode: &mode}
	f.gfa.Spec.Backend = &gpufracv1.Backend{Type: backend}
	f.gfa.Status.Memory = q("1Gi")
	f.gfa.Status.Conditions = []metav1.Condition{{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue, Reason: "R", LastTransitionTime: metav1.Now()}}
	f.gfr = &gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", ResourceVersion: "10",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: "web", UID: f.gfa.UID, Controller: ptr.To(true)}}}}
	f.setTarget("1Gi", "768Mi", "1536Mi")
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: sysNS, Name: statuslease.DefaultName},
		Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))}}
	f.objs = append(f.objs, dep, rs, f.gfa, lease)
	for i := range n {
		f.addPod(fmt.Sprintf("web-abc-%d", i), memGi, rs)
	}
	f.cfg = Config{LeaseNamespace: sysNS, EvictionRate: -1, Interval: time.Second}
	return f
}

// q returns a pointer to the quantity s (resource.MustParse: it panics on a malformed s).
func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

// limits is a resource list given as resource names and quantities in turn, e.g.
// limits("nvidia.com/gpu", "1", "nvidia.com/gpumem", "2048"). It panics on an odd
// count or a malformed quantity.
func limits(kv ...string) corev1.ResourceList {
	if len(kv)%2 != 0 {
		panic("limits: a resource name without a quantity")
	}
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func (f *fixture) setTarget(target, lower, upper string) {
	f.gfr.Status = gpufracv1.GPUFractionRecommendationStatus{
		ContainerRecommendations: []gpufracv1.ContainerRecommendation{{ContainerName: "main",
			Target:     gpufracv1.GPUResources{Memory: q(target), Compute: q("250m")},
			LowerBound: gpufracv1.GPUResources{Memory: q(lower), Compute: q("200m")},
			UpperBound: gpufracv1.GPUResources{Memory: q(upper), Compute: q("300m")},
		}},
		ConfidencePercent: ptr.To[int32](90),
		Conditions: []metav1.Condition{{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue, Reason: "R", LastTransitionTime: metav1.Now()},
			{Type: gpufracv1.ConditionLatencyGuardrailActive, Status: metav1.ConditionFalse, Reason: gpufracv1.ReasonLatencyOK, LastTransitionTime: metav1.Now()}},
	}
}

func (f *fixture) addPod(name string, memGi int64, rs *appsv1.ReplicaSet) *corev1.Pod {
	rec := gpufracv1.AppliedRecord{Backend: gpufracv1.BackendHAMi, Autoscaler: "web", Containers: []gpufracv1.AppliedContainer{{
		Name: "main", Memory: ptr.To(*resource.NewQuantity(memGi<<30, resource.BinarySI)), Compute: q("250m")}}}
	b, _ := json.Marshal(rec)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web"},
			CreationTimestamp: metav1.NewTime(f.now.Add(-time.Hour)),
			Annotations:       map[string]string{gpufracv1.AnnotationApplied: string(b)},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{
			Limits: limits("nvidia.com/gpu", "1")}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	f.pods = append(f.pods, p)
	f.objs = append(f.objs, p)
	return p
}

// addGPUHPA adds an HPA of the fixture's Deployment that scales on the GPU utilisation
// metric DCGM_FI_DEV_GPU_UTIL (per-pod average), so the pods' compute is held.
// createReplacement creates, in the API, the ReplicaSet's replacement pod web-abc-new
// (1Gi, created now), as the ReplicaSet controller would after an eviction.
func (f *fixture) createReplacement(t *testing.T) {
	t.Helper()
	rs := &appsv1.ReplicaSet{}
	if err := f.c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "web-abc"}, rs); err != nil {
		t.Fatal(err)
	}
	repl := f.addPod("web-abc-new", 1, rs)
	repl.CreationTimestamp = metav1.NewTime(time.Now())
	if err := f.c.Create(t.Context(), repl.DeepCopy()); err != nil {
		t.Fatal(err)
	}
}

// breachLatency sets the recommendation's LatencyGuardrailActive True (LatencyBreached),
// as the recommender does when the latency objective is breached.
func (f *fixture) breachLatency(t *testing.T) {
	t.Helper()
	gfr := &gpufracv1.GPUFractionRecommendation{}
	if err := f.c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "web"}, gfr); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&gfr.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionLatencyGuardrailActive, Status: metav1.ConditionTrue,
		Reason: gpufracv1.ReasonLatencyBreached, Message: "p95 latency 2.4s above the objective 2s"})
	if err := f.c.Status().Update(t.Context(), gfr); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) addGPUHPA() {
	f.objs = append(f.objs, &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "web", APIVersion: "apps/v1"},
			MaxReplicas: 10, Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "DCGM_FI_DEV_GPU_UTIL"}, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType}}}}}})
}

func (f *fixture) build() *Updater {
	f.t.Helper()
	f.c = fake.NewClientBuilder().WithScheme(f.scheme).
		WithObjects(append(f.objs, f.gfr)...).
		WithStatusSubresource(&gpufracv1.GPUFractionAutoscaler{}, &gpufracv1.GPUFractionRecommendation{}).
		WithIndex(&gpufracv1.GPUFractionAutoscaler{}, admission.TargetIndexField, admission.IndexAutoscalerTarget).
		WithInterceptorFuncs(f.funcs).Build()
	f.u = New(f.c, f.c, f.cfg)
	f.rec = events.NewFakeRecorder(100)
	f.u.Events = f.rec
	return f.u
}

func (f *fixture) run() {
	f.t.Helper()
	if err := f.u.RunOnce(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) status() *gpufracv1.UpdaterStatus {
	f.t.Helper()
	g := &gpufracv1.GPUFractionAutoscaler{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, g); err != nil {
		f.t.Fatal(err)
	}
	if g.Status.Memory == nil || g.Status.Memory.String() != "1Gi" || len(g.Status.Conditions) != 1 {
		f.t.Errorf("the recommender's status fields changed: %+v", g.Status)
	}
	if g.Status.Updater == nil {
		f.t.Fatal("no status.updater")
	}
	return g.Status.Updater
}

func (f *fixture) livePods() map[string]bool {
	f.t.Helper()
	var l corev1.PodList
	if err := f.c.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		f.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range l.Items {
		out[p.Name] = true
	}
	return out
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// countEvents is how many of evs contain sub.
func countEvents(evs []string, sub string) int {
	n := 0
	for _, e := range evs {
		if strings.Contains(e, sub) {
			n++
		}
	}
	return n
}

func hasEvent(evs []string, sub string) bool {
	for _, e := range evs {
		if strings.Contains(e, sub) {
			return true
		}
	}
	return false
}

func TestRecreateEvictsOneAtATime(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
	f.build()
	f.run()
	if live := f.livePods(); len(live) != 2 || live["web-abc-0"] {
		t.Fatalf("after one cycle pods %v, want the oldest evicted and two left", live)
	}
	st := f.status()
	if st.PodsOutOfDate != 3 || st.LastEvictionTime == nil || st.Verification == nil || len(st.Updates) != 2 {
		t.Fatalf("status %+v", st)
	}
	if st.Verification.Previous[0].Memory.String() != "3Gi" {
		t.Errorf("verification previous %v, want 3Gi", st.Verification.Previous)
	}
	for _, u := range st.Updates {
		if u.SkipReason != SkipInFlight || !strings.Contains(u.Reason, "memory 3Gi above upper bound 1536Mi") {
			t.Errorf("update %+v, want in-flight with the bound in the reason", u)
		}
	}
	if evs := f.events(); !hasEvent(evs, EventEvicted) {
		t.Errorf("events %v", evs)
	}
	// The replacement is awaited: nothing more is evicted until it is ready.
	f.run()
	if live := f.livePods(); len(live) != 2 {
		t.Fatalf("second cycle evicted again without a replacement: %v", live)
	}
}

func TestOffReportsWithoutEvicting(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeOff, gpufracv1.BackendHAMi, 2, 3)
	f.gfa.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "0 3 * * *", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Europe/Berlin"}}
	f.build()
	f.run()
	if len(f.livePods()) != 2 {
		t.Fatal("Off evicted a pod")
	}
	st := f.status()
	if st.PodsOutOfDate != 2 || len(st.Updates) != 2 || st.NextWindowStart == nil || st.BlockedReason != SkipModeOff {
		t.Fatalf("status %+v", st)
	}
	for _, u := range st.Updates {
		if u.Action != gpufracv1.PodUpdateEvict || u.SkipReason != SkipModeOff || !strings.Contains(u.SkipMessage, "would evict") {
			t.Errorf("update %+v", u)
		}
	}
	evs := f.events()
	if !hasEvent(evs, EventWouldUpdate) || !hasEvent(evs, "web-abc-0") {
		t.Errorf("events %v", evs)
	}
	// The same report is not repeated.
	f.run()
	if evs := f.events(); hasEvent(evs, EventWouldUpdate) {
		t.Errorf("WouldUpdate repeated: %v", evs)
	}
}

func TestInitialNeverEvicts(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeInitial, gpufracv1.BackendHAMi, 2, 3)
	f.build()
	f.run()
	if len(f.livePods()) != 2 || f.status().Updates[0].SkipReason != SkipModeInitial {
		t.Fatal("Initial evicted or misreported")
	}
}

func TestGates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(f *fixture)
		reason string
	}{
		{name: "single replica without opt-in", setup: func(f *fixture) {}, reason: SkipMinReplicas},
		{name: "warm-up", setup: func(f *fixture) { f.cfg.WarmUp = time.Hour }, reason: SkipWarmUp},
		{name: "admission Lease stale", setup: func(f *fixture) {
			for _, o := range f.objs {
				if l, ok := o.(*coordinationv1.Lease); ok {
					l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))
				}
			}
		}, reason: SkipAdmissionUnavailable},
		{name: "window closed", setup: func(f *fixture) {
			f.gfa.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: fmt.Sprintf("0 %d * * *", (time.Now().UTC().Hour()+2)%24), Duration: metav1.Duration{Duration: time.Hour}}}
		}, reason: SkipWindowClosed},
		{name: "pdb", setup: func(f *fixture) {
			f.funcs.SubResourceCreate = func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
				err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
				err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: "DisruptionBudget", Message: "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}}
				return err
			}
		}, reason: SkipPDB},
		{name: "low confidence", setup: func(f *fixture) { f.gfr.Status.ConfidencePercent = ptr.To[int32](20) }, reason: SkipLowConfidence},
		{name: "an exporter down: no shrink on the kept recommendation", setup: func(f *fixture) {
			meta.SetStatusCondition(&f.gfr.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionMetricsUnavailable, Status: metav1.ConditionTrue,
				Reason: gpufracv1.ReasonExporterDown, Message: "scrape target dcgm/10.0.0.9:9400 is down"})
		}, reason: SkipMetricsUnavailable},
		{name: "guardrail near: no shrink", setup: func(f *fixture) {
			meta.SetStatusCondition(&f.gfr.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionLatencyGuardrailActive, Status: metav1.ConditionTrue, Reason: gpufracv1.ReasonLatencyNear})
		}, reason: SkipGuardrail},
		{name: "GPU HPA holds compute", setup: func(f *fixture) {
			f.setTarget("3Gi", "2Gi", "4Gi")
			f.gfr.Status.ContainerRecommendations[0].Target.Compute = q("100m")
			f.gfr.Status.ContainerRecommendations[0].UpperBound.Compute = q("150m")
			f.addGPUHPA()
		}, reason: SkipComputeHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replicas := 2
			if tc.name == "single replica without opt-in" {
				replicas = 1
			}
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, replicas, 3)
			tc.setup(f)
			f.build()
			f.run()
			if len(f.livePods()) != replicas {
				t.Fatalf("evicted although %s", tc.reason)
			}
			st := f.status()
			if st.BlockedReason != tc.reason || len(st.Updates) == 0 || st.Updates[0].SkipReason != tc.reason {
				t.Fatalf("blocked %q (%s), updates %+v; want %s", st.BlockedReason, st.BlockedMessage, st.Updates, tc.reason)
			}
			t.Logf("%s: %s", st.BlockedReason, st.BlockedMessage)
			switch tc.reason {
			case SkipPDB:
				if !strings.Contains(st.BlockedMessage, "web-pdb") {
					t.Errorf("PDB message %q does not name the budget", st.BlockedMessage)
				}
			case SkipComputeHeld:
				c := meta.FindStatusCondition(st.Conditions, gpufracv1.UpdaterConditionComputeShrinkHeld)
				if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "DCGM_FI_DEV_GPU_UTIL") {
					t.Errorf("ComputeShrinkHeld %+v", c)
				}
			}
		})
	}
}

func TestSingleReplicaOptIn(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 1, 3)
	f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
	f.build()
	f.run()
	if len(f.livePods()) != 0 {
		t.Fatal("single replica not evicted with minReplicas 1")
	}
}

func TestRateLimitAcrossWorkload(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 6, 3)
	f.cfg.EvictionRate, f.cfg.EvictionBurst, f.cfg.MaxInFlight = 0.001, 2, 1
	f.build()
	f.run()
	if n := len(f.livePods()); n != 4 {
		t.Fatalf("%d pods left, want 4 (burst 2)", n)
	}
	st := f.status()
	for _, u := range st.Updates {
		if u.SkipReason != SkipRateLimited {
			t.Errorf("update %+v, want rate-limited", u)
		}
	}
}

func TestRollbackAfterLatencyBreach(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 3)
	f.build()
	f.run() // shrinks web-abc-0 (3Gi → 1Gi)
	st := f.status()
	if st.Verification == nil {
		t.Fatal("no verification after a shrink")
	}
	// The replacement runs with 1Gi; then the latency objective is breached.
	ctx := context.Background()
	f.createReplacement(t)
	f.breachLatency(t)
	f.events()
	f.run()
	st = f.status()
	if st.Floor == nil || st.Floor.Memory == nil || st.Floor.Memory.String() != "3Gi" || st.Verification != nil || !strings.Contains(st.Floor.Reason, "latency objective breached") {
		t.Fatalf("floor %+v verification %+v", st.Floor, st.Verification)
	}
	if c := meta.FindStatusCondition(st.Conditions, gpufracv1.UpdaterConditionRolledBack); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonLatencyBreach {
		t.Errorf("RolledBack condition %+v", c)
	}
	if evs := f.events(); !hasEvent(evs, EventRolledBack) {
		t.Errorf("no RolledBack event: %v", evs)
	}
	// The recommendation does not honour the floor yet: the 1Gi pod waits.
	if !f.livePods()["web-abc-new"] {
		t.Fatal("evicted before the recommendation reached the floor")
	}
	var waiting bool
	for _, u := range st.Updates {
		if u.Pod == "web-abc-new" && u.SkipReason == SkipAwaitingFloor {
			waiting = true
		}
	}
	if !waiting {
		t.Errorf("updates %+v: want web-abc-new awaiting-floor", st.Updates)
	}
	// The recommender honours the floor (target 3Gi); the window is closed, but the
	// rollback is urgent.
	gfr := &gpufracv1.GPUFractionRecommendation{}
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, gfr); err != nil {
		t.Fatal(err)
	}
	gfr.Status.ContainerRecommendations[0].Target.Memory = q("3Gi")
	gfr.Status.ContainerRecommendations[0].LowerBound.Memory = q("2Gi")
	gfr.Status.ContainerRecommendations[0].UpperBound.Memory = q("4Gi")
	if err := f.c.Status().Update(ctx, gfr); err != nil {
		t.Fatal(err)
	}
	gfa := &gpufracv1.GPUFractionAutoscaler{}
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, gfa); err != nil {
		t.Fatal(err)
	}
	gfa.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "0 0 1 1 *", Duration: metav1.Duration{Duration: time.Minute}}}
	if err := f.c.Update(ctx, gfa); err != nil {
		t.Fatal(err)
	}
	f.run()
	if f.livePods()["web-abc-new"] {
		t.Fatalf("the shrunk pod was not replaced for the rollback; status %+v", f.status())
	}
	if evs := f.events(); !hasEvent(evs, "roll back to the floor") {
		t.Errorf("events %v", evs)
	}
	if st := f.status(); st.ResizeWindowOpen || st.Floor == nil {
		t.Errorf("status %+v", st)
	}
}

func TestRollbackAfterRestart(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 1)
	started := time.Now().Add(-time.Minute)
	f.gfa.Status.Updater = &gpufracv1.UpdaterStatus{Verification: &gpufracv1.ShrinkVerification{
		Started: metav1.NewTime(started), Until: metav1.NewTime(started.Add(time.Hour)),
		Previous: []gpufracv1.ContainerAllocation{{ContainerName: "main", Memory: q("3Gi"), Compute: q("250m")}}}}
	f.pods[1].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 1, Reason: "Error", Message: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB", FinishedAt: metav1.NewTime(time.Now())}}}}
	f.setTarget("1Gi", "768Mi", "1536Mi")
	f.build()
	f.run()
	st := f.status()
	if st.Floor == nil || !strings.Contains(st.Floor.Reason, "CUDA out of memory") || !strings.Contains(st.Floor.Reason, "web-abc-1") {
		t.Fatalf("floor %+v", st.Floor)
	}
	if c := meta.FindStatusCondition(st.Conditions, gpufracv1.UpdaterConditionRolledBack); c == nil || c.Reason != ReasonRestartAfterShrink {
		t.Errorf("RolledBack %+v", c)
	}
}

func TestInPlaceAnnotations(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeInPlaceOrRecreate, gpufracv1.BackendAnnotations, 2, 3)
	for _, p := range f.pods {
		p.Annotations[gpufracv1.AnnotationGPUMemory] = "3Gi"
	}
	u := f.build()
	u.InPlace = &MutatorInPlacer{Mutator: admission.NewMutator(f.c, f.scheme, admission.Config{}), Client: f.c}
	f.run()
	if len(f.livePods()) != 2 {
		t.Fatal("in-place mode evicted an annotations pod")
	}
	for _, name := range []string{"web-abc-0", "web-abc-1"} {
		p := &corev1.Pod{}
		if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
			t.Fatal(err)
		}
		rec, err := gpufracv1.ParseApplied(p.Annotations)
		if p.Annotations[gpufracv1.AnnotationGPUMemory] != "1Gi" || err != nil || rec.Container("main").Memory.String() != "1Gi" || rec.RecommendationResourceVersion != f.gfr.ResourceVersion {
			t.Errorf("pod %s annotations %v", name, p.Annotations)
		}
	}
	st := f.status()
	if st.LastInPlaceUpdateTime == nil || st.Verification == nil || st.LastEvictionTime != nil {
		t.Errorf("status %+v", st)
	}
	// A GPU backend under InPlaceOrRecreate is recreated.
	g := newFixture(t, gpufracv1.UpdateModeInPlaceOrRecreate, gpufracv1.BackendHAMi, 2, 3)
	gu := g.build()
	gu.InPlace = &MutatorInPlacer{Mutator: admission.NewMutator(g.c, g.scheme, admission.Config{}), Client: g.c}
	g.run()
	if len(g.livePods()) != 1 {
		t.Errorf("hami pod under InPlaceOrRecreate not recreated: %v", g.livePods())
	}
}

func TestStatusIsUpdaterOnlyMergePatch(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeOff, gpufracv1.BackendHAMi, 1, 3)
	var patches []string
	f.funcs.SubResourcePatch = func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		data, err := patch.Data(obj)
		if err != nil {
			return err
		}
		patches = append(patches, string(data))
		if patch.Type() != types.MergePatchType {
			t.Errorf("patch type %s", patch.Type())
		}
		return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
	}
	f.build()
	f.run()
	f.run() // unchanged: no second write
	if len(patches) != 1 {
		t.Fatalf("%d status patches, want 1: %v", len(patches), patches)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(patches[0]), &m); err != nil {
		t.Fatal(err)
	}
	st, _ := m["status"].(map[string]any)
	if len(m) != 1 || len(st) != 1 || st["updater"] == nil {
		t.Errorf("patch %s touches more than status.updater", patches[0])
	}
}
