package updater

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/statuslease"
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

// An eviction (or, for a not-Ready pod of an autoscaler that opted in, a deletion) that
// answers an error other than a refusal or a changed pod (a timeout, a 5xx) may have
// gone through: the API server removed the pod and the answer was lost. Of four
// out-of-date pods (at most two evicted at once; not-Ready ones one per backoff), a
// lost answer is counted as done, found by reading the pod: as many go as in a cycle
// without errors, never more; a real failure leaves its pod to the retry and the budget
// to the others; an eviction's answer lost while the pod cannot be read either counts
// against the budget.
func TestEvictionErrorsKeepTheBudget(t *testing.T) {
	timeout := apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "create", 1)
	for _, tc := range []struct {
		name     string
		unready  bool  // the pods crash-loop, replaced by deletion (AnnotationReplaceUnready)
		lose     bool  // the first eviction or deletion answers timeout
		removed  bool  // the API server removes the pod before that answer
		readErr  error // reading the pod after the error fails with it
		wantLive []string
		wantDone int // Evicted (or ReplacedUnready) events on the autoscaler
	}{
		{"no error", false, false, true, nil, []string{"web-abc-2", "web-abc-3"}, 2},
		{"answer lost after the eviction", false, true, true, nil, []string{"web-abc-2", "web-abc-3"}, 2},
		{"eviction failed", false, true, false, nil, []string{"web-abc-0", "web-abc-3"}, 2},
		{"answer lost and the pod unreadable", false, true, true, apierrors.NewServiceUnavailable("etcd"), []string{"web-abc-2", "web-abc-3"}, 1},
		{"not Ready: no error", true, false, true, nil, []string{"web-abc-1", "web-abc-2", "web-abc-3"}, 1},
		{"not Ready: answer lost after the deletion", true, true, true, nil, []string{"web-abc-1", "web-abc-2", "web-abc-3"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 4, 3)
			if tc.unready {
				for _, p := range f.pods {
					crashLooping(p, f.now)
				}
				f.gfa.Annotations = map[string]string{AnnotationReplaceUnready: "true"}
				f.cfg.RetryBackoff = time.Minute
			}
			first, readFails := tc.lose, false
			// do removes the pod (do) and answers, the first time, as the case says.
			answer := func(do func() error) error {
				if !first {
					return do()
				}
				first = false
				if tc.removed {
					if err := do(); err != nil {
						return err
					}
				}
				readFails = tc.readErr != nil
				return timeout
			}
			f.funcs.SubResourceCreate = func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
				return answer(func() error { return c.SubResource(sub).Create(ctx, obj, subObj, opts...) })
			}
			f.funcs.Delete = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				return answer(func() error { return c.Delete(ctx, obj, opts...) })
			}
			f.funcs.Get = func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.Pod); ok && readFails {
					readFails = false
					return tc.readErr
				}
				return c.Get(ctx, key, obj, opts...)
			}
			f.build()
			f.u.Now = func() time.Time { return f.now }
			f.run()
			var live []string
			for name := range f.livePods() {
				live = append(live, name)
			}
			sort.Strings(live)
			if strings.Join(live, ",") != strings.Join(tc.wantLive, ",") {
				t.Errorf("live pods %v, want %v", live, tc.wantLive)
			}
			// One event on the pod and one on the autoscaler, which names the pod.
			evs := f.events()
			if n := countEvents(evs, EventEvicted+" pod ") + countEvents(evs, EventReplacedUnready+" pod "); n != tc.wantDone {
				t.Errorf("%d Evicted or ReplacedUnready events on the autoscaler, want %d: %q", n, tc.wantDone, evs)
			}
		})
	}
}

// A recommendation the admission webhook would not write (a memory target above one
// GPU of the updater's and the webhook's --gpu-memory, as when the recommender was
// given a larger GPU; not positive; compute above one GPU) admits every replacement
// unchanged: no pod that already is as the webhook admits it is replaced towards it (an
// eviction every --stuck-backoff, for nothing), and status.updater says why. A pod
// holding a fraction below a memory target above one GPU is replaced: it comes back
// with the whole GPU it asks for, the protective direction, and is then in date. A
// writable one still replaces.
func TestUnwritableRecommendationEvictsNothing(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		podGi                 int64
		target, lower, upper  string
		compute               string
		wantLive              int
		wantBlocked, wantText string
	}{
		{"writable", 3, "1Gi", "768Mi", "1536Mi", "250m", 2, "", ""},
		{"memory above one GPU, pods hold whole GPUs", 80, "100Gi", "90Gi", "110Gi", "250m", 3, SkipNoRecommendation, "memory target 100Gi of container main exceeds one GPU (80Gi)"},
		{"memory above one GPU, pods hold fractions", 3, "100Gi", "90Gi", "110Gi", "250m", 2, "", ""},
		{"memory above one GPU and compute above one GPU", 3, "100Gi", "90Gi", "110Gi", "1500m", 3, SkipNoRecommendation, "compute target 1500m of container main is outside 0–1 GPU"},
		{"memory not positive", 3, "0", "0", "0", "250m", 3, SkipNoRecommendation, "memory target 0 of container main is not positive"},
		{"compute above one GPU", 3, "1Gi", "768Mi", "1536Mi", "1500m", 3, SkipNoRecommendation, "compute target 1500m of container main is outside 0–1 GPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, tc.podGi)
			f.setTarget(tc.target, tc.lower, tc.upper)
			cr := &f.gfr.Status.ContainerRecommendations[0]
			cr.Target.Compute, cr.SharingMode = q(tc.compute), gpufracv1.SharingModeMPS
			f.build()
			f.run()
			if n := len(f.livePods()); n != tc.wantLive {
				t.Errorf("%d pods left, want %d", n, tc.wantLive)
			}
			if st := f.status(); st.BlockedReason != tc.wantBlocked || !strings.Contains(st.BlockedMessage, tc.wantText) {
				t.Errorf("blocked %q %q, want %q naming %q", st.BlockedReason, st.BlockedMessage, tc.wantBlocked, tc.wantText)
			}
		})
	}
}

// An autoscaler retargeted from Deployment api to web, read before the recommender's
// next cycle (or with the recommender down): its recommendation still holds api's
// values, made for api's pods (spec.targetRef api). web's pods are not replaced towards
// them (the webhook would not write them either, contract.Retargeted; the updater reads
// it as no recommendation, like one of an earlier autoscaler); the same recommendation
// made for web replaces.
func TestRecommendationOfFormerTargetEvictsNothing(t *testing.T) {
	for madeFor, wantLive := range map[string]int{"web": 2, "api": 3} {
		t.Run(madeFor, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
			f.gfr.Spec.TargetRef = f.gfa.Spec.TargetRef
			f.gfr.Spec.TargetRef.Name = madeFor
			f.build()
			f.run()
			if n := len(f.livePods()); n != wantLive {
				t.Errorf("%d pods left, want %d", n, wantLive)
			}
		})
	}
}

// A recommendation orphaned by `kubectl delete gfa web --cascade=orphan` and found by
// the autoscaler web created again (no ownerReference to it; the recommender adopts it
// on its next write) is an earlier autoscaler's until then: no pod is replaced towards
// it, as the webhook would not write it (contract.Applies). Owned by the autoscaler, as
// the recommender creates it, it replaces.
func TestOrphanedRecommendationEvictsNothing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		refs     func(f *fixture) []metav1.OwnerReference
		wantLive int
	}{
		{"owned", func(f *fixture) []metav1.OwnerReference { return f.gfr.OwnerReferences }, 2},
		{"orphaned", func(*fixture) []metav1.OwnerReference { return nil }, 3},
		{"another kind's reference only", func(f *fixture) []metav1.OwnerReference {
			return []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "web", UID: f.gfa.UID, Controller: ptr.To(true)}}
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
			f.gfr.OwnerReferences = tc.refs(f)
			f.build()
			f.run()
			if n := len(f.livePods()); n != tc.wantLive {
				t.Errorf("%d pods left, want %d", n, tc.wantLive)
			}
			if st := f.status(); (st.PodsOutOfDate == 0) != (tc.wantLive == 3) {
				t.Errorf("%d pods out of date, want none: %v", st.PodsOutOfDate, tc.wantLive == 3)
			}
		})
	}
}

// Two workloads out of date under the cluster-wide eviction rate limit (one token per
// cycle, as --eviction-rate 0.1/s with burst 1 and a one-minute --interval give):
// Deployment api, listed first, has a PodDisruptionBudget that refuses every eviction
// (HTTP 429), or two PodDisruptionBudgets selecting its pods, which the Eviction API
// does not support (HTTP 500, "This pod has more than one PodDisruptionBudget"). An
// eviction that did not happen takes no token, so web's pods are still replaced, and
// api is tried once per cycle, not once per pod (a refusal holds the workload; another
// failure only its pod, for --retry-backoff).
func TestRefusedEvictionsTakeNoToken(t *testing.T) {
	for _, tc := range []struct {
		name      string
		refuse    error
		wantCalls int // evictions of api's pods tried in the cycle
	}{
		{"PodDisruptionBudget refuses", apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0), 1},
		{"PodDisruptionBudget refuses, by its cause", &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 429, Reason: metav1.StatusReasonTooManyRequests,
			Message: "Cannot evict pod.", Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget api-pdb needs 3 healthy pods and has 3 currently"}}}}}, 1},
		// The Status the API server answers (pkg/registry/core/pod/storage/eviction.go).
		{"two PodDisruptionBudgets", &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500,
			Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}}, 1},
		// An admission webhook of another product denies evictions of api's pods, the API
		// server fails them, or rejects them: the pod is read back unchanged, nothing was
		// evicted. Before 2026-12-03 each took the cycle's token and every other pod of
		// api was tried too, so web was never replaced.
		{"admission webhook denies", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "api-xyz-0", fmt.Errorf(`admission webhook "evictions.example.com" denied the request: frozen`)), 3},
		{"internal error", apierrors.NewInternalError(fmt.Errorf("etcd leader changed")), 3},
		{"service unavailable", apierrors.NewServiceUnavailable("apiserver shutting down"), 3},
		{"bad request", apierrors.NewBadRequest("eviction: invalid delete options"), 3},
		// API Priority and Fairness throttles the request (HTTP 429 too, no budget
		// involved): a failure, not a refusal (it was reported as pdb).
		{"throttled by API priority and fairness", apierrors.NewTooManyRequests("Too many requests, please try again later.", 1), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
			f.cfg.EvictionRate, f.cfg.EvictionBurst, f.cfg.MaxInFlight = 0.001, 1, 1
			api := f.gfa.DeepCopy()
			api.Name, api.UID, api.Spec.TargetRef.Name = "api", "gfa-api-uid", "api"
			apiRec := f.gfr.DeepCopy()
			apiRec.Name, apiRec.ResourceVersion = "api", ""
			apiRec.OwnerReferences[0].Name, apiRec.OwnerReferences[0].UID = api.Name, api.UID
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api", UID: "dep-api-uid"}}
			rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-xyz", UID: "rs-api-uid", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: dep.UID, Controller: ptr.To(true)}}}}
			f.objs = append(f.objs, api, apiRec, dep, rs)
			for i := range 3 {
				f.addPod(fmt.Sprintf("api-xyz-%d", i), 3, rs)
			}
			apiCalls := 0
			f.funcs.SubResourceCreate = func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
				if strings.HasPrefix(obj.GetName(), "api-") {
					apiCalls++
					return tc.refuse
				}
				return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
			}
			f.build()
			f.run()
			live := f.livePods()
			web := 0
			for name := range live {
				if strings.HasPrefix(name, "web-") {
					web++
				}
			}
			if len(live) != 5 || web != 2 {
				t.Errorf("pods left %v: want one of web's three evicted, all of api's kept", live)
			}
			if apiCalls != tc.wantCalls {
				t.Errorf("%d evictions of api's pods tried in one cycle, want %d", apiCalls, tc.wantCalls)
			}
			// Said on the autoscaler: a refusal as such, another failure as a failure.
			want := EventEvictionRefused
			if tc.wantCalls > 1 {
				want = EventEvictionFailed
			}
			if evs := f.events(); !hasEvent(evs, want) {
				t.Errorf("no %s event: %q", want, evs)
			}
			wantSkip := SkipPDB
			if tc.wantCalls > 1 {
				wantSkip = SkipEvictionError
			}
			var apiNow gpufracv1.GPUFractionAutoscaler
			if err := f.c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "api"}, &apiNow); err != nil {
				t.Fatal(err)
			}
			if st := apiNow.Status.Updater; st == nil || st.BlockedReason != wantSkip {
				t.Errorf("api's status %+v: want blocked %s", st, wantSkip)
			}
		})
	}
}

// A resize window that does not parse (admitted while the validating webhook was down:
// February 30, a cron of six fields) holds every change the windows govern
// (window-invalid), but windows do not govern protective growth: pods at 1Gi whose
// observed peak is near it grow to the 3Gi target at once, as without windows, while a
// shrink waits for the windows to be fixed; status.updater says window-invalid either way.
func TestInvalidWindowKeepsProtectiveGrowth(t *testing.T) {
	for _, tc := range []struct {
		name         string
		podGi, live  int
		observedPeak string
	}{
		{"memory near its limit: urgent growth", 1, 2, "1000Mi"},
		{"a shrink waits", 5, 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, int64(tc.podGi))
			f.setTarget("3Gi", "2Gi", "4Gi")
			if tc.observedPeak != "" {
				f.gfr.Status.ContainerRecommendations[0].ObservedPeakMemory = q(tc.observedPeak)
			}
			f.gfa.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "0 2 30 2 *", Duration: metav1.Duration{Duration: time.Hour}}}
			f.build()
			f.run()
			if n := len(f.livePods()); n != tc.live {
				t.Errorf("%d pods left, want %d", n, tc.live)
			}
			if st := f.status(); st.BlockedReason != SkipWindowInvalid {
				t.Errorf("blocked %q %q, want %s", st.BlockedReason, st.BlockedMessage, SkipWindowInvalid)
			}
		})
	}
}

// TestStaleRecommenderHoldsAllButProtectiveGrowth: with --recommender-lease-max-age, an
// autoscaler whose recommender instance has not renewed its status Lease (down, without
// a leader, or failing) gets no shrink towards a recommendation nobody keeps current,
// while a pod near its limit still grows (urgent); a fresh Lease lets the shrink go. The
// Lease is the instance's that the autoscaler names (spec.recommenders), not another's.
func TestStaleRecommenderHoldsAllButProtectiveGrowth(t *testing.T) {
	lease := func(name string, age time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: sysNS, Name: statuslease.RecommenderLeaseName(name)},
			Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-age)))}}
	}
	for _, tc := range []struct {
		name         string
		podGi, live  int
		observedPeak string
		shard        string
		leases       []*coordinationv1.Lease
		blocked      string
	}{
		{"no Lease: a shrink waits", 5, 3, "", "", nil, SkipRecommenderStale},
		{"stale Lease: a shrink waits", 5, 3, "", "", []*coordinationv1.Lease{lease("default", 11*time.Minute)}, SkipRecommenderStale},
		{"another instance's fresh Lease: a shrink waits", 5, 3, "", "team-a", []*coordinationv1.Lease{lease("default", 0)}, SkipRecommenderStale},
		{"stale Lease: memory near its limit grows (urgent)", 1, 2, "1000Mi", "", nil, ""},
		{"fresh Lease: the shrink goes ahead", 5, 2, "", "team-a", []*coordinationv1.Lease{lease("team-a", time.Minute)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, int64(tc.podGi))
			f.setTarget("3Gi", "2Gi", "4Gi")
			if tc.observedPeak != "" {
				f.gfr.Status.ContainerRecommendations[0].ObservedPeakMemory = q(tc.observedPeak)
			}
			if tc.shard != "" {
				f.gfa.Spec.Recommenders = []gpufracv1.RecommenderName{{Name: tc.shard}}
			}
			for _, l := range tc.leases {
				f.objs = append(f.objs, l)
			}
			f.cfg.RecommenderLeaseMaxAge = 10 * time.Minute
			f.build()
			f.run()
			if n := len(f.livePods()); n != tc.live {
				t.Errorf("%d pods left, want %d", n, tc.live)
			}
			if st := f.status(); tc.blocked != "" && st.BlockedReason != tc.blocked {
				t.Errorf("blocked %q %q, want %s", st.BlockedReason, st.BlockedMessage, tc.blocked)
			}
			shard := tc.shard
			if shard == "" {
				shard = gpufracv1.DefaultRecommenderName
			}
			fresh := len(tc.leases) > 0 && tc.leases[0].Name == statuslease.RecommenderLeaseName(shard) && tc.blocked == ""
			if got, want := testutil.ToFloat64(recommenderAvailable.WithLabelValues(shard)), map[bool]float64{true: 1, false: 0}[fresh]; got != want {
				t.Errorf("gpufrac_updater_recommender_available{recommender=%q} = %v, want %v", shard, got, want)
			}
			if tc.blocked == SkipRecommenderStale && !slices.ContainsFunc(f.events(), func(e string) bool { return strings.Contains(e, "updates blocked (recommender-stale)") }) {
				t.Errorf("no UpdatesBlocked event for recommender-stale")
			}
		})
	}
}

// TestMetricsRegistered: every metric of docs/updater.md's table without labels is
// served once Register has run (gpufrac_updater_pods_record_invalid was documented but
// never registered, so the binary did not export it).
func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, mf := range mfs {
		served[mf.GetName()] = true
	}
	doc, err := os.ReadFile("../docs/updater.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range regexp.MustCompile("(?m)^\\| `(gpufrac_updater_[a-z_]+)` \\| \\|").FindAllStringSubmatch(string(doc), -1) {
		n++
		if !served[m[1]] {
			t.Errorf("%s is documented but not registered", m[1])
		}
	}
	if n < 5 {
		t.Errorf("found %d unlabelled metrics in docs/updater.md's table, want the table's rows", n)
	}
}

// The webhook leaves every replacement unchanged while its Lease is fresh (the
// namespace is outside its namespaceSelector, its flags differ from the updater's): each
// replacement comes back holding the whole GPU, out of date again. The updater pauses
// the workload after each such replacement, for --stuck-backoff and then twice as long
// each time, up to MaxStuckBackoff: over twelve hours of five-minute cycles it evicts a
// handful of pods, not one every --stuck-backoff (21 before). A replacement that comes
// back with its fraction starts the pauses over.
func TestUnchangedReplacementsPauseLonger(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 2, 3) // 3Gi, upper bound 1536Mi: shrink
	f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
	f.build()
	now := f.now
	f.u.Now = func() time.Time { return now }
	ctx := t.Context()
	next := 0
	replace := func(record bool) {
		live := f.livePods()
		for len(live) < 2 {
			p := f.pods[1].DeepCopy()
			p.Name, p.UID, p.ResourceVersion = fmt.Sprintf("web-new-%d", next), types.UID(fmt.Sprintf("uid-new-%d", next)), ""
			p.CreationTimestamp = metav1.NewTime(now)
			p.Annotations = map[string]string{}
			if record {
				p.Annotations[gpufracv1.AnnotationApplied] = `{"backend":"hami","autoscaler":"web","containers":[{"name":"main","memory":"1Gi","compute":"250m"}]}`
			}
			next++
			if err := f.c.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			live[p.Name] = true
		}
	}
	var at []time.Duration
	for range 12 * 12 {
		before := len(f.livePods())
		f.run()
		if len(f.livePods()) < before {
			at = append(at, now.Sub(f.now))
		}
		now = now.Add(5 * time.Minute)
		replace(false)
	}
	if len(at) < 3 || len(at) > 6 {
		t.Fatalf("evictions at %v in 12h: want 3 to 6 (pauses of 30m, 1h, 2h, 4h, 8h)", at)
	}
	for i := 2; i < len(at); i++ {
		if at[i]-at[i-1] < 2*(at[i-1]-at[i-2])-10*time.Minute {
			t.Errorf("evictions at %v: the pause did not double", at)
		}
	}
	// A replacement with its fraction starts the pauses over: once the pause has ended
	// and a pod was evicted, a replacement with its fraction, then one without (for the
	// other pod, evicted next), pauses for --stuck-backoff again.
	for i := 0; i < int(MaxStuckBackoff/(5*time.Minute))+2 && len(f.livePods()) == 2; i++ {
		now = now.Add(5 * time.Minute)
		f.run()
	}
	if len(f.livePods()) != 1 {
		t.Fatal("no eviction within MaxStuckBackoff")
	}
	now = now.Add(5 * time.Minute)
	replace(true)
	f.run() // settles it, and evicts the other pod (whole GPU)
	if len(f.livePods()) != 1 {
		t.Fatalf("pods %v: want the other pod evicted once a replacement came back with its fraction", f.livePods())
	}
	now = now.Add(5 * time.Minute)
	replace(false)
	f.run()
	if st := f.status(); st.BlockedReason != SkipReplacementUnchanged || !strings.Contains(st.BlockedMessage, "1 in a row") ||
		!strings.Contains(st.BlockedMessage, fmt.Sprintf("paused for %v", f.cfg.WithDefaults().StuckBackoff)) {
		t.Errorf("blocked %s: %s; want paused for --stuck-backoff, the first in a row", st.BlockedReason, st.BlockedMessage)
	}
}

// A ReplicaSet whose replacement pods are never created (a ResourceQuota or another
// product's admission webhook refuses them: FailedCreate) loses a pod with every
// eviction. Once --replacement-timeout passed, the replacements the updater awaited no
// longer counted in flight, so the budget saw fewer pods and nothing in flight and
// evicted more: a workload of n went down to minReplicas − 1. A replacement its
// controller still lacks (fewer pods than a ReplicaSet's or StatefulSet's spec.replicas,
// a DaemonSet's status.desiredNumberScheduled) stays in flight past the timeout, and
// status.updater says so; when the workload was scaled down meanwhile, or the
// replacement appears, the budget is freed as before.
func TestReplacementNeverCreatedStaysInFlight(t *testing.T) {
	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet"} {
		for _, tc := range []struct {
			name      string
			n         int
			scaleDown bool // the controller wants only the pods left after the first evictions
			created   bool // the replacements appear (Ready) after the timeout
			wantLive  int  // pods after the cycles past the timeout
		}{
			{"4 pods, never created", 4, false, false, 2},
			{"6 pods, never created", 6, false, false, 3},
			{"3 pods, never created", 3, false, false, 2},
			{"4 pods, scaled down", 4, true, false, 1},
			{"6 pods, scaled down", 6, true, false, 2},
			{"4 pods, created late", 4, false, true, 2},
		} {
			t.Run(kind+": "+tc.name, func(t *testing.T) {
				f, ctrl, want := controlledFixture(t, kind, tc.n)
				now := f.now
				left := f.evictFirst(t, tc.n, &now)
				if tc.scaleDown {
					f.setWanted(t, ctrl, want, int32(left))
				}
				timeout := f.cfg.WithDefaults().ReplacementTimeout
				now = now.Add(timeout + time.Minute)
				if tc.created {
					f.createReplacements(t, tc.n-left, now)
				}
				for range 3 {
					f.run()
					now = now.Add(timeout + time.Minute)
				}
				old := f.oldPodsLeft()
				if tc.created {
					if old != 0 {
						t.Errorf("%d old pods left after the replacements appeared, want all replaced", old)
					}
					return
				}
				if old != tc.wantLive {
					st := f.status()
					t.Fatalf("%d pods left, want %d (blocked %s: %s)", old, tc.wantLive, st.BlockedReason, st.BlockedMessage)
				}
				if !tc.scaleDown {
					st := f.status()
					if st.BlockedReason != SkipInFlight || !strings.Contains(st.BlockedMessage, "not created") {
						t.Errorf("blocked %s: %q; want in-flight naming the replacement not created", st.BlockedReason, st.BlockedMessage)
					}
					if !hasEvent(f.events(), EventReplacementNotCreated) {
						t.Error("no ReplacementNotCreated event")
					}
				}
			})
		}
	}
}

// The status write of the cycle that shrank a pod fails (a conflict, a 422, a timeout),
// once or more. What that cycle decided must not be lost with it: the next cycles start
// from what the updater decided, not from the last status it managed to write. Before,
// they carried over the older status, without the shrink's verification, so the
// latency breach after the shrink rolled nothing back (no floor, the pod left at 1Gi).
func TestFailedStatusWriteKeepsTheVerification(t *testing.T) {
	gr := schema.GroupResource{Group: gpufracv1.GroupVersion.Group, Resource: "gpufractionautoscalers"}
	for _, tc := range []struct {
		name  string
		err   error
		fails int // status writes that fail, from the first
	}{
		{"conflict once", apierrors.NewConflict(gr, "web", fmt.Errorf("modified")), 1},
		{"invalid once", apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "GPUFractionAutoscaler"}, "web", nil), 1},
		{"timeout twice", apierrors.NewServerTimeout(gr, "patch", 1), 2},
		{"conflict three times", apierrors.NewConflict(gr, "web", fmt.Errorf("modified")), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 1, 3)
			f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1) // one shrink, nothing else to evict
			fails := tc.fails
			f.funcs.SubResourcePatch = func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if fails > 0 {
					fails--
					return tc.err
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			}
			f.build()
			ctx := t.Context()
			if err := f.u.RunOnce(ctx); err == nil {
				t.Fatal("the status write did not fail")
			}
			if f.livePods()["web-abc-0"] {
				t.Fatal("web-abc-0 not shrunk")
			}
			f.createReplacement(t)
			for fails > 0 {
				_ = f.u.RunOnce(ctx) // the writes still failing
			}
			f.run()
			if st := f.status(); st.Verification == nil || st.LastEvictionTime == nil {
				t.Fatalf("verification %+v, last eviction %v: the shrink's record was lost with its status write", st.Verification, st.LastEvictionTime)
			}
			f.breachLatency(t)
			f.run()
			if st := f.status(); st.Floor == nil || st.Floor.Memory == nil || st.Floor.Memory.String() != "3Gi" {
				t.Fatalf("floor %+v after a breach within the verification: want 3Gi", st.Floor)
			}
		})
	}
}

// A pod stuck Terminating (a finalizer nobody removes, its node gone) counted in flight
// for ever: a workload of two Ready pods and one such pod, whose ReplicaSet had long
// replaced it, was never updated again (one in flight, at most one at once). A pod
// terminating past its deadline (deletionTimestamp, which includes the grace period) by
// more than --replacement-timeout no longer counts once its ReplicaSet or StatefulSet
// has its spec.replicas of other pods; while it has not (a StatefulSet recreates the
// pod only once it is gone) it still does, and the in-flight message names it. One
// terminating within the timeout whose ReplicaSet has its Ready pods counts as nothing
// unavailable either (the budget counts per controller, as a PodDisruptionBudget does).
func TestPodStuckTerminating(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     string // the pods' controller
		replicas int32  // its spec.replicas
		past     time.Duration
		evicted  bool
		wantNote bool // the in-flight message names the stuck pod
	}{
		{"ReplicaSet replaced it, stuck an hour", "ReplicaSet", 2, time.Hour, true, false},
		{"ReplicaSet replaced it, stuck a day", "ReplicaSet", 2, 24 * time.Hour, true, false},
		// Its ReplicaSet has its two Ready pods: nothing is unavailable, as a
		// PodDisruptionBudget counts (before 2026-12-03 a terminating pod counted in
		// flight until --replacement-timeout past its deadline).
		{"ReplicaSet replaced it, terminating a minute", "ReplicaSet", 2, time.Minute, true, false},
		{"ReplicaSet short of a pod", "ReplicaSet", 3, time.Hour, false, true},
		{"StatefulSet waits for it", "StatefulSet", 3, time.Hour, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
			var rs *appsv1.ReplicaSet
			for _, o := range f.objs {
				if r, ok := o.(*appsv1.ReplicaSet); ok {
					rs = r
				}
			}
			rs.Spec.Replicas = ptr.To(tc.replicas)
			if tc.kind == "StatefulSet" {
				sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "sts-uid"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(tc.replicas)}}
				f.objs = append(f.objs, sts)
				f.gfa.Spec.TargetRef.Kind = "StatefulSet"
				for _, p := range f.pods {
					p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: sts.UID, Controller: ptr.To(true)}}
				}
			}
			stuck := f.pods[0]
			stuck.DeletionTimestamp = ptr.To(metav1.NewTime(f.now.Add(-tc.past)))
			stuck.Finalizers = []string{"example.com/hold"}
			f.build()
			f.u.Now = func() time.Time { return f.now }
			f.run()
			live := f.livePods()
			if got := !live["web-abc-1"] || !live["web-abc-2"]; got != tc.evicted {
				st := f.status()
				t.Fatalf("evicted %v, want %v (blocked %s: %s)", got, tc.evicted, st.BlockedReason, st.BlockedMessage)
			}
			if !tc.evicted {
				st := f.status()
				if st.BlockedReason != SkipInFlight || strings.Contains(st.BlockedMessage, "web-abc-0") != tc.wantNote {
					t.Errorf("blocked %s: %q; naming the stuck pod: want %v", st.BlockedReason, st.BlockedMessage, tc.wantNote)
				}
			}
		})
	}
}

// A replacement left Pending (unschedulable after all, an image that does not pull)
// counts in flight for as long as it stays, and holds the workload's other pods: the
// in-flight message said only "1 pod(s) being replaced", not which pod or why. It now
// names a pod not Ready for longer than --replacement-timeout, with the scheduler's or
// the kubelet's reason; one younger is not named.
func TestPendingReplacementNamed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		age    time.Duration
		status corev1.PodStatus
		want   string // in the in-flight message ("": the pod not named)
	}{
		{"unschedulable for an hour", time.Hour, corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}}}, "0/3 nodes are available"},
		{"image not pulled for a day", 24 * time.Hour, corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image \"x\""}}}}}, "ImagePullBackOff"},
		{"unschedulable for a minute", time.Minute, corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available"}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
			pend := f.pods[2]
			pend.Name = "web-abc-pending"
			pend.CreationTimestamp = metav1.NewTime(f.now.Add(-tc.age))
			pend.Status = tc.status
			f.build()
			f.u.Now = func() time.Time { return f.now }
			f.run()
			if live := f.livePods(); len(live) != 3 {
				t.Fatalf("pods %v: want none evicted (one in flight, at most one at once)", live)
			}
			st := f.status()
			named := strings.Contains(st.BlockedMessage, "web-abc-pending")
			if st.BlockedReason != SkipInFlight || named != (tc.want != "") || !strings.Contains(st.BlockedMessage, tc.want) {
				t.Errorf("blocked %s: %q; want in-flight naming the pending pod: %v (%q)", st.BlockedReason, st.BlockedMessage, tc.want != "", tc.want)
			}
		})
	}
}

// webhookResponse runs the admission webhook's pod handler (admission.Mutator, with
// its defaults, reading f's API) on a new pod of ReplicaSet web-abc with containers cs,
// as the ReplicaSet controller creates a replacement.
func (f *fixture) webhookResponse(t *testing.T, cs ...corev1.Container) ctrladmission.Response {
	t.Helper()
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-abc-", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-uid", Controller: ptr.To(true)}}}}
	for _, c := range cs {
		pod.Spec.Containers = append(pod.Spec.Containers, *c.DeepCopy())
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	m := admission.NewMutator(f.c, f.scheme, admission.Config{})
	return m.Handle(context.Background(), ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "r", Namespace: ns,
		Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtime.RawExtension{Raw: raw}}})
}

// An autoscaler with a negative spec.backend.memoryOverhead (the validating webhook
// rejects it; one created while it was down, or before the check, gets through): the
// admission webhook admits every pod of it unchanged, so no pod is replaced towards its
// recommendation (before, the updater read the overhead as 0 and evicted a pod every
// --stuck-backoff, each replacement coming back as the pod was), and status.updater
// says why.
func TestNegativeOverheadEvictsNothing(t *testing.T) {
	f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
	f.gfa.Spec.Backend.MemoryOverhead = q("-1Gi")
	f.build()
	if resp := f.webhookResponse(t, f.pods[0].Spec.Containers...); !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("webhook: allowed %v patches %v, want the pod admitted unchanged", resp.Allowed, resp.Patches)
	}
	f.run()
	if n := len(f.livePods()); n != 3 {
		t.Errorf("%d pods left, want 3: a replacement would come back unchanged", n)
	}
	if st := f.status(); st.BlockedReason != SkipNoRecommendation || !strings.Contains(st.BlockedMessage, "memoryOverhead -1Gi is negative") {
		t.Errorf("blocked %q %q, want %s naming the negative overhead", st.BlockedReason, st.BlockedMessage, SkipNoRecommendation)
	}
}

// A pod of a shape the admission webhook refuses whatever the recommendation says is
// not replaced: its replacement would come back unchanged. HAMi pods whose container
// main holds a fraction and whose container aux asks for 2 GPUs, both with
// recommendations: the webhook admits a replacement unchanged (UnsafeMultiGPU: it writes
// fractions of one GPU only), so the shrink of main (3Gi to 1Gi) evicts nothing, and the
// pods' updates say why (SkipReplacementUnchanged). Before, the updater evicted a pod,
// and again after each --stuck-backoff. The control: aux without a recommendation is
// left alone by the webhook, which then writes main's fraction, and a pod is evicted.
func TestWebhookRefusedShapeEvictsNothing(t *testing.T) {
	for _, tc := range []struct {
		name         string
		auxRecommend bool
		wantEvicted  bool
	}{
		{"aux recommended: the webhook refuses the pod", true, false},
		{"aux not recommended: the webhook writes main's fraction", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, 3)
			for _, p := range f.pods {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "aux", Image: "x",
					Resources: corev1.ResourceRequirements{Limits: limits("nvidia.com/gpu", "2")}})
			}
			if tc.auxRecommend {
				aux := *f.gfr.Status.ContainerRecommendations[0].DeepCopy()
				aux.ContainerName = "aux"
				f.gfr.Status.ContainerRecommendations = append(f.gfr.Status.ContainerRecommendations, aux)
			}
			f.build()
			resp := f.webhookResponse(t, f.pods[0].Spec.Containers...)
			if refused := resp.Allowed && len(resp.Patches) == 0; refused == tc.wantEvicted {
				t.Fatalf("webhook: allowed %v, %d patches; want it to refuse the pod: %v", resp.Allowed, len(resp.Patches), !tc.wantEvicted)
			}
			f.run()
			if evicted := len(f.livePods()) < 3; evicted != tc.wantEvicted {
				t.Fatalf("pods %v: evicted %v, want %v", f.livePods(), evicted, tc.wantEvicted)
			}
			if tc.wantEvicted {
				return
			}
			st := f.status()
			if len(st.Updates) == 0 {
				t.Fatal("no pod listed as out of date")
			}
			for _, u := range st.Updates {
				if u.SkipReason != SkipReplacementUnchanged || !strings.Contains(u.SkipMessage, backend.UnsafeMultiGPU) {
					t.Errorf("pod %s: skip %s %q, want %s naming %s", u.Pod, u.SkipReason, u.SkipMessage, SkipReplacementUnchanged, backend.UnsafeMultiGPU)
				}
			}
		})
	}
}

// TestNamespaceNotSelectedHoldsAllButProtectiveGrowth: an autoscaler whose recommender
// instance leaves its namespace out (--shard-namespace-selector; the instance marks its
// recommendation ConfigUnsupported NamespaceNotSelected) has a recommendation nobody
// keeps current while that instance's Lease stays fresh: no shrink towards it, with the
// Lease check on or off, while a pod near its limit still grows (urgent). An autoscaler
// the instance selects (ConfigUnsupported False) is shrunk as before.
func TestNamespaceNotSelectedHoldsAllButProtectiveGrowth(t *testing.T) {
	fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: sysNS, Name: statuslease.RecommenderLeaseName("b")},
		Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Minute)))}}
	notSelected := metav1.Condition{Type: gpufracv1.ConditionConfigUnsupported, Status: metav1.ConditionTrue, Reason: gpufracv1.ReasonNamespaceNotSelected,
		Message: `spec.recommenders names recommender "b", whose --shard-namespace-selector "shard=b" leaves namespace ml out`}
	selected := metav1.Condition{Type: gpufracv1.ConditionConfigUnsupported, Status: metav1.ConditionFalse, Reason: "ConfigSupported", Message: "target resolved"}
	for _, tc := range []struct {
		name         string
		podGi, live  int
		observedPeak string
		leaseCheck   bool
		cond         metav1.Condition
		blocked      string
	}{
		{"not selected, fresh Lease: a shrink from 5Gi waits", 5, 3, "", true, notSelected, SkipNamespaceNotSelected},
		{"not selected, fresh Lease: a shrink from 6Gi waits", 6, 3, "", true, notSelected, SkipNamespaceNotSelected},
		{"not selected, no Lease check: a shrink waits", 5, 3, "", false, notSelected, SkipNamespaceNotSelected},
		{"not selected: memory near its limit grows (urgent)", 1, 2, "1000Mi", true, notSelected, ""},
		{"selected, fresh Lease: the shrink goes ahead", 5, 2, "", true, selected, ""},
		{"selected, no Lease check: the shrink goes ahead", 6, 2, "", false, selected, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, 3, int64(tc.podGi))
			f.setTarget("3Gi", "2Gi", "4Gi")
			if tc.observedPeak != "" {
				f.gfr.Status.ContainerRecommendations[0].ObservedPeakMemory = q(tc.observedPeak)
			}
			f.gfa.Spec.Recommenders = []gpufracv1.RecommenderName{{Name: "b"}}
			f.gfr.Status.Conditions = append(f.gfr.Status.Conditions, tc.cond)
			if tc.leaseCheck {
				f.objs = append(f.objs, fresh.DeepCopy())
				f.cfg.RecommenderLeaseMaxAge = 10 * time.Minute
			}
			f.build()
			f.run()
			if n := len(f.livePods()); n != tc.live {
				t.Errorf("%d pods left, want %d", n, tc.live)
			}
			st := f.status()
			if tc.blocked != "" && (st.BlockedReason != tc.blocked || !strings.Contains(st.BlockedMessage, "namespace ml")) {
				t.Errorf("blocked %q %q, want %s naming the namespace", st.BlockedReason, st.BlockedMessage, tc.blocked)
			}
			if tc.blocked != "" && !slices.ContainsFunc(f.events(), func(e string) bool { return strings.Contains(e, "updates blocked ("+tc.blocked+")") }) {
				t.Errorf("no UpdatesBlocked event for %s", tc.blocked)
			}
		})
	}
}
