package e2e

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/e2e/framework"
	"github.com/gpufrac/gpufrac/statuslease"
)

const (
	admSystemNS   = "e2e-adm-system" // the webhook's own namespace (Secret, Lease)
	admNS         = "e2e-adm"
	admNoneNS     = "e2e-adm-none" // no autoscalers
	admLabel      = "gpufrac-e2e"  // namespaces labelled admLabel=admission are sent to the webhook
	admConfigName = "gpufrac-admission-e2e"
)

var (
	admLoadDuration = flag.Duration("admission-load-duration", 10*time.Second, "duration of the admission load test (the issue's full run: 30s)")
	admLoadRate     = flag.Int("admission-load-rate", 50, "pod creations per second of the admission load test (the issue's full run: 200)")
)

// admWebhook is a running bin/admission.
type admWebhook struct {
	port, metricsPort int
	cmd               *exec.Cmd
	stop              func()
	kill              func()
}

// startAdmission runs bin/admission against the test cluster on 127.0.0.1 with its
// self-managed CA, registering its webhooks by URL, limited to namespaces labelled
// admLabel=admission so other tests sharing the cluster are not affected.
func startAdmission(t *testing.T) *admWebhook { t.Helper(); return startAdmissionIn(t, admSystemNS) }

// startAdmissionIn is startAdmission with systemNS as the webhook's own namespace.
func startAdmissionIn(t *testing.T, systemNS string) *admWebhook {
	t.Helper()
	w := &admWebhook{port: freePort(t), metricsPort: freePort(t)}
	probe := freePort(t)
	cmd, _, stop := startProcess(t, "admission",
		"--kubeconfig="+testCluster.Kubeconfig,
		"--namespace="+systemNS,
		"--identity=e2e-admission",
		"--webhook-host=127.0.0.1",
		fmt.Sprintf("--webhook-port=%d", w.port),
		"--register-webhooks",
		fmt.Sprintf("--webhook-url=https://127.0.0.1:%d", w.port),
		"--webhook-config-name="+admConfigName,
		"--namespace-label-selector="+admLabel+"=admission",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", w.metricsPort),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
		"--status-lease-renew-interval=1s",
		"--memory-overhead=hami=256Mi",
		"--owner-wait=1s",
		"--webhook-timeout=3", // 1s + the 1s backend timeouts + the margin: over the default 2 (CheckTimeout)
	)
	w.cmd, w.stop = cmd, stop
	w.kill = func() { _ = cmd.Process.Kill() }
	t.Cleanup(func() {
		ctx := context.Background()
		_ = testCluster.Client.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: admConfigName}})
		_ = testCluster.Client.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: admConfigName}})
	})
	waitHTTPOK(t, "admission ready", fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
	return w
}

func admNamespace(t *testing.T, name string, selected bool) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if selected {
		ns.Labels = map[string]string{admLabel: "admission"}
	}
	create(t, ns)
	t.Cleanup(func() { _ = testCluster.Client.Delete(context.Background(), ns) })
}

// admAutoscaler returns an autoscaler of Deployment name with the given mode and backend.
func admAutoscaler(ns, name string, mode gpufracv1.UpdateMode, backend gpufracv1.BackendType) *gpufracv1.GPUFractionAutoscaler {
	g := autoscaler(ns, name, name)
	g.Spec.UpdatePolicy = &gpufracv1.UpdatePolicy{UpdateMode: &mode}
	g.Spec.Backend = &gpufracv1.Backend{Type: backend}
	return g
}

// admRecommendation writes the GPUFractionRecommendation of gfa as the recommender
// would: 3Gi and 250m per container "main", upper bound 4Gi, confidence 90.
func admRecommendation(t *testing.T, gfa *gpufracv1.GPUFractionAutoscaler) *gpufracv1.GPUFractionRecommendation {
	t.Helper()
	r, err := testCluster.WriteRecommendation(context.Background(), gfa, "main", "the e2e test")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// dryRunPod creates (dry run) a GPU pod owned by the Deployment and returns what the
// API server would store, mutations included.
func dryRunPod(ctx context.Context, dep *appsv1.Deployment) (*corev1.Pod, error) {
	p := depPod(dep, "", nil)
	err := testCluster.Client.Create(ctx, p, client.DryRunAll)
	return p, err
}

// depPod is a pod of dep's template in dep's namespace, owned by dep itself (no
// ReplicaSet), named name (empty: generated from "probe-") with labels.
func depPod(dep *appsv1.Deployment, name string, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: name, Labels: labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: ptr.To(true),
		}}},
		Spec: *dep.Spec.Template.Spec.DeepCopy(),
	}
	if name == "" {
		p.GenerateName = "probe-"
	}
	return p
}

func admPods(t *testing.T, ns, app string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := testCluster.Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func scale(t *testing.T, dep *appsv1.Deployment, n int32) {
	t.Helper()
	patch := client.MergeFrom(dep.DeepCopy())
	dep.Spec.Replicas = ptr.To(n)
	if err := testCluster.Client.Patch(context.Background(), dep, patch); err != nil {
		t.Fatal(err)
	}
}

func TestAdmission(t *testing.T) {
	ctx := t.Context()
	c := testCluster.Client
	admNamespace(t, admSystemNS, false)
	admNamespace(t, admNS, true)
	admNamespace(t, admNoneNS, true)
	begin := time.Now()
	wh := startAdmission(t)
	t.Logf("webhook ready in %v", time.Since(begin).Round(time.Millisecond))

	t.Run("validation", func(t *testing.T) {
		// The API server picks the new ValidatingWebhookConfiguration up within moments.
		bad := admAutoscaler(admNS, "val-bad-cron", gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
		bad.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "0 25 * * *", Duration: metav1.Duration{Duration: time.Hour}}}
		waitFor(t, 30*time.Second, "validating webhook active", func() (bool, error) {
			err := c.Create(ctx, bad.DeepCopy())
			if err == nil {
				_ = c.Delete(ctx, bad)
				return false, fmt.Errorf("bad cron accepted")
			}
			return strings.Contains(err.Error(), "spec.updatePolicy.resizeWindows[0].schedule"), err
		})
		first := admAutoscaler(admNS, "val-first", gpufracv1.UpdateModeOff, gpufracv1.BackendHAMi)
		first.Spec.TargetRef.Name = "val-target"
		create(t, first)
		waitFor(t, 10*time.Second, "first autoscaler in the webhook's cache", func() (bool, error) {
			second := first.DeepCopy()
			second.ObjectMeta = metav1.ObjectMeta{Namespace: admNS, Name: "val-probe"}
			err := c.Create(ctx, second, client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "val-first"), err
		})
		for _, tc := range []struct {
			name, field string
			mod         func(*gpufracv1.GPUFractionAutoscaler)
		}{
			{"bad cron", "spec.updatePolicy.resizeWindows[0].schedule", func(g *gpufracv1.GPUFractionAutoscaler) {
				g.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "every night", Duration: metav1.Duration{Duration: time.Hour}}}
			}},
			{"bad time zone", "spec.updatePolicy.resizeWindows[0].timeZone", func(g *gpufracv1.GPUFractionAutoscaler) {
				g.Spec.UpdatePolicy.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "0 2 * * *", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Europe/Atlantis"}}
			}},
			{"unparsable PromQL", "spec.latencyGuardrail.query", func(g *gpufracv1.GPUFractionAutoscaler) {
				g.Spec.LatencyGuardrail = &gpufracv1.LatencyGuardrail{Query: `histogram_quantile(0.95, rate(x_bucket[5m]`, Objective: metav1.Duration{Duration: time.Second}}
			}},
			{"min > max", "minMemory", func(g *gpufracv1.GPUFractionAutoscaler) {
				g.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: "*", MinMemory: ptr.To(resource.MustParse("8Gi")), MaxMemory: ptr.To(resource.MustParse("4Gi"))}}}
			}},
			{"second autoscaler on the same target", "val-first", func(g *gpufracv1.GPUFractionAutoscaler) { g.Spec.TargetRef.Name = "val-target" }},
			{"target in another namespace", "spec.targetRef.name", func(g *gpufracv1.GPUFractionAutoscaler) { g.Spec.TargetRef.Name = "kube-system/coredns" }},
		} {
			g := admAutoscaler(admNS, "val-"+strings.ToLower(strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), ">", "gt")), gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi)
			tc.mod(g)
			err := c.Create(ctx, g)
			if err == nil {
				t.Errorf("%s: accepted", tc.name)
				continue
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%s: error %q does not name %s", tc.name, err, tc.field)
			}
			t.Logf("%s: %v", tc.name, err)
		}
	})

	backends := []gpufracv1.BackendType{gpufracv1.BackendHAMi, gpufracv1.BackendKAI, gpufracv1.BackendKAINVFractions, gpufracv1.BackendMPS, gpufracv1.BackendAnnotations}
	deps := map[string]*appsv1.Deployment{}
	recs := map[string]*gpufracv1.GPUFractionRecommendation{}
	t.Run("backends", func(t *testing.T) {
		names := []string{"off"}
		for _, b := range backends {
			names = append(names, string(b))
		}
		for _, name := range names {
			dep := gpuDeployment(admNS, name, "main", 0)
			create(t, dep)
			deps[name] = dep
			mode, b := gpufracv1.UpdateModeInitial, gpufracv1.BackendType(name)
			if name == "off" {
				mode, b = gpufracv1.UpdateModeOff, gpufracv1.BackendHAMi
			}
			gfa := admAutoscaler(admNS, name, mode, b)
			create(t, gfa)
			recs[name] = admRecommendation(t, gfa)
		}
		// The webhook's caches have the objects once a dry-run pod comes back mutated.
		for _, b := range backends {
			waitFor(t, 30*time.Second, "webhook cache has "+string(b), func() (bool, error) {
				p, err := dryRunPod(ctx, deps[string(b)])
				if err != nil {
					return false, err
				}
				_, ok := p.Annotations[gpufracv1.AnnotationApplied]
				return ok, nil
			})
		}
		for _, name := range names {
			scale(t, deps[name], 2)
		}
		for _, name := range names {
			waitFor(t, 60*time.Second, "2 pods of "+name, func() (bool, error) { return len(admPods(t, admNS, name)) == 2, nil })
		}
		for _, b := range backends {
			for _, p := range admPods(t, admNS, string(b)) {
				checkBackend(t, b, &p, recs[string(b)])
			}
		}
		for _, p := range admPods(t, admNS, "off") {
			if _, ok := p.Annotations[gpufracv1.AnnotationApplied]; ok {
				t.Errorf("Off autoscaler: pod %s was changed: %v", p.Name, p.Annotations)
			}
			if len(p.Spec.Containers[0].Resources.Limits) != 1 || p.Spec.SchedulerName != corev1.DefaultSchedulerName {
				t.Errorf("Off autoscaler: pod %s resources %v scheduler %s", p.Name, p.Spec.Containers[0].Resources, p.Spec.SchedulerName)
			}
		}
	})

	t.Run("unsafe pod", func(t *testing.T) {
		// KAI gives one fraction per pod and rejects whole GPUs next to it: a pod with two
		// GPU containers cannot be patched safely and is admitted unchanged, with an event.
		dep := gpuDeployment(admNS, "two-gpus", "main", 0)
		second := dep.Spec.Template.Spec.Containers[0]
		second.Name = "second"
		dep.Spec.Template.Spec.Containers = append(dep.Spec.Template.Spec.Containers, second)
		create(t, dep)
		gfa := admAutoscaler(admNS, "two-gpus", gpufracv1.UpdateModeInitial, gpufracv1.BackendKAI)
		create(t, gfa)
		admRecommendation(t, gfa)
		waitFor(t, 30*time.Second, "webhook cache has two-gpus", func() (bool, error) {
			var warnings []string
			cfg := rest.CopyConfig(testCluster.RESTConfig)
			cfg.WarningHandler = warningCollector{&warnings}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return false, err
			}
			p := depPod(dep, "", nil)
			if _, err := cs.CoreV1().Pods(admNS).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				return false, err
			}
			for _, w := range warnings {
				if strings.Contains(w, "whole GPUs") {
					t.Logf("admission warning: %s", w)
					return true, nil
				}
			}
			return false, fmt.Errorf("warnings %v", warnings)
		})
		scale(t, dep, 1)
		waitFor(t, 60*time.Second, "pod of two-gpus", func() (bool, error) { return len(admPods(t, admNS, "two-gpus")) == 1, nil })
		p := admPods(t, admNS, "two-gpus")[0]
		if _, ok := p.Annotations[gpufracv1.AnnotationApplied]; ok || p.Spec.SchedulerName != corev1.DefaultSchedulerName || len(p.Spec.Containers[0].Resources.Limits) != 1 {
			t.Errorf("unsafe pod changed: %v %v", p.Annotations, p.Spec.Containers[0].Resources)
		}
		waitFor(t, 30*time.Second, "FractionNotApplied event on the autoscaler", func() (bool, error) {
			var evs eventsv1.EventList
			if err := c.List(ctx, &evs, client.InNamespace(admNS)); err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Reason == "FractionNotApplied" && e.Regarding.Name == "two-gpus" && e.Regarding.Kind == "GPUFractionAutoscaler" {
					t.Logf("event: %s %s: %s", e.Type, e.Reason, e.Note)
					return true, nil
				}
			}
			return false, nil
		})
	})

	t.Run("init containers and native sidecars", func(t *testing.T) { admInitAndSidecars(t) })

	t.Run("namespace without autoscalers", func(t *testing.T) {
		dep := gpuDeployment(admNoneNS, "plain", "main", 2)
		create(t, dep)
		waitFor(t, 60*time.Second, "2 pods of plain", func() (bool, error) { return len(admPods(t, admNoneNS, "plain")) == 2, nil })
		for _, p := range admPods(t, admNoneNS, "plain") {
			if len(p.Annotations) != 0 || len(p.Spec.Containers[0].Resources.Limits) != 1 || len(p.Spec.Containers[0].Env) != 0 || p.Spec.SchedulerName != corev1.DefaultSchedulerName {
				t.Errorf("pod %s changed: annotations %v resources %v", p.Name, p.Annotations, p.Spec.Containers[0].Resources)
			}
		}
	})

	t.Run("status lease", func(t *testing.T) {
		waitFor(t, 15*time.Second, "status Lease fresh", func() (bool, error) {
			return statuslease.Fresh(ctx, c, admSystemNS, statuslease.DefaultName, 5*time.Second)
		})
	})

	t.Run("load", func(t *testing.T) { admLoad(t, wh) })

	var bundle string
	t.Run("graceful shutdown", func(t *testing.T) {
		mw := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Name: admConfigName}, mw); err != nil {
			t.Fatal(err)
		}
		bundle = string(mw.Webhooks[0].ClientConfig.CABundle)
		start := time.Now()
		wh.stop() // SIGTERM
		t.Logf("stopped in %v, exit code %d", time.Since(start).Round(time.Millisecond), wh.cmd.ProcessState.ExitCode())
		if code := wh.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0", code)
		}
		if fresh, err := statuslease.Fresh(ctx, c, admSystemNS, statuslease.DefaultName, time.Minute); err != nil || fresh {
			t.Errorf("status Lease fresh=%v (%v) right after a graceful stop, want released", fresh, err)
		}
	})
	wh = startAdmission(t)
	t.Run("restart reuses the CA", func(t *testing.T) {
		mw := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Name: admConfigName}, mw); err != nil {
			t.Fatal(err)
		}
		if string(mw.Webhooks[0].ClientConfig.CABundle) != bundle {
			t.Error("restart replaced the CA instead of reusing the Secret's")
		}
		if !strings.Contains(*mw.Webhooks[0].ClientConfig.URL, fmt.Sprint(wh.port)) {
			t.Errorf("webhook URL %s not updated to port %d", *mw.Webhooks[0].ClientConfig.URL, wh.port)
		}
		waitFor(t, 30*time.Second, "restarted webhook patches pods", func() (bool, error) {
			p, err := dryRunPod(ctx, deps[string(gpufracv1.BackendHAMi)])
			if err != nil {
				return false, err
			}
			_, ok := p.Annotations[gpufracv1.AnnotationApplied]
			return ok, nil
		})
	})

	t.Run("webhook hung", func(t *testing.T) {
		// A stopped process accepts connections (kernel backlog) but never answers: the
		// API server waits for the webhook's timeout (2s), then ignores it.
		if err := wh.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = wh.cmd.Process.Signal(syscall.SIGCONT) }()
		dep := deps[string(gpufracv1.BackendHAMi)]
		for i := range 2 {
			p := depPod(dep, fmt.Sprintf("while-hung-%d", i), map[string]string{"app": "after-kill"})
			start := time.Now()
			if err := c.Create(ctx, p); err != nil {
				t.Fatalf("pod not created while the webhook hangs (after %v): %v", time.Since(start), err)
			}
			t.Logf("pod %s created in %v while the webhook hangs (timeoutSeconds 2, failurePolicy Ignore)", p.Name, time.Since(start).Round(time.Millisecond))
			if err := c.Get(ctx, types.NamespacedName{Namespace: admNS, Name: p.Name}, &corev1.Pod{}); err != nil {
				t.Fatalf("pod %s does not exist: %v", p.Name, err)
			}
		}
	})

	t.Run("webhook killed", func(t *testing.T) {
		wh.kill()
		dep := deps[string(gpufracv1.BackendHAMi)]
		var worst time.Duration
		for i := range 5 {
			p := depPod(dep, fmt.Sprintf("after-kill-%d", i), map[string]string{"app": "after-kill"})
			start := time.Now()
			err := c.Create(ctx, p)
			d := time.Since(start)
			worst = max(worst, d)
			if err != nil {
				t.Fatalf("pod %d not created with the webhook down (after %v): %v", i, d, err)
			}
			t.Logf("pod %s created in %v with the webhook down", p.Name, d.Round(time.Microsecond))
			got := &corev1.Pod{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: admNS, Name: p.Name}, got); err != nil {
				t.Fatalf("pod %s does not exist: %v", p.Name, err)
			}
			if _, ok := got.Annotations[gpufracv1.AnnotationApplied]; ok {
				t.Errorf("pod %s mutated by a dead webhook", p.Name)
			}
		}
		t.Logf("slowest creation with the webhook down: %v (failurePolicy Ignore, timeout ≤ 3s)", worst.Round(time.Microsecond))
		// A Deployment still scales.
		scale(t, deps["annotations"], 3)
		waitFor(t, 60*time.Second, "3 pods of annotations", func() (bool, error) { return len(admPods(t, admNS, "annotations")) == 3, nil })
		// Without renewals the Lease goes stale, so the updater stops evicting.
		waitFor(t, 15*time.Second, "status Lease stale", func() (bool, error) {
			fresh, err := statuslease.Fresh(ctx, c, admSystemNS, statuslease.DefaultName, 3*time.Second)
			return !fresh, err
		})
	})
}

// warningCollector collects the API server's warnings (admission warnings included).
type warningCollector struct{ w *[]string }

func (c warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	*c.w = append(*c.w, text)
}

// checkBackend checks what backend b wrote into a pod of a Deployment whose
// recommendation is 3Gi / 250m (upper bound 4Gi), with a 256Mi hami overhead flag.
func checkBackend(t *testing.T, b gpufracv1.BackendType, p *corev1.Pod, rec *gpufracv1.GPUFractionRecommendation) {
	t.Helper()
	c := &p.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	lim := func(n corev1.ResourceName) string { q := c.Resources.Limits[n]; return q.String() }
	switch b {
	case gpufracv1.BackendHAMi:
		if lim("nvidia.com/gpumem") != "3328" || lim("nvidia.com/gpucores") != "25" || lim("nvidia.com/gpu") != "1" {
			t.Errorf("hami pod %s limits %v", p.Name, c.Resources.Limits)
		}
	case gpufracv1.BackendKAI:
		_, gpuLimit := c.Resources.Limits["nvidia.com/gpu"]
		_, gpuRequest := c.Resources.Requests["nvidia.com/gpu"]
		_, frac := p.Annotations["gpu-fraction"]
		if p.Annotations["gpu-memory"] != "3072" || frac || gpuLimit || gpuRequest || p.Spec.SchedulerName != "kai-scheduler" {
			t.Errorf("kai pod %s annotations %v resources %v scheduler %s", p.Name, p.Annotations, c.Resources, p.Spec.SchedulerName)
		}
	case gpufracv1.BackendKAINVFractions:
		if p.Annotations["nvidia.com/container.main.gpu-memory.request"] != "3Gi" || p.Annotations["nvidia.com/container.main.gpu-memory.limit"] != "4Gi" || p.Spec.SchedulerName != "kai-scheduler" {
			t.Errorf("kai-nvfractions pod %s annotations %v", p.Name, p.Annotations)
		}
	case gpufracv1.BackendMPS:
		if env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "25" || env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=3072M" {
			t.Errorf("mps pod %s env %v", p.Name, c.Env)
		}
	case gpufracv1.BackendAnnotations:
		if p.Annotations["gpufrac.io/gpu-memory"] != "3Gi" || p.Annotations["gpufrac.io/gpu-compute"] != "250m" {
			t.Errorf("annotations pod %s annotations %v", p.Name, p.Annotations)
		}
	}
	applied, err := gpufracv1.ParseApplied(p.Annotations)
	if err != nil || applied == nil {
		t.Fatalf("pod %s: applied record %v (%v)", p.Name, applied, err)
	}
	if applied.Backend != b || applied.Autoscaler != rec.Name || applied.RecommendationResourceVersion != rec.ResourceVersion || applied.ConfidencePercent != 90 {
		t.Errorf("pod %s: applied record %+v, want backend %s and recommendation resourceVersion %s", p.Name, applied, b, rec.ResourceVersion)
	}
	if ac := applied.Container("main"); ac == nil || ac.Memory == nil || ac.Memory.String() != "3Gi" {
		t.Errorf("pod %s: applied container %+v", p.Name, ac)
	}
}

// admLoad creates pods through the API server at admLoadRate per second for
// admLoadDuration and reports client-side latency, the webhook's server-side p99 (from
// gpufrac_admission_request_duration_seconds) and the API server's view of the webhook
// call (apiserver_admission_webhook_admission_duration_seconds).
func admLoad(t *testing.T, wh *admWebhook) {
	ctx := t.Context()
	dep := gpuDeployment(admNS, "load", "main", 0)
	create(t, dep)
	gfa := admAutoscaler(admNS, "load", gpufracv1.UpdateModeInitial, gpufracv1.BackendAnnotations)
	create(t, gfa)
	admRecommendation(t, gfa)
	waitFor(t, 30*time.Second, "webhook cache has load", func() (bool, error) {
		p, err := dryRunPod(ctx, dep)
		if err != nil {
			return false, err
		}
		_, ok := p.Annotations[gpufracv1.AnnotationApplied]
		return ok, nil
	})
	cfg := rest.CopyConfig(testCluster.RESTConfig)
	cfg.QPS, cfg.Burst = 2000, 2000
	lc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	before, err := framework.ScrapeHistogram(ctx, nil, fmt.Sprintf("http://127.0.0.1:%d/metrics", wh.metricsPort), "gpufrac_admission_request_duration_seconds", "webhook", admission.WebhookMutatePods)
	if err != nil {
		t.Fatal(err)
	}
	apiBefore, apiErr := apiserverWebhookHistogram(ctx)

	template := dep.Spec.Template.Spec.DeepCopy()
	template.SchedulerName = "e2e-unscheduled" // keep the scheduler out of the measurement
	var (
		mu       sync.Mutex
		lat      []time.Duration
		failures int
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 128)
	)
	n := int(admLoadDuration.Seconds() * float64(*admLoadRate))
	interval := time.Second / time.Duration(*admLoadRate)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: admNS, Name: fmt.Sprintf("load-%d", i), Labels: map[string]string{"app": "load-pods"},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: ptr.To(true)}}},
				Spec: *template.DeepCopy(),
			}
			s := time.Now()
			_, err := lc.CoreV1().Pods(admNS).Create(ctx, p, metav1.CreateOptions{})
			d := time.Since(s)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures++
				return
			}
			lat = append(lat, d)
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := framework.ScrapeHistogram(ctx, nil, fmt.Sprintf("http://127.0.0.1:%d/metrics", wh.metricsPort), "gpufrac_admission_request_duration_seconds", "webhook", admission.WebhookMutatePods)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lat)
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}
	delta := after.Sub(before)
	t.Logf("load: %d pods in %v (%.0f/s, target %d/s), %d failed; client-side create p50 %v p99 %v",
		len(lat), elapsed.Round(time.Millisecond), float64(len(lat))/elapsed.Seconds(), *admLoadRate, failures, pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond))
	t.Logf("load: webhook server-side (gpufrac_admission_request_duration_seconds): %d requests, p50 %s, p99 %s (interpolated in buckets), %.2f%% ≤ 5ms (target p99 ≤ 5ms)",
		delta.Count, fmtSeconds(delta.Quantile(0.5)), fmtSeconds(delta.Quantile(0.99)), 100*delta.FractionBelow(0.005))
	if apiErr == nil {
		if apiAfter, err := apiserverWebhookHistogram(ctx); err == nil {
			d := apiAfter.Sub(apiBefore)
			t.Logf("load: API server's webhook call (apiserver_admission_webhook_admission_duration_seconds): %d calls, p50 %s, p99 %s (interpolated)",
				d.Count, fmtSeconds(d.Quantile(0.5)), fmtSeconds(d.Quantile(0.99)))
		}
	} else {
		t.Logf("load: API server metrics unavailable: %v", apiErr)
	}
	if failures > 0 {
		t.Errorf("%d pod creations failed under load", failures)
	}
	if delta.Count < uint64(len(lat)) {
		t.Errorf("webhook saw %d requests for %d pods", delta.Count, len(lat))
	}
	var pods corev1.PodList
	if err := testCluster.Client.List(ctx, &pods, client.InNamespace(admNS), client.MatchingLabels{"app": "load-pods"}, client.Limit(5)); err == nil {
		for _, p := range pods.Items {
			if p.Annotations["gpufrac.io/gpu-memory"] != "3Gi" {
				t.Errorf("load pod %s not patched: %v", p.Name, p.Annotations)
			}
		}
	}
	if err := testCluster.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(admNS), client.MatchingLabels{"app": "load-pods"}, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		t.Logf("deleting load pods: %v", err)
	}
}

func fmtSeconds(s float64) string {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return fmt.Sprint(s)
	}
	return time.Duration(s * float64(time.Second)).String()
}

// apiserverWebhookHistogram reads the API server's own latency histogram of calls to
// the pod webhook.
func apiserverWebhookHistogram(ctx context.Context) (framework.Histogram, error) {
	return testCluster.APIServerHistogram(ctx, "apiserver_admission_webhook_admission_duration_seconds", "name", admission.MutatingWebhookName)
}

// admInitAndSidecars (issue 14 kind 4): a GPU held by a native sidecar (an init container
// with restartPolicy Always, next to a regular container without a GPU) reaches the
// webhook through its matchConditions and gets its fraction written, with hami
// (resources of spec.initContainers) and mps (env of spec.initContainers); a pod with a
// GPU init container that runs to completion is not skipped: its regular container gets
// the fraction, the init container is left as the pod asks. The recommendations are
// written as the recommender writes them: each says where its container sits, and the
// pod's confidence leaves the init container's 3 % out.
func admInitAndSidecars(t *testing.T) {
	ctx := t.Context()
	gpu := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}
	}
	limit := func(c *corev1.Container, n corev1.ResourceName) string { q := c.Resources.Limits[n]; return q.String() }
	sidecar := gpu("gpu-server")
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	cpuOnly := corev1.Container{Name: "app", Image: "registry.k8s.io/pause:3.10"}
	mem, cpu, big := resource.MustParse("3Gi"), resource.MustParse("250m"), resource.MustParse("6Gi")
	rec := func(name string, typ gpufracv1.ContainerType, m *resource.Quantity, conf int32) gpufracv1.ContainerRecommendation {
		return gpufracv1.ContainerRecommendation{ContainerName: name, ContainerType: typ, Target: gpufracv1.GPUResources{Memory: m, Compute: &cpu},
			SharingMode: gpufracv1.SharingModeMPS, SharingModeReason: "written by the e2e test", ConfidencePercent: conf, HistoryHours: 48}
	}
	cases := []struct {
		name    string
		backend gpufracv1.BackendType
		init    []corev1.Container
		main    corev1.Container
		recs    []gpufracv1.ContainerRecommendation
		written string                     // the one container in the applied record
		check   func(p *corev1.Pod) string // what is wrong with the pod, or ""
	}{
		{"sidecar-hami", gpufracv1.BackendHAMi, []corev1.Container{sidecar}, cpuOnly,
			[]gpufracv1.ContainerRecommendation{rec("gpu-server", gpufracv1.ContainerTypeSidecar, &mem, 90)}, "gpu-server",
			func(p *corev1.Pod) string {
				if c := &p.Spec.InitContainers[0]; limit(c, "nvidia.com/gpumem") != "3328" || limit(c, "nvidia.com/gpucores") != "25" || limit(c, "nvidia.com/gpu") != "1" {
					return fmt.Sprintf("sidecar limits %v", c.Resources.Limits)
				}
				return ""
			}},
		{"sidecar-mps", gpufracv1.BackendMPS, []corev1.Container{sidecar}, cpuOnly,
			[]gpufracv1.ContainerRecommendation{rec("gpu-server", gpufracv1.ContainerTypeSidecar, &mem, 90)}, "gpu-server",
			func(p *corev1.Pod) string {
				env := map[string]string{}
				for _, e := range p.Spec.InitContainers[0].Env {
					env[e.Name] = e.Value
				}
				if env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "25" || env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=3072M" || len(p.Spec.Containers[0].Env) != 0 {
					return fmt.Sprintf("sidecar env %v, app env %v", p.Spec.InitContainers[0].Env, p.Spec.Containers[0].Env)
				}
				return ""
			}},
		{"init-hami", gpufracv1.BackendHAMi, []corev1.Container{gpu("warmup")}, gpu("main"),
			[]gpufracv1.ContainerRecommendation{rec("main", gpufracv1.ContainerTypeRegular, &mem, 90), rec("warmup", gpufracv1.ContainerTypeInit, &big, 3)}, "main",
			func(p *corev1.Pod) string {
				if c := &p.Spec.Containers[0]; limit(c, "nvidia.com/gpumem") != "3328" {
					return fmt.Sprintf("main limits %v", c.Resources.Limits)
				}
				if c := &p.Spec.InitContainers[0]; len(c.Resources.Limits) != 1 || limit(c, "nvidia.com/gpu") != "1" {
					return fmt.Sprintf("init container changed: %v", c.Resources.Limits)
				}
				return ""
			}},
	}
	deps := map[string]*appsv1.Deployment{}
	for _, tc := range cases {
		dep := gpuDeployment(admNS, tc.name, "x", 0)
		dep.Spec.Template.Spec.InitContainers = tc.init
		dep.Spec.Template.Spec.Containers = []corev1.Container{tc.main}
		create(t, dep)
		deps[tc.name] = dep
		gfa := admAutoscaler(admNS, tc.name, gpufracv1.UpdateModeInitial, tc.backend)
		create(t, gfa)
		r := admRecommendation(t, gfa)
		r.Status.ContainerRecommendations = tc.recs
		if err := testCluster.Client.Status().Update(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		waitFor(t, 30*time.Second, "webhook cache has "+tc.name, func() (bool, error) {
			p, err := dryRunPod(ctx, deps[tc.name])
			if err != nil {
				return false, err
			}
			rec, err := gpufracv1.ParseApplied(p.Annotations)
			return err == nil && rec != nil && rec.Container(tc.written) != nil, err
		})
		scale(t, deps[tc.name], 1)
	}
	for _, tc := range cases {
		waitFor(t, 60*time.Second, "pod of "+tc.name, func() (bool, error) { return len(admPods(t, admNS, tc.name)) == 1, nil })
		p := admPods(t, admNS, tc.name)[0]
		applied, err := gpufracv1.ParseApplied(p.Annotations)
		if err != nil || applied == nil {
			t.Errorf("%s: pod %s not patched: applied record %v (%v)", tc.name, p.Name, applied, err)
			continue
		}
		if len(applied.Containers) != 1 || applied.Containers[0].Name != tc.written || applied.Containers[0].Memory.String() != "3Gi" {
			t.Errorf("%s: applied %+v, want only %s at 3Gi", tc.name, applied.Containers, tc.written)
		}
		if msg := tc.check(&p); msg != "" {
			t.Errorf("%s: pod %s: %s", tc.name, p.Name, msg)
		}
	}
}
