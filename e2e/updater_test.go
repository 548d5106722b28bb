package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/e2e/framework"
	"github.com/gpufrac/gpufrac/statuslease"
	"github.com/gpufrac/gpufrac/updater"
	"github.com/gpufrac/gpufrac/workload"
)

const (
	updSystemNS   = "e2e-upd-system" // the webhook's namespace: its status Lease
	updLabelValue = "updater"        // namespaces labelled admLabel=updater are sent to this test's webhook
	updConfigName = "gpufrac-admission-e2e-upd"
)

// updWebhook is this test's bin/admission, registered for namespaces labelled
// admLabel=updater, renewing its status Lease every second.
type updWebhook struct {
	stop func()
}

func startUpdaterWebhook(t *testing.T) *updWebhook {
	t.Helper()
	return startUpdaterWebhookIn(t, updSystemNS)
}

// startUpdaterWebhookIn is startUpdaterWebhook with systemNS (which must exist) as the
// webhook's own namespace: its certificate Secret and status Lease.
func startUpdaterWebhookIn(t *testing.T, systemNS string) *updWebhook {
	t.Helper()
	port, probe := freePort(t), freePort(t)
	_, _, stop := startProcess(t, "admission",
		"--kubeconfig="+testCluster.Kubeconfig,
		"--namespace="+systemNS,
		"--identity=e2e-upd-admission",
		"--webhook-host=127.0.0.1",
		fmt.Sprintf("--webhook-port=%d", port),
		"--register-webhooks",
		fmt.Sprintf("--webhook-url=https://127.0.0.1:%d", port),
		"--webhook-config-name="+updConfigName,
		"--namespace-label-selector="+admLabel+"="+updLabelValue,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
		"--status-lease-renew-interval=1s",
		"--owner-wait=1s",
		"--webhook-timeout=3", // 1s + the 1s backend timeouts + the margin: over the default 2 (CheckTimeout)
	)
	waitHTTPOK(t, "admission ready", fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
	return &updWebhook{stop: stop}
}

// updProcess is a running bin/updater.
type updProcess struct {
	metrics string // /metrics URL
	stop    func()
	started time.Time
	log     string
}

// checkLog fails the test on error lines the updater logged (klog "E" lines of its own
// code, any file of package updater; events rejected for namespaces being deleted are
// not the updater's errors).
func (p *updProcess) checkLog(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(repoRoot, "updater", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the updater's source files: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "E") {
			continue
		}
		for _, f := range files {
			if strings.Contains(line, " "+filepath.Base(f)+":") {
				t.Errorf("updater logged an error: %s", line)
				break
			}
		}
	}
}

// startUpdater runs bin/updater for the given namespaces with short e2e intervals;
// extra flags override the defaults (later flags win).
func startUpdater(t *testing.T, namespaces []string, extra ...string) *updProcess {
	t.Helper()
	mport, probe := freePort(t), freePort(t)
	args := append([]string{
		"--kubeconfig=" + testCluster.Kubeconfig,
		"--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", mport),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
		"--watch-namespaces=" + strings.Join(namespaces, ","),
		"--admission-namespace=" + updSystemNS,
		"--admission-lease-max-age=5s",
		// The suites write recommendations by hand, with no recommender renewing its
		// status Lease; TestProduct runs the real one and turns the check on.
		"--recommender-lease-max-age=0",
		"--interval=1s",
		"--warm-up=2s",
		"--min-pod-age=1h",
		// Hysteresis at e2e speed: a change inside the bounds must be seen in 3
		// cycles (3s); no minimum interval between rounds, so suites that move a
		// recommendation several times are not held for an hour. Tests of the
		// hysteresis itself pass their own values.
		"--persist-cycles=3",
		"--persist-for=0s",
		"--min-replacement-interval=0s",
		"--eviction-rate=-1",
		"--retry-backoff=3s",
		"--verification-period=5m",
	}, extra...)
	p := &updProcess{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport), started: time.Now()}
	_, p.log, p.stop = startProcess(t, "updater", args...)
	waitHTTPOK(t, "updater ready", fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
	return p
}

// counter reads the sum of a counter (or gauge) over the series with label=value from
// the updater's /metrics (0 when absent).
func (p *updProcess) counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	resp, err := http.Get(p.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, m := range fams[name].GetMetric() {
		if label != "" && !framework.HasLabel(m, label, value) {
			continue
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

func updNamespace(t *testing.T, name string, selected bool) {
	t.Helper()
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if selected {
		n.Labels = map[string]string{admLabel: updLabelValue}
	}
	create(t, n)
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), n) })
}

// updRecommend writes (creating it if needed) the recommendation of gfa as the
// recommender would: per container "main" a memory target and bounds, compute 250m in
// [200m, 300m], confidence 90, and the given extra conditions.
func updRecommend(t *testing.T, gfa *gpufracv1.GPUFractionAutoscaler, target, lower, upper string, conds ...metav1.Condition) {
	t.Helper()
	ctx := context.Background()
	r := &gpufracv1.GPUFractionRecommendation{}
	err := testCluster.Client.Get(ctx, types.NamespacedName{Namespace: gfa.Namespace, Name: gfa.Name}, r)
	if err != nil {
		r = &gpufracv1.GPUFractionRecommendation{
			ObjectMeta: metav1.ObjectMeta{Namespace: gfa.Namespace, Name: gfa.Name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: gfa.Name, UID: gfa.UID, Controller: ptr.To(true)}}},
			Spec: gpufracv1.GPUFractionRecommendationSpec{TargetRef: gfa.Spec.TargetRef},
		}
		create(t, r)
	}
	q := resource.MustParse
	r.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{
		ContainerName: "main",
		Target:        gpufracv1.GPUResources{Memory: ptr.To(q(target)), Compute: ptr.To(q("250m"))},
		LowerBound:    gpufracv1.GPUResources{Memory: ptr.To(q(lower)), Compute: ptr.To(q("200m"))},
		UpperBound:    gpufracv1.GPUResources{Memory: ptr.To(q(upper)), Compute: ptr.To(q("300m"))},
		SharingMode:   gpufracv1.SharingModeMPS, SharingModeReason: "written by the e2e test",
		ConfidencePercent: 90, HistoryHours: 48,
	}}
	r.Status.ConfidencePercent = ptr.To[int32](90)
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue, Reason: "E2E", Message: "written by the e2e test"})
	for _, c := range conds {
		meta.SetStatusCondition(&r.Status.Conditions, c)
	}
	if err := testCluster.Client.Status().Update(ctx, r); err != nil {
		t.Fatal(err)
	}
}

// updPods returns the running or pending (not terminating) pods of app in ns.
func updPods(t *testing.T, ns, app string) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, p := range admPods(t, ns, app) {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// appliedMemory is the memory of container main in a pod's applied record ("" if none).
func appliedMemory(p *corev1.Pod) string {
	rec, err := gpufracv1.ParseApplied(p.Annotations)
	if err != nil || rec == nil || rec.Container("main") == nil || rec.Container("main").Memory == nil {
		return ""
	}
	return rec.Container("main").Memory.String()
}

// mpsEnv is container main's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT.
func mpsEnv(p *corev1.Pod) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" {
			return e.Value
		}
	}
	return ""
}

// waitApplied waits until the app has n ready pods, all with applied memory mem.
func waitApplied(t *testing.T, ns, app string, n int, mem string, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, timeout, fmt.Sprintf("%d ready pods of %s/%s with %s", n, ns, app, mem), func() (bool, error) {
		pods = updPods(t, ns, app)
		if len(pods) != n {
			return false, fmt.Errorf("%d pods", len(pods))
		}
		for _, p := range pods {
			if !updater.IsReady(&p) || appliedMemory(&p) != mem {
				return false, fmt.Errorf("pod %s ready=%v applied %q", p.Name, updater.IsReady(&p), appliedMemory(&p))
			}
		}
		return true, nil
	})
	return pods
}

func uids(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, string(p.UID))
	}
	sort.Strings(out)
	return out
}

// updScenario is one workload: a Deployment "app" and its autoscaler.
type updScenario struct {
	ns  string
	dep *appsv1.Deployment
	gfa *gpufracv1.GPUFractionAutoscaler
}

// setup creates a Deployment with replicas pods whose autoscaler has mode and backend
// (mod changes it before creation) and a 3Gi recommendation ([2Gi, 4Gi]), and waits
// until its pods run (with 3Gi applied unless the mode is Off).
func (s *updScenario) setup(t *testing.T, mode gpufracv1.UpdateMode, backend gpufracv1.BackendType, replicas int32, mod func(*gpufracv1.GPUFractionAutoscaler)) {
	t.Helper()
	ctx := context.Background()
	s.dep = gpuDeployment(s.ns, "app", "main", 0)
	create(t, s.dep)
	s.gfa = admAutoscaler(s.ns, "app", mode, backend)
	if mod != nil {
		mod(s.gfa)
	}
	create(t, s.gfa)
	s.logStatusOnFailure(t)
	updRecommend(t, s.gfa, "3Gi", "2Gi", "4Gi")
	if mode != gpufracv1.UpdateModeOff {
		waitFor(t, 30*time.Second, "webhook cache has "+s.ns, func() (bool, error) {
			p, err := dryRunPod(ctx, s.dep)
			if err != nil {
				return false, err
			}
			return appliedMemory(p) == "3Gi", nil
		})
	}
	scale(t, s.dep, replicas)
	mem := "3Gi"
	if mode == gpufracv1.UpdateModeOff {
		mem = ""
	}
	waitApplied(t, s.ns, "app", int(replicas), mem, 90*time.Second)
}

// shrink makes the recommendation 1Gi ([768Mi, 1536Mi]): 3Gi pods are above the bound.
func (s *updScenario) shrink(t *testing.T) { updRecommend(t, s.gfa, "1Gi", "768Mi", "1536Mi") }

func (s *updScenario) status(t *testing.T) *gpufracv1.UpdaterStatus {
	t.Helper()
	g := &gpufracv1.GPUFractionAutoscaler{}
	if err := testCluster.Client.Get(context.Background(), types.NamespacedName{Namespace: s.ns, Name: "app"}, g); err != nil {
		t.Fatal(err)
	}
	return g.Status.Updater
}

// logStatusOnFailure logs the autoscaler's status.updater when the test fails
// (logUpdaterStatusOnFailure).
func (s *updScenario) logStatusOnFailure(t *testing.T) { logUpdaterStatusOnFailure(t, s.ns, "app") }

// logUpdaterStatusOnFailure logs the status.updater (blocked reason, per-pod skip
// reasons, conditions) of each named autoscaler of namespace ns when the test fails, so
// that a wait for pods that timed out says why the updater held them.
func logUpdaterStatusOnFailure(t *testing.T, ns string, names ...string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range names {
			g := &gpufracv1.GPUFractionAutoscaler{}
			if err := testCluster.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, g); err != nil || g.Status.Updater == nil {
				t.Logf("status.updater of %s/%s: none (%v)", ns, name, err)
				continue
			}
			t.Logf("status.updater of %s/%s at the failure: %+v", ns, name, *g.Status.Updater)
		}
	})
}

// waitStatus waits until status.updater satisfies cond.
func (s *updScenario) waitStatus(t *testing.T, timeout time.Duration, what string, cond func(*gpufracv1.UpdaterStatus) bool) *gpufracv1.UpdaterStatus {
	t.Helper()
	var st *gpufracv1.UpdaterStatus
	waitFor(t, timeout, what, func() (bool, error) {
		st = s.status(t)
		if st == nil {
			return false, fmt.Errorf("no status.updater")
		}
		return cond(st), fmt.Errorf("status.updater %+v", *st)
	})
	return st
}

// events returns the notes of events with reason in the scenario's namespace, about
// objects of kind (any when empty).
func (s *updScenario) events(t *testing.T, reason, kind string) []eventsv1.Event {
	t.Helper()
	var evs eventsv1.EventList
	if err := testCluster.Client.List(context.Background(), &evs, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Reason == reason && (kind == "" || e.Regarding.Kind == kind) {
			out = append(out, e)
		}
	}
	return out
}

func (s *updScenario) waitEvent(t *testing.T, reason, kind, contains string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	waitFor(t, 30*time.Second, "event "+reason+" in "+s.ns, func() (bool, error) {
		for _, e := range s.events(t, reason, kind) {
			if strings.Contains(e.Note, contains) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("event %s on %s %s: %s", found.Reason, found.Regarding.Kind, found.Regarding.Name, found.Note)
	return found
}

// unchangedFor checks that the app's pods keep their UIDs for d.
func (s *updScenario) unchangedFor(t *testing.T, d time.Duration) {
	t.Helper()
	before := uids(updPods(t, s.ns, "app"))
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if now := uids(updPods(t, s.ns, "app")); !slices.Equal(now, before) {
			t.Fatalf("pods replaced: %v → %v", before, now)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// setWindows replaces the autoscaler's resize windows with a merge patch (the updater's
// status writes change the resourceVersion, so an update could conflict).
func (s *updScenario) setWindows(t *testing.T, ws ...gpufracv1.ResizeWindow) {
	t.Helper()
	g := &gpufracv1.GPUFractionAutoscaler{}
	if err := testCluster.Client.Get(context.Background(), types.NamespacedName{Namespace: s.ns, Name: "app"}, g); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.UpdatePolicy.ResizeWindows = ws
	if err := testCluster.Client.Patch(context.Background(), g, patch); err != nil {
		t.Fatal(err)
	}
}

// watchReady counts the ready pods of ns that are not terminating every 20ms until the
// returned function is called; it returns the fewest seen (at most initial).
func watchReady(ctx context.Context, ns string, initial int) (fewest func() int) {
	var mu sync.Mutex
	least := initial
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var pods corev1.PodList
			if err := testCluster.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
				continue
			}
			n := 0
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && updater.IsReady(&p) {
					n++
				}
			}
			mu.Lock()
			least = min(least, n)
			mu.Unlock()
		}
	}()
	return func() int {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		return least
	}
}

// closedWindow is a one-minute daily resize window (UTC) that opens about twelve hours
// from now, so it stays closed for the rest of the test whenever the test runs (a fixed
// date such as "0 0 1 1 *" is open for the minute it names).
func closedWindow() gpufracv1.ResizeWindow {
	at := time.Now().UTC().Add(12 * time.Hour)
	return gpufracv1.ResizeWindow{Schedule: fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour()), Duration: metav1.Duration{Duration: time.Minute}}
}

func alwaysOpen(g *gpufracv1.GPUFractionAutoscaler) {
	g.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "* * * * *", Duration: metav1.Duration{Duration: time.Hour}}}
}

func TestUpdater(t *testing.T) {
	ctx := t.Context()
	c := testCluster.Client
	updNamespace(t, updSystemNS, false)
	scenarios := []string{"open", "closed", "off", "initial", "pdb", "single", "single-optin", "inplace-ann", "inplace-mps", "rollback", "device", "mismatch"}
	var nss []string
	for _, s := range scenarios {
		nss = append(nss, "e2e-upd-"+s)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: updConfigName}})
		_ = c.Delete(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: updConfigName}})
	})
	begin := time.Now()
	wh := startUpdaterWebhook(t)
	upd := startUpdater(t, nss)
	t.Logf("webhook and updater ready in %v", time.Since(begin).Round(time.Millisecond))

	// The scenarios run at the same time against one updater (go test runs at most
	// GOMAXPROCS parallel subtests; t.Run may be called from several goroutines).
	t.Run("scenarios", func(t *testing.T) {
		var wg sync.WaitGroup
		run := func(name string, f func(t *testing.T)) {
			wg.Add(1)
			go func() { defer wg.Done(); t.Run(name, f) }()
		}
		defer wg.Wait()
		run("recreate in an open window", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-open"}
			updNamespace(t, s.ns, true)
			s.setup(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendMPS, 3, alwaysOpen)
			// Watch the ready pods while they are replaced: one at a time (50% of 3 → 1).
			fewestReady := watchReady(ctx, s.ns, 3)
			old := uids(updPods(t, s.ns, "app"))
			s.shrink(t)
			pods := waitApplied(t, s.ns, "app", 3, "1Gi", 90*time.Second)
			minReady := fewestReady()
			for _, p := range pods {
				if slices.Contains(old, string(p.UID)) {
					t.Errorf("pod %s was not replaced", p.Name)
				}
				if env := mpsEnv(&p); env != "0=1024M" {
					t.Errorf("replacement %s CUDA_MPS_PINNED_DEVICE_MEM_LIMIT %q, want 0=1024M", p.Name, env)
				}
			}
			t.Logf("fewest ready pods while replacing: %d of 3", minReady)
			if minReady < 2 {
				t.Errorf("%d ready pods at one point: more than one pod in flight", minReady)
			}
			// One at a time: each eviction waits for the previous replacement to be ready
			// (cycles are 1s apart); evictions in one cycle would be milliseconds apart.
			evs := s.events(t, updater.EventEvicted, "Pod")
			if len(evs) != 3 {
				t.Errorf("%d eviction events on pods, want 3", len(evs))
			}
			var times []time.Time
			for _, e := range evs {
				times = append(times, e.EventTime.Time)
			}
			slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
			for i := 1; i < len(times); i++ {
				if gap := times[i].Sub(times[i-1]); gap < 100*time.Millisecond {
					t.Errorf("evictions %v apart: more than one pod in flight", gap)
				}
			}
			st := s.status(t)
			if st.LastEvictionTime == nil || st.Verification == nil || !st.ResizeWindowOpen {
				t.Errorf("status %+v", st)
			}
		})

		run("recreate waits for the window", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-closed"}
			updNamespace(t, s.ns, true)
			s.setup(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendMPS, 2, func(g *gpufracv1.GPUFractionAutoscaler) {
				g.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{closedWindow()}
			})
			// A window opening at the next minute boundary at least 60s ahead, in a time
			// zone with a half-hour offset: the closed window must be reported before it
			// opens, and on a loaded machine the status takes seconds to appear (15s
			// ahead failed once in CI).
			kolkata, err := time.LoadLocation("Asia/Kolkata")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now().Add(60 * time.Second).Truncate(time.Minute).Add(time.Minute)
			local := start.In(kolkata)
			window := gpufracv1.ResizeWindow{Schedule: fmt.Sprintf("%d %d * * *", local.Minute(), local.Hour()),
				Duration: metav1.Duration{Duration: 10 * time.Minute}, TimeZone: "Asia/Kolkata"}
			s.setWindows(t, window)
			old := uids(updPods(t, s.ns, "app"))
			s.shrink(t)
			st := s.waitStatus(t, time.Until(start)-5*time.Second, "window-closed reported", func(st *gpufracv1.UpdaterStatus) bool {
				return st.BlockedReason == updater.SkipWindowClosed && st.NextWindowStart != nil && st.NextWindowStart.Equal(ptr.To(metav1.NewTime(start)))
			})
			t.Logf("window %q (Asia/Kolkata) opens at %s; status: open=%v next=%s blocked=%s (%s)", window.Schedule,
				start.UTC().Format(time.RFC3339), st.ResizeWindowOpen, st.NextWindowStart.UTC().Format(time.RFC3339), st.BlockedReason, st.BlockedMessage)
			s.unchangedFor(t, time.Until(start.Add(-time.Second)))
			pods := waitApplied(t, s.ns, "app", 2, "1Gi", 180*time.Second) // 90 s timed out once under CI load with one of two pods replaced (cause not found; status.updater is logged on failure)
			for _, p := range pods {
				if slices.Contains(old, string(p.UID)) {
					t.Errorf("pod %s not replaced", p.Name)
				}
				if p.CreationTimestamp.Time.Before(start.Add(-time.Second)) {
					t.Errorf("replacement %s created at %v, before the window opened at %v", p.Name, p.CreationTimestamp.Time, start)
				}
			}
			t.Logf("replaced after the window opened (%v after)", time.Since(start).Round(time.Second))
		})

		run("off reports what it would do", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-off"}
			updNamespace(t, s.ns, true)
			// A window that opens twelve hours from now in Berlin, so it is closed
			// whenever the test runs (a fixed hour failed for the hour it was open).
			berlin, err := time.LoadLocation("Europe/Berlin")
			if err != nil {
				t.Fatal(err)
			}
			openHour := (time.Now().In(berlin).Hour() + 12) % 24
			if openHour == 2 {
				// 02:00 does not exist on the night Berlin moves to summer time (the
				// window then opens at 03:00): one hour later is still closed.
				openHour = 3
			}
			s.setup(t, gpufracv1.UpdateModeOff, gpufracv1.BackendMPS, 2, func(g *gpufracv1.GPUFractionAutoscaler) {
				g.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: fmt.Sprintf("0 %d * * *", openHour), Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Europe/Berlin"}}
			})
			pods := updPods(t, s.ns, "app")
			st := s.waitStatus(t, 30*time.Second, "would-do report", func(st *gpufracv1.UpdaterStatus) bool { return len(st.Updates) == 2 })
			for _, u := range st.Updates {
				if u.Action != gpufracv1.PodUpdateEvict || u.SkipReason != updater.SkipModeOff || !strings.Contains(u.Reason, "memory 80Gi above upper bound 4Gi") ||
					!strings.Contains(u.SkipMessage, "would evict in the resize window opening at") {
					t.Errorf("update %+v", u)
				}
				if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == u.Pod }) {
					t.Errorf("update names pod %s, not one of the workload's", u.Pod)
				}
			}
			if st.PodsOutOfDate != 2 || st.Pods != 2 || st.NextWindowStart == nil || st.ResizeWindowOpen {
				t.Errorf("status %+v", st)
			}
			next := st.NextWindowStart.In(time.FixedZone("", 0))
			if l := next.In(berlin); l.Hour() != openHour || l.Minute() != 0 || time.Until(next) > 24*time.Hour {
				t.Errorf("next window %v (%v in Berlin), want the next %02d:00 Berlin time", next, l, openHour)
			}
			s.waitEvent(t, updater.EventWouldUpdate, "GPUFractionAutoscaler", "would evict 2 pod(s)")
			s.unchangedFor(t, 5*time.Second)
		})

		run("initial never evicts", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-initial"}
			updNamespace(t, s.ns, true)
			s.setup(t, gpufracv1.UpdateModeInitial, gpufracv1.BackendMPS, 2, alwaysOpen)
			s.shrink(t)
			s.waitStatus(t, 30*time.Second, "mode-initial reported", func(st *gpufracv1.UpdaterStatus) bool {
				return st.BlockedReason == updater.SkipModeInitial && st.PodsOutOfDate == 2
			})
			s.unchangedFor(t, 5*time.Second)
		})

		run("PDB blocks eviction", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-pdb"}
			updNamespace(t, s.ns, true)
			create(t, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "app-pdb"},
				Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}}}})
			s.setup(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendMPS, 2, alwaysOpen)
			s.shrink(t)
			st := s.waitStatus(t, 30*time.Second, "pdb reported", func(st *gpufracv1.UpdaterStatus) bool { return st.BlockedReason == updater.SkipPDB })
			t.Logf("blocked: %s: %s", st.BlockedReason, st.BlockedMessage)
			if !strings.Contains(st.BlockedMessage, "disruption budget") {
				t.Errorf("blocked message %q does not mention the disruption budget", st.BlockedMessage)
			}
			s.waitEvent(t, updater.EventEvictionRefused, "GPUFractionAutoscaler", "disruption budget")
			s.unchangedFor(t, 4*time.Second)
		})

		run("single replica", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-single"}
			updNamespace(t, s.ns, true)
			s.setup(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendMPS, 1, alwaysOpen)
			s.shrink(t)
			st := s.waitStatus(t, 30*time.Second, "min-replicas reported", func(st *gpufracv1.UpdaterStatus) bool { return st.BlockedReason == updater.SkipMinReplicas })
			t.Logf("blocked: %s: %s", st.BlockedReason, st.BlockedMessage)
			s.unchangedFor(t, 4*time.Second)
		})

		run("single replica opted in", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-single-optin"}
			updNamespace(t, s.ns, true)
			s.setup(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendMPS, 1, func(g *gpufracv1.GPUFractionAutoscaler) {
				alwaysOpen(g)
				g.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
			})
			old := uids(updPods(t, s.ns, "app"))
			s.shrink(t)
			pods := waitApplied(t, s.ns, "app", 1, "1Gi", 60*time.Second)
			if slices.Contains(old, string(pods[0].UID)) {
				t.Error("not replaced")
			}
		})

		run("in place with the annotations backend", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-inplace-ann"}
			updNamespace(t, s.ns, true)
			s.setup(t, gpufracv1.UpdateModeInPlaceOrRecreate, gpufracv1.BackendAnnotations, 2, alwaysOpen)
			old := uids(updPods(t, s.ns, "app"))
			s.shrink(t)
			pods := waitApplied(t, s.ns, "app", 2, "1Gi", 60*time.Second)
			if now := uids(pods); !slices.Equal(now, old) {
				t.Fatalf("pods replaced (%v → %v), want changed in place", old, now)
			}
			for _, p := range pods {
				if p.Annotations[gpufracv1.AnnotationGPUMemory] != "1Gi" || p.Annotations[gpufracv1.AnnotationGPUCompute] != "250m" || p.Annotations["gpufrac.io/container.main.gpu-memory"] != "1Gi" {
					t.Errorf("pod %s annotations %v", p.Name, p.Annotations)
				}
			}
			s.waitEvent(t, updater.EventInPlace, "Pod", "changed in place")
			// The event can reach the API server before the status patch: wait for it.
			st := s.waitStatus(t, 30*time.Second, "lastInPlaceUpdateTime", func(st *gpufracv1.UpdaterStatus) bool { return st.LastInPlaceUpdateTime != nil })
			if st.LastEvictionTime != nil {
				t.Errorf("status %+v", st)
			}
		})

		run("in place mode with a GPU backend recreates", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-inplace-mps"}
			updNamespace(t, s.ns, true)
			s.setup(t, gpufracv1.UpdateModeInPlaceOrRecreate, gpufracv1.BackendMPS, 2, alwaysOpen)
			old := uids(updPods(t, s.ns, "app"))
			s.shrink(t)
			pods := waitApplied(t, s.ns, "app", 2, "1Gi", 90*time.Second)
			for _, p := range pods {
				if slices.Contains(old, string(p.UID)) {
					t.Errorf("pod %s changed in place, want recreated (GPU fields cannot change live)", p.Name)
				}
			}
		})

		run("device never over-committed", func(t *testing.T) { updDeviceOverCommit(t, upd) })
		run("consolidation empties a GPU", updConsolidation)
		run("admitted fraction overridden", func(t *testing.T) { updAdmittedMismatch(t, upd) })

		run("rollback after a latency breach", func(t *testing.T) {
			s := &updScenario{ns: "e2e-upd-rollback"}
			updNamespace(t, s.ns, true)
			s.setup(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendMPS, 2, alwaysOpen)
			s.shrink(t)
			waitFor(t, 60*time.Second, "a pod shrunk to 1Gi", func() (bool, error) {
				for _, p := range updPods(t, s.ns, "app") {
					if updater.IsReady(&p) && appliedMemory(&p) == "1Gi" {
						return true, nil
					}
				}
				return false, nil
			})
			// Close the window: the rollback must not wait for it. Wait until the updater
			// has seen it closed (its informer may lag the patch on a loaded machine; the
			// check after the rollback then read a status still open, CI 2026-12-02).
			s.setWindows(t, closedWindow())
			s.waitStatus(t, 30*time.Second, "the updater sees the window closed", func(st *gpufracv1.UpdaterStatus) bool {
				return !st.ResizeWindowOpen && st.ObservedGeneration >= 2
			})
			breach := metav1.Condition{Type: gpufracv1.ConditionLatencyGuardrailActive, Status: metav1.ConditionTrue,
				Reason: gpufracv1.ReasonLatencyBreached, Message: "p95 latency 2.6s above the objective 2s"}
			updRecommend(t, s.gfa, "1Gi", "768Mi", "1536Mi", breach)
			st := s.waitStatus(t, 30*time.Second, "rollback floor", func(st *gpufracv1.UpdaterStatus) bool { return st.Floor != nil })
			t.Logf("floor: memory %v compute %v until %v: %s", st.Floor.Memory, st.Floor.Compute, st.Floor.Until.UTC(), st.Floor.Reason)
			if st.Floor.Memory == nil || st.Floor.Memory.String() != "3Gi" || !strings.Contains(st.Floor.Reason, "latency objective breached") {
				t.Errorf("floor %+v", st.Floor)
			}
			if cnd := meta.FindStatusCondition(st.Conditions, gpufracv1.UpdaterConditionRolledBack); cnd == nil || cnd.Status != metav1.ConditionTrue {
				t.Errorf("RolledBack condition %+v", cnd)
			}
			s.waitEvent(t, updater.EventRolledBack, "GPUFractionAutoscaler", "Rolling back")
			// What the recommender does with the floor: the target goes back to 3Gi.
			updRecommend(t, s.gfa, "3Gi", "2Gi", "4Gi", breach)
			waitApplied(t, s.ns, "app", 2, "3Gi", 60*time.Second)
			s.waitEvent(t, updater.EventEvicted, "Pod", "roll back to the floor")
			if st := s.status(t); st.ResizeWindowOpen {
				t.Errorf("window open during the rollback: %+v", st)
			}
		})
	})
	if t.Failed() {
		return
	}
	if n := upd.counter(t, "gpufrac_updater_skips_total", "reason", updater.SkipPDB); n == 0 {
		t.Error("gpufrac_updater_skips_total{reason=pdb} is 0")
	}
	if n := upd.counter(t, "gpufrac_updater_rollbacks_total", "trigger", "latency"); n != 1 {
		t.Errorf("gpufrac_updater_rollbacks_total{trigger=latency} = %v, want 1", n)
	}
	if n := upd.counter(t, "gpufrac_updater_in_place_updates_total", "result", updater.ResultApplied); n < 2 {
		t.Errorf("gpufrac_updater_in_place_updates_total{result=applied} = %v, want ≥ 2", n)
	}
	t.Logf("evictions: %v evicted, %v refused", upd.counter(t, "gpufrac_updater_evictions_total", "result", updater.ResultEvicted), upd.counter(t, "gpufrac_updater_evictions_total", "result", updater.ResultRefused))
	upd.stop()
	upd.checkLog(t)

	// A restarted updater (a new process) finds many pods out of bounds.
	storm := &updScenario{ns: "e2e-upd-storm"}
	updNamespace(t, storm.ns, true)
	t.Run("six pods out of bounds", func(t *testing.T) {
		// No resize windows (replacements at any time): the hysteresis allows one round
		// of replacements per window opening (deliberate), and alwaysOpen's opening
		// covering now started up to an hour ago, so the growth below ("webhook
		// stopped") would wait for the next opening. Without windows only
		// --min-replacement-interval (0s here) spaces the rounds.
		storm.setup(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendMPS, 6, nil)
		storm.shrink(t)
	})
	if t.Failed() {
		return
	}
	const warmUp, every = 5 * time.Second, 2 * time.Second
	upd = startUpdater(t, []string{storm.ns}, "--warm-up=5s", "--eviction-rate=0.5", "--eviction-burst=1", "--max-in-flight=1")
	t.Run("restart respects warm-up and rate limit", func(t *testing.T) {
		st := storm.waitStatus(t, 20*time.Second, "status after the restart", func(st *gpufracv1.UpdaterStatus) bool { return st.PodsOutOfDate > 0 })
		t.Logf("after restart: %d pods out of date, blocked %s (%s)", st.PodsOutOfDate, st.BlockedReason, st.BlockedMessage)
		waitApplied(t, storm.ns, "app", 6, "1Gi", 60*time.Second)
		var times []time.Time
		for _, e := range storm.events(t, updater.EventEvicted, "Pod") {
			times = append(times, e.EventTime.Time)
		}
		sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
		if len(times) != 6 {
			t.Fatalf("%d eviction events, want 6", len(times))
		}
		var gaps []string
		for i, at := range times {
			if i == 0 {
				t.Logf("first eviction %v after the updater process started (warm-up %v)", at.Sub(upd.started).Round(time.Millisecond), warmUp)
				if at.Sub(upd.started) < warmUp {
					t.Errorf("evicted %v after start, inside the warm-up", at.Sub(upd.started))
				}
				continue
			}
			gap := at.Sub(times[i-1])
			gaps = append(gaps, gap.Round(time.Millisecond).String())
			if gap < every-200*time.Millisecond {
				t.Errorf("evictions %d and %d only %v apart; the rate limit is one per %v", i, i+1, gap, every)
			}
		}
		t.Logf("gaps between evictions: %s (limit 0.5/s, burst 1)", strings.Join(gaps, ", "))
		if n := upd.counter(t, "gpufrac_updater_skips_total", "reason", updater.SkipWarmUp); n == 0 {
			t.Error("no warm-up skips counted")
		}
		if n := upd.counter(t, "gpufrac_updater_skips_total", "reason", updater.SkipRateLimited); n == 0 {
			t.Error("no rate-limited skips counted")
		}
	})
	if t.Failed() {
		return
	}

	t.Run("webhook stopped", func(t *testing.T) {
		wh.stop() // graceful: the Lease is released at once
		waitFor(t, 15*time.Second, "status Lease stale", func() (bool, error) {
			fresh, err := statuslease.Fresh(ctx, c, updSystemNS, statuslease.DefaultName, 5*time.Second)
			return !fresh, err
		})
		old := uids(updPods(t, storm.ns, "app"))
		// Growth back to 3Gi (1Gi is now below the lower bound), a second round.
		updRecommend(t, storm.gfa, "3Gi", "2Gi", "4Gi")
		st := storm.waitStatus(t, 20*time.Second, "admission-unavailable reported", func(st *gpufracv1.UpdaterStatus) bool {
			return st.BlockedReason == updater.SkipAdmissionUnavailable
		})
		t.Logf("blocked: %s: %s", st.BlockedReason, st.BlockedMessage)
		storm.waitEvent(t, updater.EventUpdatesBlocked, "GPUFractionAutoscaler", "admission")
		storm.unchangedFor(t, 5*time.Second)
		if now := uids(updPods(t, storm.ns, "app")); !slices.Equal(now, old) {
			t.Fatal("pods evicted while the webhook was down")
		}
		if v := upd.counter(t, "gpufrac_updater_admission_available", "", ""); v != 0 {
			t.Errorf("gpufrac_updater_admission_available = %v, want 0", v)
		}
		if n := upd.counter(t, "gpufrac_updater_skips_total", "reason", updater.SkipAdmissionUnavailable); n == 0 {
			t.Error("no admission-unavailable skips counted")
		}
		// Back up: evictions resume.
		startUpdaterWebhook(t)
		waitFor(t, 60*time.Second, "evictions resume with the webhook back", func() (bool, error) {
			for _, p := range updPods(t, storm.ns, "app") {
				if appliedMemory(&p) == "3Gi" && updater.IsReady(&p) {
					return true, nil
				}
			}
			return false, nil
		})
	})
	upd.stop()
	upd.checkLog(t)
}

// updHAMiNode is the KWOK node of the device scenario: one HAMi GPU (devMiB MiB, ten
// slots) registered in hami.io/node-nvidia-register, HAMi's memory and cores resources
// allocatable so the default scheduler binds HAMi pods, and a taint that keeps other
// scenarios' pods off it.
const (
	updHAMiNode   = "e2e-upd-hami"
	updHAMiGPU    = "GPU-e2e-hami"
	updHAMiTaint  = "e2e.gpufrac.io/hami"
	updHAMiDevMiB = 8192
)

// hamiRegistration is a node's HAMi registration of gpus, each of devMiB and 10 slots.
func hamiRegistration(devMiB int, gpus ...string) string {
	var b strings.Builder
	for _, g := range gpus {
		fmt.Fprintf(&b, "%s,10,%d,100,NVIDIA,0,true:", g, devMiB)
	}
	return b.String()
}

// Consolidation's node: two HAMi GPUs of updHAMiDevMiB.
const (
	updConsNode = "e2e-upd-consolidate"
	updConsGPUA = "GPU-e2e-cons-a"
	updConsGPUB = "GPU-e2e-cons-b"
)

// fakeHAMiScheduler writes what HAMi's scheduler writes on the pods of ns bound to node
// (hami.io/vgpu-devices-allocated with their nvidia.com/gpumem, MiB, and
// nvidia.com/gpucores) on one of gpus, each of devMiB: spread (the GPU with the most
// memory free) while binpack is false or nil, else binpack (the GPU with the least
// memory free that fits; the first where none fits), until ctx ends.
func fakeHAMiScheduler(ctx context.Context, ns, node string, gpus []string, devMiB int64, binpack *atomic.Bool) {
	c := testCluster.Client
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err == nil {
			used := map[string]int64{}
			var todo []*corev1.Pod
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.Spec.NodeName != node || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
					continue
				}
				if devs := workload.HAMiDevices(p); len(devs) > 0 {
					used[devs[0].UUID] += devs[0].MemoryMiB
					continue
				}
				todo = append(todo, p)
			}
			for _, p := range todo {
				lim := p.Spec.Containers[0].Resources.Limits
				mem, cores := lim["nvidia.com/gpumem"], lim["nvidia.com/gpucores"]
				gpu := gpus[0]
				for _, g := range gpus {
					free, best := devMiB-used[g]-mem.Value(), devMiB-used[gpu]-mem.Value()
					pack := binpack != nil && binpack.Load()
					if free >= 0 && (best < 0 || (pack && free < best) || (!pack && free > best)) {
						gpu = g
					}
				}
				used[gpu] += mem.Value()
				patch := client.MergeFrom(p.DeepCopy())
				if p.Annotations == nil {
					p.Annotations = map[string]string{}
				}
				p.Annotations[workload.HAMiAllocatedAnnotation] = fmt.Sprintf("%s,NVIDIA,%d,%d:;", gpu, mem.Value(), cores.Value())
				_ = c.Patch(ctx, p, patch)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// updHAMiScenario sets up a scenario of namespace ns on a tainted KWOK node with HAMi
// GPUs gpus of devMiB each (removed at the end): a Deployment "app" of no replica
// pinned to the node, a Recreate HAMi autoscaler with an always-open window and a 2Gi
// recommendation, and the fake HAMi scheduler (binpack as fakeHAMiScheduler reads it)
// until the test ends. It returns once the webhook applies 2Gi.
func updHAMiScenario(t *testing.T, ns, node string, gpus []string, devMiB int, binpack *atomic.Bool) *updScenario {
	t.Helper()
	ctx, c := t.Context(), testCluster.Client
	err := testCluster.CreateGPUNodeWith(ctx, node, 10, func(n *corev1.Node) {
		n.Annotations[updater.AnnotationHAMiNodeRegister] = hamiRegistration(devMiB, gpus...)
		for _, r := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
			r["nvidia.com/gpumem"], r["nvidia.com/gpucores"] = resource.MustParse("100000"), resource.MustParse("1000")
		}
		n.Spec.Taints = []corev1.Taint{{Key: updHAMiTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	s := &updScenario{ns: ns}
	updNamespace(t, s.ns, true)
	sched, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go fakeHAMiScheduler(sched, s.ns, node, gpus, int64(devMiB), binpack)
	s.dep = gpuDeployment(s.ns, "app", "main", 0)
	s.dep.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	s.dep.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: updHAMiTaint, Operator: corev1.TolerationOpExists}}
	create(t, s.dep)
	s.gfa = admAutoscaler(s.ns, "app", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
	alwaysOpen(s.gfa)
	create(t, s.gfa)
	s.logStatusOnFailure(t)
	updRecommend(t, s.gfa, "2Gi", "1536Mi", "2560Mi")
	waitFor(t, 30*time.Second, "webhook cache has "+s.ns, func() (bool, error) {
		p, err := dryRunPod(ctx, s.dep)
		return err == nil && appliedMemory(p) == "2Gi", err
	})
	return s
}

// updConsolidation: three HAMi pods of 2Gi, in date, spread over two 8Gi GPUs (two on
// one, one on the other). An updater with --consolidate replaces the lone pod (reason
// and Consolidating event, the counter), its replacement is placed binpack next to the
// other two, and then nothing more is replaced: the second GPU is empty.
func updConsolidation(t *testing.T) {
	var binpack atomic.Bool
	s := updHAMiScenario(t, "e2e-upd-consolidate", updConsNode, []string{updConsGPUA, updConsGPUB}, updHAMiDevMiB, &binpack)
	scale(t, s.dep, 3)
	waitApplied(t, s.ns, "app", 3, "2Gi", 90*time.Second)
	onGPU := func(pods []corev1.Pod) map[string][]string {
		out := map[string][]string{}
		for _, p := range pods {
			if d := workload.HAMiDevices(&p); len(d) > 0 {
				out[d[0].UUID] = append(out[d[0].UUID], p.Name)
			}
		}
		return out
	}
	var spread map[string][]string
	waitFor(t, 30*time.Second, "three pods placed on a GPU", func() (bool, error) {
		spread = onGPU(updPods(t, s.ns, "app"))
		return len(spread[updConsGPUA])+len(spread[updConsGPUB]) == 3, fmt.Errorf("placed %v", spread)
	})
	if len(spread[updConsGPUA]) != 2 || len(spread[updConsGPUB]) != 1 {
		t.Fatalf("placed %v, want two pods on %s and one on %s", spread, updConsGPUA, updConsGPUB)
	}
	lone := spread[updConsGPUB][0]
	binpack.Store(true)

	// The pods hold 250m each (HAMi's gpucores 25): let a GPU take three.
	upd := startUpdater(t, []string{s.ns}, "--consolidate", "--consolidation-compute=1000", "--min-pod-age=2s")
	var pods []corev1.Pod
	waitFor(t, 90*time.Second, "all three pods on "+updConsGPUA, func() (bool, error) {
		pods = updPods(t, s.ns, "app")
		on := onGPU(pods)
		ready := 0
		for _, p := range pods {
			if updater.IsReady(&p) {
				ready++
			}
		}
		return len(on[updConsGPUA]) == 3 && ready == 3, fmt.Errorf("placed %v, %d ready", on, ready)
	})
	for _, p := range pods {
		if p.Name == lone {
			t.Errorf("pod %s alone on %s was not replaced", lone, updConsGPUB)
		}
	}
	s.waitEvent(t, updater.EventConsolidating, "GPUFractionAutoscaler", updConsNode+"/"+updConsGPUB)
	s.waitEvent(t, updater.EventEvicted, "Pod", "to empty a shared GPU: consolidation")
	if n := upd.counter(t, "gpufrac_updater_consolidations_total", "", ""); n < 1 {
		t.Errorf("gpufrac_updater_consolidations_total = %v, want at least 1", n)
	}
	// One GPU now holds all three and nothing fits elsewhere: no more replacements.
	s.unchangedFor(t, 6*time.Second)
}

// updDeviceOverCommit (issue 14 kind 10): four HAMi pods of 2Gi fill an 8Gi GPU. Raised to
// 3Gi, none is evicted (PlacementHeld NoCapacity, a ReplacementUnplaceable event naming
// the GPU) however long; once the GPU holds 16Gi, they are replaced one at a time — one
// replacement in flight per device, where the workload's budget would allow two — and
// all end at 3Gi.
func updDeviceOverCommit(t *testing.T, upd *updProcess) {
	ctx, c := t.Context(), testCluster.Client
	s := updHAMiScenario(t, "e2e-upd-device", updHAMiNode, []string{updHAMiGPU}, updHAMiDevMiB, nil)
	scale(t, s.dep, 4)
	waitApplied(t, s.ns, "app", 4, "2Gi", 90*time.Second)

	// 3Gi is above what the full GPU has free: held, not evicted.
	updRecommend(t, s.gfa, "3Gi", "2560Mi", "3584Mi")
	want := "no shared GPU has 3Gi free (most: 0 on " + updHAMiNode + "/" + updHAMiGPU + ")"
	st := s.waitStatus(t, 30*time.Second, "PlacementHeld NoCapacity", func(st *gpufracv1.UpdaterStatus) bool {
		cnd := meta.FindStatusCondition(st.Conditions, updater.ConditionPlacementHeld)
		return st.BlockedReason == updater.SkipNoCapacity && cnd != nil && cnd.Status == metav1.ConditionTrue &&
			cnd.Reason == updater.ReasonNoCapacity && strings.Contains(cnd.Message, want)
	})
	t.Logf("held: %s", meta.FindStatusCondition(st.Conditions, updater.ConditionPlacementHeld).Message)
	s.waitEvent(t, updater.EventReplacementUnplaceable, "GPUFractionAutoscaler", want)
	s.unchangedFor(t, 4*time.Second)

	// A 16Gi GPU: replaced one at a time (the budget of 4 pods allows 2 in flight).
	fewestReady := watchReady(ctx, s.ns, 4)
	node := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: updHAMiNode}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Annotations[updater.AnnotationHAMiNodeRegister] = hamiRegistration(2*updHAMiDevMiB, updHAMiGPU)
	if err := c.Patch(ctx, node, patch); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, s.ns, "app", 4, "3Gi", 90*time.Second)
	minReady := fewestReady()
	t.Logf("fewest ready pods while replacing on one GPU: %d of 4", minReady)
	if minReady < 3 {
		t.Errorf("%d ready pods at one point: more than one replacement from the GPU in flight", minReady)
	}
	if n := upd.counter(t, "gpufrac_updater_skips_total", "reason", updater.SkipDeviceInFlight); n == 0 {
		t.Error("gpufrac_updater_skips_total{reason=device-in-flight} is 0: nothing waited for the device")
	}
	s.waitStatus(t, 30*time.Second, "PlacementHeld False", func(st *gpufracv1.UpdaterStatus) bool {
		cnd := meta.FindStatusCondition(st.Conditions, updater.ConditionPlacementHeld)
		return cnd != nil && cnd.Status == metav1.ConditionFalse && cnd.Reason == updater.ReasonPlaceable
	})
}

// updAdmittedMismatch (issue 14 kind 15): a user overrides the memory annotation the
// webhook wrote into a running pod (annotations backend). The updater reports it —
// FractionMismatch True with both values, one FractionMismatch event, the gauge — and
// replaces nothing; restored, the condition turns False.
func updAdmittedMismatch(t *testing.T, upd *updProcess) {
	ctx, c := t.Context(), testCluster.Client
	s := &updScenario{ns: "e2e-upd-mismatch"}
	updNamespace(t, s.ns, true)
	s.setup(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendAnnotations, 2, alwaysOpen)
	pods := updPods(t, s.ns, "app")
	old := uids(pods)
	const key = "gpufrac.io/container.main.gpu-memory"
	setAnn := func(v string) {
		p := &corev1.Pod{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: pods[0].Name}, p); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		p.Annotations[key] = v
		if err := c.Patch(ctx, p, patch); err != nil {
			t.Fatal(err)
		}
	}
	written := pods[0].Annotations[key]
	setAnn("8Gi")
	want := "pod " + pods[0].Name + " (main: memory written 3Gi, carried 8Gi)"
	st := s.waitStatus(t, 30*time.Second, "FractionMismatch True", func(st *gpufracv1.UpdaterStatus) bool {
		cnd := meta.FindStatusCondition(st.Conditions, updater.ConditionFractionMismatch)
		return cnd != nil && cnd.Status == metav1.ConditionTrue && cnd.Reason == updater.ReasonBackendFieldsDiffer && strings.Contains(cnd.Message, want)
	})
	t.Logf("mismatch: %s", meta.FindStatusCondition(st.Conditions, updater.ConditionFractionMismatch).Message)
	s.waitEvent(t, updater.EventFractionMismatch, "GPUFractionAutoscaler", want)
	if v := upd.counter(t, "gpufrac_updater_pods_fraction_mismatch", "", ""); v != 1 {
		t.Errorf("gpufrac_updater_pods_fraction_mismatch = %v, want 1", v)
	}
	s.unchangedFor(t, 5*time.Second)
	if now := uids(updPods(t, s.ns, "app")); !slices.Equal(now, old) {
		t.Fatalf("pods replaced for a mismatch: %v → %v", old, now)
	}
	if n := len(s.events(t, updater.EventFractionMismatch, "")); n != 1 {
		t.Errorf("%d FractionMismatch events, want 1", n)
	}
	setAnn(written)
	s.waitStatus(t, 30*time.Second, "FractionMismatch False", func(st *gpufracv1.UpdaterStatus) bool {
		cnd := meta.FindStatusCondition(st.Conditions, updater.ConditionFractionMismatch)
		return cnd != nil && cnd.Status == metav1.ConditionFalse && cnd.Reason == updater.ReasonFractionsMatch
	})
}
