package recommender

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Changes to an autoscaler's target and to the autoscaler itself after it has a
// recommendation, each in the cycle after the first. What a user sees is asserted: the
// recommendation is kept where its workload is the same (no data is not zero), dropped
// where the target is another workload, and a condition or error names the change; a
// failed write of one autoscaler never stops another's.
func TestTargetAndAutoscalerChanges(t *testing.T) {
	type check func(t *testing.T, h *harness, first *gpufracv1.GPUFractionRecommendation, err error)
	kept := func(t *testing.T, h *harness, first *gpufracv1.GPUFractionRecommendation) *gpufracv1.GPUFractionRecommendation {
		t.Helper()
		got := h.gfr(t, "ml", "sd")
		if len(got.Status.ContainerRecommendations) != 1 || !got.Status.ContainerRecommendations[0].Target.Memory.Equal(*first.Status.ContainerRecommendations[0].Target.Memory) {
			t.Errorf("recommendation %+v, want the first one kept %+v", got.Status.ContainerRecommendations, first.Status.ContainerRecommendations)
		}
		return got
	}
	deleteAll := func(t *testing.T, h *harness, objs ...client.Object) {
		for _, o := range objs {
			if err := h.c.Delete(context.Background(), o); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		funcs func(h *harness) interceptor.Funcs // failure injection for the second cycle
		then  func(t *testing.T, h *harness, objs []client.Object)
		check check
	}{
		{name: "scaled to zero: kept, NoPodsMatched", then: func(t *testing.T, h *harness, objs []client.Object) {
			for _, p := range podsOf(objs) {
				if p.Labels["gfa"] == "sd" {
					deleteAll(t, h, p)
				}
			}
		}, check: func(t *testing.T, h *harness, first *gpufracv1.GPUFractionRecommendation, err error) {
			if err != nil {
				t.Fatal(err)
			}
			got := kept(t, h, first)
			if c := condition(got.Status, gpufracv1.ConditionNoPodsMatched); !isTrue(c) {
				t.Errorf("NoPodsMatched %+v, want True", c)
			}
			if c := condition(got.Status, gpufracv1.ConditionRecommendationProvided); !isTrue(c) {
				t.Errorf("RecommendationProvided %+v, want True (the fraction of the next pod)", c)
			}
		}},
		{name: "target deleted: kept, ConfigUnsupported TargetNotFound", then: func(t *testing.T, h *harness, objs []client.Object) {
			for _, o := range objs {
				if o.GetLabels()["gfa"] == "sd" {
					deleteAll(t, h, o)
				}
			}
		}, check: func(t *testing.T, h *harness, first *gpufracv1.GPUFractionRecommendation, err error) {
			if err != nil {
				t.Fatal(err)
			}
			got := kept(t, h, first)
			if c := condition(got.Status, gpufracv1.ConditionConfigUnsupported); !isTrue(c) || c.Reason != ReasonTargetNotFound {
				t.Errorf("ConfigUnsupported %+v, want True/%s", c, ReasonTargetNotFound)
			}
		}},
		{name: "target changed kind: dropped, TargetChanged", then: func(t *testing.T, h *harness, objs []client.Object) {
			create(t, h.c, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "sd", UID: "ml-sd-sts"}})
			var g gpufracv1.GPUFractionAutoscaler
			if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ml", Name: "sd"}, &g); err != nil {
				t.Fatal(err)
			}
			g.Spec.TargetRef.Kind = "StatefulSet"
			g.Generation++
			if err := h.c.Update(context.Background(), &g); err != nil {
				t.Fatal(err)
			}
		}, check: func(t *testing.T, h *harness, first *gpufracv1.GPUFractionRecommendation, err error) {
			if err != nil {
				t.Fatal(err)
			}
			got := h.gfr(t, "ml", "sd")
			if len(got.Status.ContainerRecommendations) != 0 {
				t.Errorf("the Deployment's recommendation kept for the StatefulSet: %+v", got.Status.ContainerRecommendations)
			}
			if c := condition(got.Status, gpufracv1.ConditionRecommendationProvided); !isFalse(c) || c.Reason != ReasonTargetChanged {
				t.Errorf("RecommendationProvided %+v, want False/%s", c, ReasonTargetChanged)
			}
		}},
		{name: "a second autoscaler on the Deployment's ReplicaSet: ConfigUnsupported names the Deployment", then: func(t *testing.T, h *harness, objs []client.Object) {
			g := gfa("ml", "rs", "")
			for _, o := range objs {
				if _, ok := o.(*appsv1.ReplicaSet); ok && o.GetLabels()["gfa"] == "sd" {
					g.Spec.TargetRef.Kind, g.Spec.TargetRef.Name = "ReplicaSet", o.GetName()
				}
			}
			create(t, h.c, g)
		}, check: func(t *testing.T, h *harness, first *gpufracv1.GPUFractionRecommendation, err error) {
			if err != nil {
				t.Fatal(err)
			}
			kept(t, h, first)
			rs := h.gfr(t, "ml", "rs")
			if c := condition(rs.Status, gpufracv1.ConditionConfigUnsupported); !isTrue(c) || c.Reason != ReasonTargetUnusable || !strings.Contains(c.Message, "target Deployment sd instead") {
				t.Errorf("ConfigUnsupported %+v, want True/%s naming Deployment sd", c, ReasonTargetUnusable)
			}
			if len(rs.Status.ContainerRecommendations) != 0 {
				t.Errorf("the ReplicaSet's autoscaler got a recommendation: %+v", rs.Status.ContainerRecommendations)
			}
		}},
		{name: "status write conflict (409): the other autoscaler written, the next cycle writes", funcs: func(h *harness) interceptor.Funcs {
			failed := false
			return interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*gpufracv1.GPUFractionRecommendation); ok && obj.GetName() == "sd" && !failed {
					failed = true
					return apierrors.NewConflict(schema.GroupResource{Group: gpufracv1.GroupVersion.Group, Resource: "gpufractionrecommendations"}, "sd", nil)
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			}}
		}, then: func(t *testing.T, h *harness, objs []client.Object) {
			h.prom.mu.Lock()
			for k := range h.prom.mem {
				h.prom.mem[k] = 70 * gib // both grow: a write that is lost shows
			}
			h.prom.mu.Unlock()
		}, check: func(t *testing.T, h *harness, first *gpufracv1.GPUFractionRecommendation, err error) {
			if err == nil || !strings.Contains(err.Error(), "ml/sd") {
				t.Errorf("cycle error %v, want the failed write of ml/sd", err)
			}
			other := h.gfr(t, "ml", "other").Status.ContainerRecommendations[0].Target.Memory
			if other.Cmp(*first.Status.ContainerRecommendations[0].Target.Memory) <= 0 {
				t.Errorf("other autoscaler not written in the cycle that failed for sd: %v", other)
			}
			h.now = h.now.Add(time.Minute)
			if err := h.rec.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0].Target.Memory; !got.Equal(*other) {
				t.Errorf("sd after the retry %v, want %v as the other", got, other)
			}
		}},
		{name: "autoscaler deleted mid-cycle: no cycle error, the other written", funcs: func(h *harness) interceptor.Funcs {
			return interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*gpufracv1.GPUFractionRecommendation); ok && key.Name == "sd" {
					// The user deletes the autoscaler, and the garbage collector its
					// recommendation, after the cycle listed it.
					g := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "sd"}}
					if err := c.Delete(ctx, g); err != nil && !apierrors.IsNotFound(err) {
						return err
					}
					r := &gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "sd"}}
					if err := c.Delete(ctx, r); err != nil && !apierrors.IsNotFound(err) {
						return err
					}
				}
				return c.Get(ctx, key, obj, opts...)
			}}
		}, check: func(t *testing.T, h *harness, first *gpufracv1.GPUFractionRecommendation, err error) {
			if err != nil {
				t.Errorf("cycle error %v: an autoscaler deleted meanwhile is nothing to write", err)
			}
			if len(h.gfr(t, "ml", "other").Status.ContainerRecommendations) != 1 {
				t.Error("the other autoscaler lost its recommendation")
			}
		}},
		{name: "namespace being deleted refuses the write: no cycle error, the other written", funcs: func(h *harness) interceptor.Funcs {
			return interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if obj.GetName() == "sd" {
					// What the API server's namespace lifecycle check answers in a
					// namespace being deleted.
					err := apierrors.NewForbidden(schema.GroupResource{Group: gpufracv1.GroupVersion.Group, Resource: "gpufractionrecommendations"}, "sd",
						fmt.Errorf("unable to create new content in namespace ml because it is being terminated"))
					err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: corev1.NamespaceTerminatingCause, Field: "ml"})
					return err
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			}}
		}, then: func(t *testing.T, h *harness, objs []client.Object) {
			h.prom.mu.Lock()
			for k := range h.prom.mem {
				h.prom.mem[k] = 70 * gib // both grow, so both have a write to make
			}
			h.prom.mu.Unlock()
		}, check: func(t *testing.T, h *harness, first *gpufracv1.GPUFractionRecommendation, err error) {
			if err != nil {
				t.Errorf("cycle error %v: a namespace being deleted is nothing to write", err)
			}
			if got := h.gfr(t, "ml", "other").Status.ContainerRecommendations[0].Target.Memory; got.Cmp(*first.Status.ContainerRecommendations[0].Target.Memory) <= 0 {
				t.Errorf("the other autoscaler not written: %v", got)
			}
		}},
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
			prom := promFor(objs, 20*gib, 0.3)
			h := newHarness(t, objs, prom)
			ctx := context.Background()
			if err := h.rec.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			first := h.gfr(t, "ml", "sd")
			if len(first.Status.ContainerRecommendations) != 1 {
				t.Fatalf("no first recommendation: %+v", first.Status.Conditions)
			}
			if tc.then != nil {
				tc.then(t, h, objs)
			}
			if tc.funcs != nil {
				f := tc.funcs(h)
				f.List = slimPods.List
				h.rec.Client = interceptor.NewClient(h.c.(client.WithWatch), f)
			}
			h.now = h.now.Add(time.Minute)
			tc.check(t, h, first, h.rec.RunOnce(ctx))
		})
	}
}

// One pod's GPU scraped by two targets (two exporters, or two scrape jobs, on one GPU):
// one of them goes down while the other goes on serving every field of the pod. The
// pod's data is whole, so no ExporterDown is raised and the recommendation follows the
// samples (here memory doubling): before, ExporterDown froze the recommendation for as
// long as the down target's series stayed in the history window, growth of
// incompressible memory included.
func TestRedundantTargetDownIsNoGap(t *testing.T) {
	objs := singlePodWorkloads("ml", "sd")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	p := podsOf(objs)[0]
	n := 48 * 120
	start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
	instances := []string{"10.0.0.5:9400", "10.0.0.6:9400"}
	add := func(i int, from time.Time, n int, up, memMiB float64) {
		for metric, v := range map[string]float64{metrics.DCGMFBUsed: memMiB, metrics.DCGMSMActive: 0.5} {
			l := dcgmLabels(metric, p, "GPU-1")
			l["job"], l["instance"] = "dcgm-exporter", instances[i]
			if up == 1 {
				h.prom.Add(t, l, from, 30*time.Second, promtest.Repeat(v, n)...)
			}
		}
		h.prom.Add(t, map[string]string{"__name__": "up", "job": "dcgm-exporter", "instance": instances[i]}, from, 30*time.Second, promtest.Repeat(up, n)...)
	}
	add(0, start, n, 1, 20000)
	add(1, start, n, 1, 20000)
	h.runCycles(t, 1, nil)
	first := *h.gfr(t, "ml", "sd").Status.ContainerRecommendations[0].Target.Memory
	for i := 0; i < 5; i++ {
		h.now = h.now.Add(time.Minute)
		add(0, h.now.Add(-30*time.Second), 2, 0, 40000)
		add(1, h.now.Add(-30*time.Second), 2, 1, 40000)
		h.runCycles(t, 1, nil)
		st := h.gfr(t, "ml", "sd").Status
		if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
			t.Fatalf("cycle %d: MetricsUnavailable %+v, want False: the other target serves every field of the pod", i, c)
		}
		if got := st.ContainerRecommendations[0].Target.Memory; got.Cmp(first) <= 0 {
			t.Fatalf("cycle %d: memory target %v, want above %v: the pod's memory doubled on the target still up", i, got, &first)
		}
	}
}

// One pod's GPU scraped twice, once with honor_labels (namespace, pod, container) and
// once without (exported_namespace, exported_pod, exported_container; namespace and pod
// name the exporter): one pod on one GPU, merged with max, never summed, never
// attributed to the exporter. Its recommendation equals that of a pod scraped once.
func TestBothScrapeStylesOfOnePodAreOneSeries(t *testing.T) {
	objs := singlePodWorkloads("ml", "twice", "once")
	h := newEngineHarness(t, objs, metrics.DCGM{})
	pods := podsOf(objs)
	exported := func(metric string) map[string]string {
		p := pods[0]
		return map[string]string{"__name__": metric, "exported_namespace": p.Namespace, "exported_pod": p.Name, "exported_container": "main",
			"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p", "container": "nvidia-dcgm-exporter",
			"instance": "10.0.0.5:9400", "job": "dcgm", "UUID": "GPU-1", "gpu": "0", "Hostname": "node-1"}
	}
	add := func(end time.Time, n int) {
		from := end.Add(-time.Duration(n-1) * 30 * time.Second)
		h.prom.Add(t, exported(metrics.DCGMFBUsed), from, 30*time.Second, promtest.Repeat(20000, n)...)
		h.prom.Add(t, exported(metrics.DCGMSMActive), from, 30*time.Second, promtest.Repeat(0.5, n)...)
		addDCGM(t, h.prom, pods[0], "GPU-1", end, n, 20000, 0.5)
		addDCGM(t, h.prom, pods[1], "GPU-2", end, n, 20000, 0.5)
	}
	add(h.now, 48*120)
	h.runCycles(t, 1, nil)
	for range 2 {
		h.now = h.now.Add(time.Minute)
		add(h.now, 2)
		h.runCycles(t, 1, nil)
	}
	twice, once := h.gfr(t, "ml", "twice").Status, h.gfr(t, "ml", "once").Status
	if len(twice.ContainerRecommendations) != 1 || len(once.ContainerRecommendations) != 1 {
		t.Fatalf("recommendations %+v / %+v", twice.Conditions, once.Conditions)
	}
	if !equality.Semantic.DeepEqual(twice.ContainerRecommendations[0].Target, once.ContainerRecommendations[0].Target) {
		t.Errorf("scraped twice %+v, once %+v: want equal", twice.ContainerRecommendations[0].Target, once.ContainerRecommendations[0].Target)
	}
	for _, typ := range []string{gpufracv1.ConditionMetricsUnavailable, gpufracv1.ConditionLowConfidence} {
		if c := condition(twice, typ); !isFalse(c) {
			t.Errorf("%s %+v, want False", typ, c)
		}
	}
	if c := condition(twice, gpufracv1.ConditionRecommendationProvided); !isTrue(c) {
		t.Errorf("RecommendationProvided %+v, want True (one GPU, not MultipleGPUs)", c)
	}
}
