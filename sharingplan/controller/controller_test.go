package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/internal/scheme"
	"github.com/gpufrac/gpufrac/sharingplan"
)

func node(name string, gpus, memMiB string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pool": "a", GPUCountLabel: gpus, GPUMemoryLabel: memMiB,
	}}}
}

// workload is an autoscaler ns/name of a Deployment of the same name and the
// recommendation the recommender writes for it: owned by it, provided, one container
// "main" with the memory and compute targets (also the pod's totals).
func workload(ns, name, mem, compute string, mode gpufracv1.SharingMode, pods int32) []client.Object {
	g := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name), Labels: map[string]string{"share": "yes"}}}
	g.Spec.TargetRef = autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name}
	r := &gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: name, UID: g.UID, Controller: ptr.To(true)}}}}
	r.Spec.TargetRef = g.Spec.TargetRef
	m := resource.MustParse(mem)
	r.Status.Memory, r.Status.SharingMode, r.Status.MatchedPods = &m, mode, pods
	r.Status.ConfidencePercent = ptr.To[int32](80)
	cr := gpufracv1.ContainerRecommendation{ContainerName: "main", SharingMode: mode, ConfidencePercent: 80, Target: gpufracv1.GPUResources{Memory: ptr.To(m.DeepCopy())}}
	if compute != "" {
		c := resource.MustParse(compute)
		r.Status.Compute = &c
		cr.Target.Compute = ptr.To(c.DeepCopy())
	}
	r.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{cr}
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue, Reason: "Recommended"})
	return []client.Object{g, r}
}

func setup(t *testing.T, mode gpufracv1.PlanMode, objs ...client.Object) (*Reconciler, client.WithWatch) {
	t.Helper()
	s := scheme.MustNew()
	pol := &gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: gpufracv1.GPUSharingPolicySpec{
		NodeSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
		AutoscalerSelector: metav1.LabelSelector{MatchLabels: map[string]string{"share": "yes"}},
		Mode:               mode,
		MaxReplicas:        8,
		ConfigMap:          gpufracv1.ConfigMapReference{Namespace: "gpu-operator", Name: "device-plugin-config"},
	}}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&gpufracv1.GPUSharingPolicy{}).WithObjects(append(objs, pol)...).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	return &Reconciler{Client: c}, c
}

func reconcile(t *testing.T, r *Reconciler, c client.Client) *gpufracv1.GPUSharingPolicy {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "pool-a"}}); err != nil {
		t.Fatal(err)
	}
	var pol gpufracv1.GPUSharingPolicy
	if err := c.Get(context.Background(), types.NamespacedName{Name: "pool-a"}, &pol); err != nil {
		t.Fatal(err)
	}
	return &pol
}

func pool() []client.Object {
	objs := []client.Object{node("n1", "2", "81920"), node("n2", "2", "40960")}
	other := node("n3", "4", "81920")
	other.Labels["pool"] = "b"
	objs = append(objs, other)
	objs = append(objs, workload("x", "big", "9Gi", "200m", gpufracv1.SharingModeTimeSlicing, 4)...)
	objs = append(objs, workload("y", "small", "2Gi", "100m", gpufracv1.SharingModeTimeSlicing, 3)...)
	notOpted := workload("y", "huge", "39Gi", "900m", gpufracv1.SharingModeTimeSlicing, 1)
	notOpted[0].SetLabels(nil)
	return append(objs, notOpted...)
}

func TestDryRunPlansAndWritesNothing(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeDryRun, pool()...)
	pol := reconcile(t, r, c)
	s := pol.Status
	// Smallest GPU of the pool 40Gi: 4 × 9Gi fit; compute 5 × 200m fit 1 GPU → N = 4.
	if s.Nodes != 2 || s.GPUs != 4 || s.Replicas != 4 || s.MemoryReplicas != 4 || s.ComputeReplicas != 5 || s.SharingMode != gpufracv1.SharingModeTimeSlicing {
		t.Fatalf("status %+v", s)
	}
	if s.Workloads != 2 || s.Pods != 7 || s.GPUsNeeded != 2 || s.GPUsFreed != 5 {
		t.Errorf("workloads %d pods %d needed %d freed %d, want 2 7 2 5", s.Workloads, s.Pods, s.GPUsNeeded, s.GPUsFreed)
	}
	if n, _, err := sharingplan.Replicas(s.Config); err != nil || n != 4 {
		t.Errorf("config %q: replicas %d %v", s.Config, n, err)
	}
	if cond := meta.FindStatusCondition(s.Conditions, gpufracv1.ConditionApplied); cond == nil || cond.Reason != gpufracv1.ReasonDryRun {
		t.Errorf("Applied condition %+v, want reason DryRun", cond)
	}
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "gpu-operator", Name: "device-plugin-config"}, &cm); !apierrors.IsNotFound(err) {
		t.Errorf("dry run wrote the ConfigMap (err %v)", err)
	}
	var nodes corev1.NodeList
	_ = c.List(context.Background(), &nodes)
	for _, n := range nodes.Items {
		if _, ok := n.Labels[gpufracv1.DevicePluginConfigLabel]; ok {
			t.Errorf("dry run labeled node %s", n.Name)
		}
	}
}

// A workload whose recommendation is under spec.minConfidence (default 50 %, the
// webhook's) bounds the pool to one pod per GPU with a reason naming it; with
// minConfidence 0 it sizes the pool like the others.
func TestUnconfidentWorkloadHoldsSharing(t *testing.T) {
	objs := pool()
	objs = append(objs, workload("y", "young", "1Gi", "50m", gpufracv1.SharingModeTimeSlicing, 1)...)
	objs[len(objs)-1].(*gpufracv1.GPUFractionRecommendation).Status.ConfidencePercent = ptr.To[int32](3)
	r, c := setup(t, gpufracv1.PlanModeDryRun, objs...)
	s := reconcile(t, r, c).Status
	if s.Replicas != 1 || s.SharingMode != gpufracv1.SharingModeExclusive || s.GPUsFreed != 0 || !strings.Contains(s.Reason, "y/young 3%") {
		t.Errorf("replicas %d mode %s freed %d reason %q, want 1 Exclusive 0 naming y/young 3%%", s.Replicas, s.SharingMode, s.GPUsFreed, s.Reason)
	}
	var pol gpufracv1.GPUSharingPolicy
	if err := c.Get(context.Background(), types.NamespacedName{Name: "pool-a"}, &pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.MinConfidence = ptr.To[int32](0)
	if err := c.Update(context.Background(), &pol); err != nil {
		t.Fatal(err)
	}
	if s := reconcile(t, r, c).Status; s.Replicas != 4 || s.Workloads != 3 {
		t.Errorf("minConfidence 0: replicas %d workloads %d, want 4 (memory bounds N) and 3", s.Replicas, s.Workloads)
	}
}

// A selected autoscaler whose workload's need is not known (no recommendation written
// yet, or one without a memory target while its pods run: no samples yet, a retarget)
// holds the pool to one pod per GPU like an unconfident one: no data is not zero, and
// its pods, admitted unchanged, would get a 1/N share on the pool. One that is in charge
// of no pod (another autoscaler of its workload is, or its target has none) is left out.
func TestUnknownNeedHoldsSharing(t *testing.T) {
	noMemory := func(name string, pods int32, dup bool) []client.Object {
		objs := workload("y", name, "1Gi", "", gpufracv1.SharingModeTimeSlicing, pods)
		rec := objs[1].(*gpufracv1.GPUFractionRecommendation)
		rec.Status.Memory, rec.Status.ConfidencePercent = nil, nil
		if dup {
			meta.SetStatusCondition(&rec.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionConfigUnsupported, Status: metav1.ConditionTrue, Reason: gpufracv1.ReasonDuplicateTarget})
		}
		return objs
	}
	for _, tc := range []struct {
		name     string
		objs     []client.Object
		replicas int32
		reason   string
	}{
		{"no recommendation yet", workload("y", "new", "1Gi", "", "", 2)[:1], 1, "y/new no confidence"},
		{"no memory target while pods run", noMemory("new", 2, false), 1, "y/new no confidence"},
		{"no memory target, no pods", noMemory("new", 0, false), 4, ""},
		{"a duplicate of another workload's autoscaler", noMemory("dup", 3, true), 4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := setup(t, gpufracv1.PlanModeDryRun, append(pool(), tc.objs...)...)
			s := reconcile(t, r, c).Status
			if s.Replicas != tc.replicas || !strings.Contains(s.Reason, tc.reason) {
				t.Errorf("replicas %d reason %q, want %d naming %q", s.Replicas, s.Reason, tc.replicas, tc.reason)
			}
		})
	}
}

func TestApplyWritesConfigAndLabelsKeepingOtherKeys(t *testing.T) {
	existing := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator", Name: "device-plugin-config"}, Data: map[string]string{"default": "version: v1\n"}}
	r, c := setup(t, gpufracv1.PlanModeApply, append(pool(), existing)...)
	pol := reconcile(t, r, c)
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "gpu-operator", Name: "device-plugin-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["default"] != "version: v1\n" {
		t.Errorf("other key lost: %v", cm.Data)
	}
	if n, mode, err := sharingplan.Replicas(cm.Data["gpufrac-pool-a"]); err != nil || n != 4 || mode != gpufracv1.SharingModeTimeSlicing {
		t.Errorf("entry %q: %s ×%d %v", cm.Data["gpufrac-pool-a"], mode, n, err)
	}
	var nodes corev1.NodeList
	_ = c.List(context.Background(), &nodes)
	for _, n := range nodes.Items {
		want := map[string]string{"n1": "gpufrac-pool-a", "n2": "gpufrac-pool-a", "n3": ""}[n.Name]
		if got := n.Labels[gpufracv1.DevicePluginConfigLabel]; got != want {
			t.Errorf("node %s label %q, want %q", n.Name, got, want)
		}
	}
	if cond := meta.FindStatusCondition(pol.Status.Conditions, gpufracv1.ConditionApplied); cond == nil || cond.Status != metav1.ConditionTrue || pol.Status.LabeledNodes != 2 {
		t.Errorf("Applied %+v, labeled %d", cond, pol.Status.LabeledNodes)
	}
}

func TestNoRecommendationKeepsLastPlan(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeApply, node("n1", "1", "81920"))
	pol := reconcile(t, r, c)
	cond := meta.FindStatusCondition(pol.Status.Conditions, gpufracv1.ConditionPlanned)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != gpufracv1.ReasonNoRecommendations {
		t.Fatalf("Planned %+v, want False NoRecommendations", cond)
	}
	if pol.Status.Replicas != 0 {
		t.Errorf("replicas %d without recommendations", pol.Status.Replicas)
	}
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "gpu-operator", Name: "device-plugin-config"}, &cm); !apierrors.IsNotFound(err) {
		t.Errorf("wrote a ConfigMap without a plan (err %v)", err)
	}
}

// The plan is sized for the smallest GPU of the pool: spec.gpuMemory only ever lowers
// the smallest nvidia.com/gpu.memory label of the selected nodes (room for CUDA
// contexts), never raises it, since every GPU of the pool gets the same N replicas.
func TestGPUMemoryIsThePoolsSmallest(t *testing.T) {
	const mib = int64(sharingplan.MiB)
	cases := []struct {
		name   string
		spec   string // "": omitted
		labels []string
		want   int64
	}{
		{"labels only, one size", "", []string{"81559", "81559"}, 81559 * mib},
		{"labels only, mixed L4/H100/H200", "", []string{"143771", "23034", "81559"}, 23034 * mib},
		{"spec below the smallest label", "70Gi", []string{"81559", "143771"}, 70 << 30},
		{"spec above the smallest label (H100 and L4 pool)", "80Gi", []string{"81559", "23034"}, 23034 * mib},
		{"spec above every label (141Gi on H100s)", "141Gi", []string{"81559"}, 81559 * mib},
		{"spec equal to the label", "40960Mi", []string{"40960"}, 40960 * mib},
		{"spec without labels", "48Gi", []string{"", "x"}, 48 << 30},
		{"neither", "", []string{"", "0", "-5"}, 0},
		// 2^43 MiB and more are beyond int64 bytes: no GPU's size, not a wrapped one.
		{"a label beyond int64 bytes", "", []string{"8796093022208"}, 0},
		{"a label beyond int64 bytes next to a valid one", "", []string{"99999999999999", "81559"}, 81559 * mib},
		{"a label beyond int64 bytes with spec", "48Gi", []string{"8796093022208"}, 48 << 30},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := &gpufracv1.GPUSharingPolicy{}
			if tc.spec != "" {
				q := resource.MustParse(tc.spec)
				pol.Spec.GPUMemory = &q
			}
			var nodes []corev1.Node
			for i, l := range tc.labels {
				nodes = append(nodes, *node("n"+string(rune('a'+i)), "1", l))
			}
			if got := gpuMemory(pol, nodes); got != tc.want {
				t.Errorf("gpuMemory = %d (%dMiB), want %d (%dMiB)", got, got/mib, tc.want, tc.want/mib)
			}
		})
	}
}

// A spec.gpuMemory above a node's GPU does not size the replicas: a pool of an 80Gi and
// a 40Gi node with spec.gpuMemory 80Gi is planned as the dry run without it (40Gi: 4 ×
// 9Gi), not 8 replicas that would give each pod 5Gi on the 40Gi GPUs.
func TestSpecGPUMemoryAboveAPoolGPU(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeDryRun, pool()...)
	var pol gpufracv1.GPUSharingPolicy
	if err := c.Get(context.Background(), types.NamespacedName{Name: "pool-a"}, &pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.GPUMemory = ptr.To(resource.MustParse("80Gi"))
	if err := c.Update(context.Background(), &pol); err != nil {
		t.Fatal(err)
	}
	s := reconcile(t, r, c).Status
	if s.GPUMemory == nil || s.GPUMemory.Value() != 40960*int64(sharingplan.MiB) || s.Replicas != 4 || s.MemoryReplicas != 4 {
		t.Errorf("gpuMemory %v replicas %d memoryReplicas %d, want 40Gi 4 4", s.GPUMemory, s.Replicas, s.MemoryReplicas)
	}
}

// TestPlannerReadsWhatTheWebhookApplies: the planner sizes N from a workload's
// recommendation only where the webhook would apply it (contract.Applies: the
// autoscaler not being deleted, the recommendation its own — not an earlier autoscaler's,
// not orphaned, not made for another target — and provided), and at the memory the
// webhook writes (contract.PodMemory: the policy's minMemory raises a recommendation
// that predates it). A workload whose recommendation does not apply, while its pods
// run, is one of unknown need: its pods are admitted unchanged and would get a 1/N
// share, so it holds the pool to one pod per GPU and the reason says why; with no pods
// it is left out. The pool's smallest GPU is 40Gi; alone, the others give N = 4.
func TestPlannerReadsWhatTheWebhookApplies(t *testing.T) {
	type edit func(g *gpufracv1.GPUFractionAutoscaler, r *gpufracv1.GPUFractionRecommendation)
	for _, tc := range []struct {
		name     string
		pods     int32
		edit     edit
		replicas int32
		reason   string
	}{
		{"applies", 2, func(*gpufracv1.GPUFractionAutoscaler, *gpufracv1.GPUFractionRecommendation) {}, 4, ""},
		{"an earlier autoscaler's", 2, func(_ *gpufracv1.GPUFractionAutoscaler, r *gpufracv1.GPUFractionRecommendation) {
			r.OwnerReferences[0].UID = "earlier"
		}, 1, "y/w: stale-recommendation"},
		{"orphaned", 2, func(_ *gpufracv1.GPUFractionAutoscaler, r *gpufracv1.GPUFractionRecommendation) {
			r.OwnerReferences = nil
		}, 1, "y/w: stale-recommendation"},
		{"retargeted", 2, func(g *gpufracv1.GPUFractionAutoscaler, _ *gpufracv1.GPUFractionRecommendation) {
			g.Spec.TargetRef.Name = "other"
		}, 1, "y/w: stale-recommendation"},
		{"not provided (multi-GPU pods)", 2, func(_ *gpufracv1.GPUFractionAutoscaler, r *gpufracv1.GPUFractionRecommendation) {
			meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionFalse, Reason: "MultipleGPUs"})
		}, 1, "y/w: no-recommendation"},
		{"autoscaler being deleted", 2, func(g *gpufracv1.GPUFractionAutoscaler, _ *gpufracv1.GPUFractionRecommendation) {
			g.DeletionTimestamp, g.Finalizers = ptr.To(metav1.Now()), []string{"foregroundDeletion"}
		}, 1, "y/w: autoscaler-deleting"},
		{"orphaned, no pods: left out", 0, func(_ *gpufracv1.GPUFractionAutoscaler, r *gpufracv1.GPUFractionRecommendation) {
			r.OwnerReferences = nil
		}, 4, ""},
		{"minMemory 15Gi over a 1Gi recommendation: 2 per 40Gi", 2, minMemory("15Gi"), 2, "memory: 2 × 15360MiB (y/w)"},
		{"minMemory 30Gi: one per GPU", 2, minMemory("30Gi"), 1, "memory: 1 × 30720MiB (y/w)"},
		{"minMemory below the recommendation", 2, minMemory("512Mi"), 4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := workload("y", "w", "1Gi", "50m", gpufracv1.SharingModeTimeSlicing, tc.pods)
			tc.edit(objs[0].(*gpufracv1.GPUFractionAutoscaler), objs[1].(*gpufracv1.GPUFractionRecommendation))
			r, c := setup(t, gpufracv1.PlanModeDryRun, append(pool(), objs...)...)
			s := reconcile(t, r, c).Status
			if s.Replicas != tc.replicas || !strings.Contains(s.Reason, tc.reason) {
				t.Errorf("replicas %d reason %q, want %d naming %q", s.Replicas, s.Reason, tc.replicas, tc.reason)
			}
		})
	}
}

// minMemory sets the autoscaler's minMemory for every container.
func minMemory(q string) func(g *gpufracv1.GPUFractionAutoscaler, _ *gpufracv1.GPUFractionRecommendation) {
	return func(g *gpufracv1.GPUFractionAutoscaler, _ *gpufracv1.GPUFractionRecommendation) {
		g.Spec.ResourcePolicy = &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{{ContainerName: "*", MinMemory: ptr.To(resource.MustParse(q))}}}
	}
}

// Two policies in Apply mode whose node selectors both match a node would each write
// their own config name into its nvidia.com/device-plugin.config label, once a minute
// each: the device plugin would switch configs back and forth, and the pods placed by
// one plan's nodeSelector would land under the other's sharing. A node labeled for
// another policy that selects it too stays with that one: the second policy writes no
// label at all (not even on nodes only it selects: its plan is not applied while it
// overlaps), is Applied False (NodesClaimed, naming the node and the policy) and says
// so in an event.
func TestOverlappingPoliciesNeverRelabelEachOthersNodes(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeApply, pool()...)
	all := &gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}, Spec: gpufracv1.GPUSharingPolicySpec{
		NodeSelector:       metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: GPUCountLabel, Operator: metav1.LabelSelectorOpExists}}},
		AutoscalerSelector: metav1.LabelSelector{MatchLabels: map[string]string{"share": "yes"}},
		Mode:               gpufracv1.PlanModeApply,
		MaxReplicas:        8,
		ConfigMap:          gpufracv1.ConfigMapReference{Namespace: "gpu-operator", Name: "device-plugin-config"},
	}}
	if err := c.Create(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	if pol := reconcile(t, r, c); !meta.IsStatusConditionTrue(pol.Status.Conditions, gpufracv1.ConditionApplied) {
		t.Fatalf("pool-a not applied: %+v", pol.Status.Conditions)
	}
	writes := 0
	r.Client = interceptClient(c, &writes)
	rec := events.NewFakeRecorder(20)
	r.Events = rec
	for range 3 {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "all"}}); err != nil {
			t.Fatal(err)
		}
		reconcile(t, r, c)
	}
	var nodes corev1.NodeList
	if err := c.List(context.Background(), &nodes); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"n1": "gpufrac-pool-a", "n2": "gpufrac-pool-a", "n3": ""}
	for _, n := range nodes.Items {
		if got := n.Labels[gpufracv1.DevicePluginConfigLabel]; got != want[n.Name] {
			t.Errorf("node %s labeled %q, want %q", n.Name, got, want[n.Name])
		}
	}
	if writes != 0 {
		t.Errorf("%d node label writes over three rounds, want none", writes)
	}
	var got gpufracv1.GPUSharingPolicy
	if err := c.Get(context.Background(), types.NamespacedName{Name: "all"}, &got); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, gpufracv1.ConditionApplied)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != gpufracv1.ReasonNodesClaimed ||
		!strings.Contains(cond.Message, "n1") || !strings.Contains(cond.Message, "pool-a") {
		t.Errorf("policy all's Applied condition %+v, want False NodesClaimed naming n1 and pool-a", cond)
	}
	if pol := reconcile(t, r, c); !meta.IsStatusConditionTrue(pol.Status.Conditions, gpufracv1.ConditionApplied) {
		t.Errorf("pool-a no longer applied: %+v", pol.Status.Conditions)
	}
	claims := 0
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, gpufracv1.ReasonNodesClaimed) {
			claims++
		}
	}
	if claims != 1 {
		t.Errorf("%d NodesClaimed events over three rounds, want 1", claims)
	}
}

// interceptClient counts the node patches made through c into *writes.
func interceptClient(c client.WithWatch, writes *int) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*corev1.Node); ok {
			*writes++
		}
		return cl.Patch(ctx, obj, patch, opts...)
	}})
}

// A node that leaves the nodeSelector after it was labeled (its pool label changed, the
// selector narrowed) keeps nvidia.com/device-plugin.config: its device plugin still
// runs the plan's entry and the plan's pods still land on it by that label. The plan
// keeps sizing N for its GPU (40Gi: 4 × 9Gi), the reason names it, and the planner
// neither relabels nor unlabels it; once the label is gone the plan sizes for the pool
// alone (80Gi: compute bounds N to 5). Before, the plan at once sized for the 80Gi node
// alone (N = 5) and the 40Gi GPU of the node that still ran the entry was shared 5 ways
// by pods sized for 80Gi / 5.
func TestNodeLeavingThePoolStillSizesThePlanWhileLabeled(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeApply, pool()...)
	if s := reconcile(t, r, c).Status; s.Replicas != 4 || s.LabeledNodes != 2 {
		t.Fatalf("first plan: replicas %d labeled %d, want 4 2", s.Replicas, s.LabeledNodes)
	}
	ctx := context.Background()
	var n2 corev1.Node
	if err := c.Get(ctx, types.NamespacedName{Name: "n2"}, &n2); err != nil {
		t.Fatal(err)
	}
	n2.Labels["pool"] = "c"
	if err := c.Update(ctx, &n2); err != nil {
		t.Fatal(err)
	}
	pol := reconcile(t, r, c)
	s := pol.Status
	if s.Replicas != 4 || s.GPUMemory.Value() != 40960*int64(sharingplan.MiB) || s.Nodes != 1 || !strings.Contains(s.Reason, "(n2)") {
		t.Errorf("after n2 left the pool: replicas %d gpuMemory %v nodes %d reason %q, want 4 40Gi 1 naming n2", s.Replicas, s.GPUMemory, s.Nodes, s.Reason)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: "gpu-operator", Name: "device-plugin-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	if n, _, err := sharingplan.Replicas(cm.Data["gpufrac-pool-a"]); err != nil || n != 4 {
		t.Errorf("entry %q: replicas %d %v, want 4", cm.Data["gpufrac-pool-a"], n, err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "n2"}, &n2); err != nil {
		t.Fatal(err)
	}
	if got := n2.Labels[gpufracv1.DevicePluginConfigLabel]; got != "gpufrac-pool-a" {
		t.Errorf("n2 label %q, want it left as it was", got)
	}
	delete(n2.Labels, gpufracv1.DevicePluginConfigLabel)
	if err := c.Update(ctx, &n2); err != nil {
		t.Fatal(err)
	}
	if s := reconcile(t, r, c).Status; s.Replicas != 5 || strings.Contains(s.Reason, "n2") {
		t.Errorf("after n2's label was removed: replicas %d reason %q, want 5 without n2", s.Replicas, s.Reason)
	}
}

// sharedPod is a pod on node that the device-plugin webhook placed on policy's plan at
// replicas per GPU for autoscaler ns/autoscaler ("": no gpufrac.io/applied record).
func sharedPod(ns, name, node, policy, replicas, autoscaler string, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{
		backend.AnnotationSharingPolicy: policy, backend.AnnotationSharingReplicas: replicas, backend.AnnotationSharingGPUMemory: "40Gi",
	}}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	if autoscaler != "" {
		p.Annotations[gpufracv1.AnnotationApplied] = `{"backend":"nvidia-timeslicing","autoscaler":"` + autoscaler + `","recommendationGeneration":1,"recommendationResourceVersion":"1","confidencePercent":80,"containers":[{"name":"main"}]}`
	}
	return p
}

// A workload that leaves the plan while its pods run on the pool — its autoscaler opted
// out (the selector's label removed) or deleted — is no longer sized by the planner, but
// its pods still share their GPUs at the replicas they were admitted at. The plan never
// shares such a GPU more ways than that: N is held at the least of those pods' replicas,
// and the reason names the pod. Pods of planned workloads (whichever policy placed
// them), finished pods and pods on nodes outside the plan do not hold it. Before, the plan rose to what the remaining workloads
// allowed (here 4, from 2) and the device plugin put twice the pods on the GPU under a
// pod whose need nobody sized (y/huge: 39Gi).
func TestPodsOfAWorkloadNoLongerPlannedHoldTheirShare(t *testing.T) {
	objs := append(pool(),
		sharedPod("x", "big-1", "n1", "pool-a", "2", "big", corev1.PodRunning),             // planned workload
		sharedPod("y", "huge-1", "n2", "pool-a", "2", "huge", corev1.PodRunning),           // opted out (no label)
		sharedPod("y", "gone-1", "n1", "pool-a", "3", "gone", corev1.PodRunning),           // autoscaler deleted
		sharedPod("y", "gone-0", "n1", "pool-a", "1", "gone", corev1.PodSucceeded),         // finished
		sharedPod("y", "small-9", "n1", "pool-b", "1", "small", corev1.PodRunning),         // another policy placed it; planned here
		sharedPod("z", "elsewhere-1", "n3", "pool-a", "1", "elsewhere", corev1.PodRunning), // not on a node of the plan
	)
	r, c := setup(t, gpufracv1.PlanModeApply, objs...)
	s := reconcile(t, r, c).Status
	if s.Replicas != 2 || s.MemoryReplicas != 4 || !strings.Contains(s.Reason, "held at 2: pod y/huge-1 (autoscaler y/huge) on node n2") || !strings.Contains(s.Reason, "1 more") {
		t.Errorf("replicas %d memoryReplicas %d reason %q, want 2 4 held by y/huge-1 with 1 more", s.Replicas, s.MemoryReplicas, s.Reason)
	}
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "gpu-operator", Name: "device-plugin-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	if n, _, err := sharingplan.Replicas(cm.Data["gpufrac-pool-a"]); err != nil || n != 2 {
		t.Errorf("entry %q: replicas %d %v, want 2", cm.Data["gpufrac-pool-a"], n, err)
	}
	// Once those pods are gone the plan follows the recommendations again.
	for _, name := range []string{"huge-1", "gone-1"} {
		if err := c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "y", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	if s := reconcile(t, r, c).Status; s.Replicas != 4 || strings.Contains(s.Reason, "held") {
		t.Errorf("after the held pods left: replicas %d reason %q, want 4", s.Replicas, s.Reason)
	}
	// A pod whose record cannot be read holds the pool at its replicas too.
	if err := c.Create(context.Background(), sharedPod("y", "norecord-1", "n2", "pool-a", "3", "", corev1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	if s := reconcile(t, r, c).Status; s.Replicas != 3 || !strings.Contains(s.Reason, "no readable") {
		t.Errorf("with a pod without a record: replicas %d reason %q, want 3", s.Replicas, s.Reason)
	}
}

// setMemory sets the memory target of recommendation ns/name (pod total and its one
// container), as the recommender's next write.
func setMemory(t *testing.T, c client.Client, ns, name, mem string) {
	t.Helper()
	var rec gpufracv1.GPUFractionRecommendation
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &rec); err != nil {
		t.Fatal(err)
	}
	m := resource.MustParse(mem)
	rec.Status.Memory = &m
	rec.Status.ContainerRecommendations[0].Target.Memory = ptr.To(m.DeepCopy())
	if err := c.Update(context.Background(), &rec); err != nil {
		t.Fatal(err)
	}
}

// unlabel removes the device-plugin config label from the named nodes.
func unlabel(t *testing.T, c client.Client, names ...string) {
	t.Helper()
	for _, name := range names {
		var n corev1.Node
		if err := c.Get(context.Background(), types.NamespacedName{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		delete(n.Labels, gpufracv1.DevicePluginConfigLabel)
		if err := c.Update(context.Background(), &n); err != nil {
			t.Fatal(err)
		}
	}
}

// raiseDelayClock gives r a RaiseDelay of 5 minutes and a clock that starts at
// 2026-12-03T12:00:00Z; the function it returns sets the clock to that plus its argument.
func raiseDelayClock(r *Reconciler) func(time.Duration) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	now := t0
	r.RaiseDelay, r.Now = 5*time.Minute, func() time.Time { return now }
	return func(d time.Duration) { now = t0.Add(d) }
}

// poolEntry returns the replicas and the sharing mode of policy pool-a's entry in the
// device-plugin ConfigMap (sharingplan.Replicas); the test fails if it cannot be read.
func poolEntry(t *testing.T, c client.Client) (int, gpufracv1.SharingMode) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "gpu-operator", Name: "device-plugin-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	n, mode, err := sharingplan.Replicas(cm.Data["gpufrac-pool-a"])
	if err != nil {
		t.Fatal(err)
	}
	return n, mode
}

// Recommendations that move back and forth across a boundary (the largest memory target
// around a quarter of the 40Gi GPU: 9Gi → 4 per GPU, 6Gi → compute's 5) do not move the
// plan with them: a raise is planned only once every plan has allowed it for
// RaiseDelay (the reason says until when), a fall at once. Before, each move rewrote
// the device-plugin entry, the device plugin restarting on every node of the pool (and
// with MPS its daemon under the running clients) at every recommender cycle that crossed
// the boundary.
func TestPlanRisesOnlyAfterTheRaiseDelay(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeApply, pool()...)
	at := raiseDelayClock(r)
	step := func(after time.Duration, mem string, want int32, wantReason string) {
		t.Helper()
		at(after)
		setMemory(t, c, "x", "big", mem)
		s := reconcile(t, r, c).Status
		if n, _ := poolEntry(t, c); s.Replicas != want || !strings.Contains(s.Reason, wantReason) || n != int(want) {
			t.Errorf("at %s with %s: replicas %d (entry %d) reason %q, want %d with %q", after, mem, s.Replicas, n, s.Reason, want, wantReason)
		}
	}
	step(0, "9Gi", 4, "memory: 4 × 9216MiB")                                   // first plan: at once
	step(1*time.Minute, "6Gi", 4, "held at 4 until 2026-12-03T12:06:00Z")      // raise waits
	step(2*time.Minute, "9Gi", 4, "memory: 4 × 9216MiB")                       // back: the wait ends
	step(3*time.Minute, "6Gi", 4, "held at 4 until 2026-12-03T12:08:00Z")      // a new wait
	step(7*time.Minute, "6Gi", 4, "the recommendations allow 5 (compute: 5 ×") // still waiting
	step(8*time.Minute, "6Gi", 5, "compute: 5 × 200m")                         // raised
	step(9*time.Minute, "12Gi", 3, "memory: 3 × 12288MiB")                     // a fall: at once
}

// A selected node without a valid nvidia.com/gpu.memory label (it joined the pool before
// GPU feature discovery labeled it) has a GPU of unknown size, which the plan does not
// count: without spec.gpuMemory it is not labeled, and the Applied message names it,
// until the label comes (then the plan counts it: 24Gi, 2 × 9Gi). With spec.gpuMemory
// (the user's bound on every GPU of the pool) it is labeled. Before, it was labeled at
// once and its GPUs shared 4 ways by pods sized for the others' 40Gi.
func TestNodeOfUnknownGPUSizeIsNotLabeled(t *testing.T) {
	objs := append(pool(), node("n4", "1", ""))
	r, c := setup(t, gpufracv1.PlanModeApply, objs...)
	ctx := context.Background()
	label := func(name string) string {
		var n corev1.Node
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		return n.Labels[gpufracv1.DevicePluginConfigLabel]
	}
	pol := reconcile(t, r, c)
	cond := meta.FindStatusCondition(pol.Status.Conditions, gpufracv1.ConditionApplied)
	if pol.Status.Replicas != 4 || label("n4") != "" || label("n1") != "gpufrac-pool-a" || pol.Status.LabeledNodes != 2 || cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "left unlabeled (n4)") {
		t.Errorf("replicas %d n4 label %q labeled %d Applied %+v, want 4, n4 unlabeled and named", pol.Status.Replicas, label("n4"), pol.Status.LabeledNodes, cond)
	}
	var n4 corev1.Node
	if err := c.Get(ctx, types.NamespacedName{Name: "n4"}, &n4); err != nil {
		t.Fatal(err)
	}
	n4.Labels[GPUMemoryLabel] = "24576"
	if err := c.Update(ctx, &n4); err != nil {
		t.Fatal(err)
	}
	if pol := reconcile(t, r, c); pol.Status.Replicas != 2 || label("n4") != "gpufrac-pool-a" || pol.Status.LabeledNodes != 3 {
		t.Errorf("once labeled 24Gi: replicas %d n4 label %q labeled %d, want 2 gpufrac-pool-a 3", pol.Status.Replicas, label("n4"), pol.Status.LabeledNodes)
	}

	objs = append(pool(), node("n4", "1", ""))
	r, c = setup(t, gpufracv1.PlanModeApply, objs...)
	if err := c.Get(ctx, types.NamespacedName{Name: "pool-a"}, pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.GPUMemory = ptr.To(resource.MustParse("20Gi"))
	if err := c.Update(ctx, pol); err != nil {
		t.Fatal(err)
	}
	if pol := reconcile(t, r, c); pol.Status.Replicas != 2 || label("n4") != "gpufrac-pool-a" {
		t.Errorf("with spec.gpuMemory 20Gi: replicas %d n4 label %q, want 2 gpufrac-pool-a", pol.Status.Replicas, label("n4"))
	}
}

// Every node of the pool leaves the nodeSelector while labeled (the pool's label renamed
// on all its nodes, or the selector changed to match none): the nodes still run the
// plan's entry and the webhook still places the plan's pods on them by the label, so
// the plan keeps sizing for them, as for one node that leaves (strayNodes), and a
// smaller N reaches their device plugin. Before, the plan stopped (Planned False
// NoNodes) with Applied still True: the entry stayed at 4 while the largest target grew
// to 15Gi (2 per 40Gi GPU), and the webhook kept placing pods at a 10Gi share.
func TestWholePoolLeavingTheSelectorStillPlannedWhileLabeled(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeApply, pool()...)
	if s := reconcile(t, r, c).Status; s.Replicas != 4 || s.LabeledNodes != 2 {
		t.Fatalf("first plan: replicas %d labeled %d, want 4 2", s.Replicas, s.LabeledNodes)
	}
	ctx := context.Background()
	for _, name := range []string{"n1", "n2"} {
		var n corev1.Node
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		n.Labels["pool"] = "c"
		if err := c.Update(ctx, &n); err != nil {
			t.Fatal(err)
		}
	}
	setMemory(t, c, "x", "big", "15Gi")
	pol := reconcile(t, r, c)
	s := pol.Status
	if s.Replicas != 2 || s.Nodes != 0 || !strings.Contains(s.Reason, "n1, n2") || !strings.Contains(s.Reason, "matches no node") {
		t.Errorf("after every node left the selector: replicas %d nodes %d reason %q, want 2 0 naming n1, n2 and that the selector matches no node", s.Replicas, s.Nodes, s.Reason)
	}
	if cond := meta.FindStatusCondition(s.Conditions, gpufracv1.ConditionPlanned); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Planned %+v, want True", cond)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: "gpu-operator", Name: "device-plugin-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	if n, _, err := sharingplan.Replicas(cm.Data["gpufrac-pool-a"]); err != nil || n != 2 {
		t.Errorf("entry %q: replicas %d %v, want 2", cm.Data["gpufrac-pool-a"], n, err)
	}
	// Once no node carries the label either, there is nothing to plan for.
	unlabel(t, c, "n1", "n2")
	s = reconcile(t, r, c).Status
	if cond := meta.FindStatusCondition(s.Conditions, gpufracv1.ConditionPlanned); cond == nil || cond.Reason != gpufracv1.ReasonNoNodes {
		t.Errorf("without labeled nodes: Planned %+v, want NoNodes", cond)
	}
}

// A spec.gpuMemory that is no GPU's size — zero, negative, out of range, or under 1Mi
// (the label's MiB written without a unit: 81920 is 81920 bytes) — is InvalidSpec naming
// the field, and the last plan and its entry are kept. Before, 81920 planned N = 1 (no
// 9Gi target fits 80 KiB) and Apply wrote the no-sharing entry over the pool's 4, and
// -1Gi or 1e20 said "set spec.gpuMemory: no selected node has the nvidia.com/gpu.memory
// label" while every node had it.
func TestSpecGPUMemoryNotAGPUSizeIsInvalid(t *testing.T) {
	for _, v := range []string{"81920", "0", "-1Gi", "1e20"} {
		t.Run(v, func(t *testing.T) {
			r, c := setup(t, gpufracv1.PlanModeApply, pool()...)
			if s := reconcile(t, r, c).Status; s.Replicas != 4 {
				t.Fatalf("first plan: replicas %d, want 4", s.Replicas)
			}
			ctx := context.Background()
			var pol gpufracv1.GPUSharingPolicy
			if err := c.Get(ctx, types.NamespacedName{Name: "pool-a"}, &pol); err != nil {
				t.Fatal(err)
			}
			pol.Spec.GPUMemory = ptr.To(resource.MustParse(v))
			if err := c.Update(ctx, &pol); err != nil {
				t.Fatal(err)
			}
			s := reconcile(t, r, c).Status
			cond := meta.FindStatusCondition(s.Conditions, gpufracv1.ConditionPlanned)
			if cond == nil || cond.Reason != gpufracv1.ReasonInvalidSpec || !strings.Contains(cond.Message, "spec.gpuMemory") || !strings.Contains(cond.Message, "no GPU's memory") || s.Replicas != 4 {
				t.Errorf("Planned %+v replicas %d, want InvalidSpec naming spec.gpuMemory %s and the plan kept at 4", cond, s.Replicas, v)
			}
			var cm corev1.ConfigMap
			if err := c.Get(ctx, types.NamespacedName{Namespace: "gpu-operator", Name: "device-plugin-config"}, &cm); err != nil {
				t.Fatal(err)
			}
			if n, _, err := sharingplan.Replicas(cm.Data["gpufrac-pool-a"]); err != nil || n != 4 {
				t.Errorf("entry %q: replicas %d %v, want 4 kept", cm.Data["gpufrac-pool-a"], n, err)
			}
		})
	}
}

// A node that joins the pool from another policy's (its pool label changed from b to a,
// and b no longer selects it, so a's plan relabels it) still runs the pods b's plan
// placed there, at b's replicas. Their workloads are not a's to size, so, as pods of a
// workload no longer planned, they hold a's N at their replicas, and the reason names
// the policy that placed them; one whose autoscaler a plans is sized by its
// recommendation. Before, only pods placed by a's own plan held N: a's plan rose to 4
// under y/huge-1, admitted at 2 per GPU by b for its 39Gi.
func TestPodsPlacedByAnotherPolicyHoldTheirShare(t *testing.T) {
	objs := append(pool(),
		sharedPod("y", "huge-1", "n2", "pool-b", "2", "huge", corev1.PodRunning),
		sharedPod("y", "small-9", "n1", "pool-b", "1", "small", corev1.PodRunning),
	)
	r, c := setup(t, gpufracv1.PlanModeApply, objs...)
	s := reconcile(t, r, c).Status
	if s.Replicas != 2 || !strings.Contains(s.Reason, "held at 2: pod y/huge-1 (autoscaler y/huge, placed by GPUSharingPolicy pool-b) on node n2") || strings.Contains(s.Reason, "more") {
		t.Errorf("replicas %d reason %q, want 2 held by y/huge-1 placed by pool-b alone", s.Replicas, s.Reason)
	}
}

// A policy set from Apply to DryRun leaves its nodes labeled (the planner never removes
// the label): their device plugin keeps sharing each GPU by the entry last written while
// the plan in status moves on. The Applied condition names those nodes and says so, with
// a Warning event. Before, it said only "dry run: the plan is in status", as if nothing
// were applied, while the pool still ran 4 per GPU and the status planned 2.
func TestDryRunAfterApplyNamesTheNodesStillShared(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeApply, pool()...)
	rec := events.NewFakeRecorder(10)
	r.Events = rec
	if s := reconcile(t, r, c).Status; s.Replicas != 4 || s.LabeledNodes != 2 {
		t.Fatalf("first plan: replicas %d labeled %d, want 4 2", s.Replicas, s.LabeledNodes)
	}
	ctx := context.Background()
	var pol gpufracv1.GPUSharingPolicy
	if err := c.Get(ctx, types.NamespacedName{Name: "pool-a"}, &pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.Mode = gpufracv1.PlanModeDryRun
	if err := c.Update(ctx, &pol); err != nil {
		t.Fatal(err)
	}
	setMemory(t, c, "x", "big", "15Gi")
	for len(rec.Events) > 0 {
		<-rec.Events
	}
	s := reconcile(t, r, c).Status
	cond := meta.FindStatusCondition(s.Conditions, gpufracv1.ConditionApplied)
	if s.Replicas != 2 || cond == nil || cond.Reason != gpufracv1.ReasonDryRun || !strings.Contains(cond.Message, "2 node(s) (n1, n2) still carry") {
		t.Errorf("replicas %d Applied %+v, want 2 and DryRun naming n1, n2 as still labeled", s.Replicas, cond)
	}
	var warned bool
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.HasPrefix(e, "Warning DryRun") && strings.Contains(e, "n1, n2") {
			warned = true
		}
	}
	if !warned {
		t.Error("no Warning event naming the nodes")
	}
	// Once the labels are gone, a plain dry run.
	unlabel(t, c, "n1", "n2")
	s = reconcile(t, r, c).Status
	if cond := meta.FindStatusCondition(s.Conditions, gpufracv1.ConditionApplied); cond == nil || strings.Contains(cond.Message, "still carry") {
		t.Errorf("without labels: Applied %+v, want a plain dry run", cond)
	}
}

// setMode sets the sharing mode of recommendation ns/name (pod and its one container),
// as the recommender's next write.
func setMode(t *testing.T, c client.Client, ns, name string, mode gpufracv1.SharingMode) {
	t.Helper()
	var rec gpufracv1.GPUFractionRecommendation
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Status.SharingMode, rec.Status.ContainerRecommendations[0].SharingMode = mode, mode
	if err := c.Update(context.Background(), &rec); err != nil {
		t.Fatal(err)
	}
}

// With spec.sharingMode omitted, the mode follows the recommendations (MPS when any says
// MPS), and a recommendation near the steady-compute boundary moves between MPS and
// TimeSlicing from one recommender cycle to the next. Each move would rewrite the entry
// between sharing.mps and sharing.timeSlicing: the device plugin restarting on every
// node of the pool, its MPS daemon started or stopped under the running pods, and the
// webhook placing the pods of one backend (nvidia-mps or nvidia-timeslicing) only every
// other cycle. As with a raise, a change of mode is planned only once every plan for
// RaiseDelay has called for it (the reason says until when); a spec.sharingMode change
// applies at once. Before, every move was written.
func TestModeChangesOnlyAfterTheRaiseDelay(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeApply, pool()...)
	clock := raiseDelayClock(r)
	step := func(at time.Duration, mode, want gpufracv1.SharingMode, wantReason string) {
		t.Helper()
		clock(at)
		setMode(t, c, "x", "big", mode)
		s := reconcile(t, r, c).Status
		n, entryMode := poolEntry(t, c)
		if s.SharingMode != want || entryMode != want || n != 4 || s.Replicas != 4 || !strings.Contains(s.Reason, wantReason) {
			t.Errorf("at %s with %s: %s × %d (entry %s × %d) reason %q, want %s × 4 with %q", at, mode, s.SharingMode, s.Replicas, entryMode, n, s.Reason, want, wantReason)
		}
	}
	ts, mps := gpufracv1.SharingModeTimeSlicing, gpufracv1.SharingModeMPS
	step(0, ts, ts, "memory: 4 × 9216MiB")                                      // first plan
	step(1*time.Minute, mps, ts, "TimeSlicing kept until 2026-12-03T12:06:00Z") // the change waits
	step(2*time.Minute, ts, ts, "memory: 4 × 9216MiB")                          // back: the wait ends
	step(3*time.Minute, mps, ts, "kept until 2026-12-03T12:08:00Z")             // a new wait
	step(8*time.Minute, mps, mps, "memory: 4 × 9216MiB")                        // changed
	step(9*time.Minute, ts, mps, "MPS kept until 2026-12-03T12:14:00Z")         // and back waits too
	// A spec change applies at once.
	var pol gpufracv1.GPUSharingPolicy
	if err := c.Get(context.Background(), types.NamespacedName{Name: "pool-a"}, &pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.SharingMode = ts
	if err := c.Update(context.Background(), &pol); err != nil {
		t.Fatal(err)
	}
	step(10*time.Minute, mps, ts, "memory: 4 × 9216MiB")
}

// A node deleted between the plan's node list and its label (the cluster autoscaler
// removing it, a spot node reclaimed) is no failure to apply: it no longer runs
// anything. The others are labeled and Applied stays True. Before, the label's
// NotFound set Applied False ApplyFailed, with a Warning event, and the webhook placed
// no pod on the pool until the next plan.
func TestNodeDeletedBeforeItsLabelIsNoApplyFailure(t *testing.T) {
	_, c := setup(t, gpufracv1.PlanModeApply, pool()...)
	rec := events.NewFakeRecorder(10)
	cl := interceptor.NewClient(c, interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if n, ok := obj.(*corev1.Node); ok && n.Name == "n1" {
			if err := cl.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
				return err
			}
		}
		return cl.Patch(ctx, obj, patch, opts...)
	}})
	r := &Reconciler{Client: cl, Reader: c, Events: rec}
	pol := reconcile(t, r, c)
	if cond := meta.FindStatusCondition(pol.Status.Conditions, gpufracv1.ConditionApplied); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Applied %+v, want True", cond)
	}
	var n2 corev1.Node
	if err := c.Get(context.Background(), types.NamespacedName{Name: "n2"}, &n2); err != nil {
		t.Fatal(err)
	}
	if got := n2.Labels[gpufracv1.DevicePluginConfigLabel]; got != "gpufrac-pool-a" {
		t.Errorf("n2 label %q, want gpufrac-pool-a", got)
	}
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.HasPrefix(e, "Warning") {
			t.Errorf("event %q", e)
		}
	}
}

// A node that carries the plan's label loses its nvidia.com/gpu.memory label (GPU
// feature discovery or node-feature-discovery's garbage collection removed its labels:
// an operator upgrade, its worker gone): its GPU's size is no longer known, but the
// node still runs the entry. The plan's GPU memory stays at most the last plan's
// (status.gpuMemory, which counted it), and the reason names the node; once the label
// is back the plan sizes by it. Before, the plan sized for the other nodes alone: the
// 40Gi node's label gone, N rose from 4 to 5 (80Gi / 9Gi, compute 5) on its 40Gi GPU.
func TestLabeledNodeLosingItsGPUSizeKeepsTheLastSize(t *testing.T) {
	r, c := setup(t, gpufracv1.PlanModeApply, pool()...)
	if s := reconcile(t, r, c).Status; s.Replicas != 4 || s.LabeledNodes != 2 {
		t.Fatalf("first plan: replicas %d labeled %d, want 4 2", s.Replicas, s.LabeledNodes)
	}
	ctx := context.Background()
	relabel := func(v string) {
		t.Helper()
		var n corev1.Node
		if err := c.Get(ctx, types.NamespacedName{Name: "n2"}, &n); err != nil {
			t.Fatal(err)
		}
		if v == "" {
			delete(n.Labels, GPUMemoryLabel)
		} else {
			n.Labels[GPUMemoryLabel] = v
		}
		if err := c.Update(ctx, &n); err != nil {
			t.Fatal(err)
		}
	}
	relabel("")
	s := reconcile(t, r, c).Status
	if s.Replicas != 4 || s.GPUMemory.Value() != 40<<30 || !strings.Contains(s.Reason, "(n2)") {
		t.Errorf("n2 without its size label: replicas %d gpuMemory %v reason %q, want 4 40Gi naming n2", s.Replicas, s.GPUMemory, s.Reason)
	}
	// Again: the bound is kept from plan to plan.
	if s := reconcile(t, r, c).Status; s.Replicas != 4 {
		t.Errorf("next plan: replicas %d, want 4", s.Replicas)
	}
	// spec.gpuMemory, the user's bound on every GPU of the pool, sizes it instead.
	var pol gpufracv1.GPUSharingPolicy
	if err := c.Get(ctx, types.NamespacedName{Name: "pool-a"}, &pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.GPUMemory = ptr.To(resource.MustParse("72Gi"))
	if err := c.Update(ctx, &pol); err != nil {
		t.Fatal(err)
	}
	if s := reconcile(t, r, c).Status; s.Replicas != 5 || s.GPUMemory.Value() != 72<<30 {
		t.Errorf("spec.gpuMemory 72Gi: replicas %d gpuMemory %v, want 5 72Gi", s.Replicas, s.GPUMemory)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "pool-a"}, &pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.GPUMemory = nil
	if err := c.Update(ctx, &pol); err != nil {
		t.Fatal(err)
	}
	// The label back, larger (the node's GPU replaced): sized by it.
	relabel("81920")
	if s := reconcile(t, r, c).Status; s.Replicas != 5 || strings.Contains(s.Reason, "n2") {
		t.Errorf("n2 labeled 80Gi: replicas %d reason %q, want 5 without n2", s.Replicas, s.Reason)
	}
}

// An autoscaler that two policies select (overlapping autoscalerSelectors: both {}, or
// one label on both) has no pool: the webhook places its pods on neither plan
// (backend.SelectSharingPlan: ambiguous) and they keep asking for whole GPUs. Each plan
// still sizes N by it (its pods may land on the pool's GPUs), and the reason names it
// and the other policy, since GPUs freed counts pods that will not move. Before, both
// plans said they free 5 GPUs and nothing said why no pod moved.
func TestAutoscalerSelectedByTwoPoliciesIsNamed(t *testing.T) {
	other := &gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-b"}, Spec: gpufracv1.GPUSharingPolicySpec{
		NodeSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}},
		AutoscalerSelector: metav1.LabelSelector{MatchLabels: map[string]string{"share": "yes"}},
		Mode:               gpufracv1.PlanModeApply,
		ConfigMap:          gpufracv1.ConfigMapReference{Namespace: "gpu-operator", Name: "device-plugin-config"},
	}}
	r, c := setup(t, gpufracv1.PlanModeDryRun, append(pool(), other)...)
	s := reconcile(t, r, c).Status
	if s.Replicas != 4 || !strings.Contains(s.Reason, "2 workload(s) (x/big, y/small) also selected by GPUSharingPolicy pool-b") {
		t.Errorf("replicas %d reason %q, want 4 naming x/big, y/small and pool-b", s.Replicas, s.Reason)
	}
	// Disjoint selectors: nothing to say.
	other.Spec.AutoscalerSelector = metav1.LabelSelector{MatchLabels: map[string]string{"share": "b"}}
	if err := c.Update(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if s := reconcile(t, r, c).Status; strings.Contains(s.Reason, "also selected") {
		t.Errorf("disjoint selectors: reason %q", s.Reason)
	}
}

// A raise (or a change of mode) that is due is written to the device-plugin entry before
// the policy's status; when that status write fails (a 409 from a label or annotation
// written on the policy meanwhile, an API server timeout) the retry plans the same raise
// again at once, since status still holds the old plan. Before, the due wait was dropped
// on the first try, so the retry held the old plan for another RaiseDelay and wrote the
// entry back (N 4 → 5 → 4, the device plugin restarting twice, and until then pods placed
// 5 per GPU under a status, and webhook records, of 4).
func TestDueChangeSurvivesAFailedStatusWrite(t *testing.T) {
	ts, mps := gpufracv1.SharingModeTimeSlicing, gpufracv1.SharingModeMPS
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, c client.Client) // the recommendations' move
		want   func(s gpufracv1.GPUSharingPolicyStatus, n int, mode gpufracv1.SharingMode) bool
	}{
		{"raise", func(t *testing.T, c client.Client) { setMemory(t, c, "x", "big", "6Gi") },
			func(s gpufracv1.GPUSharingPolicyStatus, n int, mode gpufracv1.SharingMode) bool {
				return s.Replicas == 5 && n == 5
			}},
		{"mode", func(t *testing.T, c client.Client) { setMode(t, c, "x", "big", mps) },
			func(s gpufracv1.GPUSharingPolicyStatus, n int, mode gpufracv1.SharingMode) bool {
				return s.SharingMode == mps && mode == mps && s.Replicas == 4 && n == 4
			}},
	} {
		for _, retry := range []time.Duration{0, 10 * time.Second, time.Minute, 4 * time.Minute} {
			r, c := setup(t, gpufracv1.PlanModeApply, pool()...)
			failStatus := false
			r.Client = interceptor.NewClient(c, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if failStatus {
					failStatus = false
					return apierrors.NewConflict(gpufracv1.GroupVersion.WithResource("gpusharingpolicies").GroupResource(), obj.GetName(), nil)
				}
				return cl.SubResource(sub).Update(ctx, obj, opts...)
			}})
			clock := raiseDelayClock(r)
			if s := reconcile(t, r, c).Status; s.Replicas != 4 || s.SharingMode != ts {
				t.Fatalf("first plan %s × %d, want TimeSlicing × 4", s.SharingMode, s.Replicas)
			}
			tc.change(t, c)
			clock(time.Minute)
			reconcile(t, r, c) // the wait starts
			clock(6 * time.Minute)
			failStatus = true // due: the entry is written, the status write fails
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "pool-a"}}); err == nil {
				t.Fatalf("%s: the failed status write is not returned", tc.name)
			}
			clock(6*time.Minute + retry)
			s := reconcile(t, r, c).Status
			if n, mode := poolEntry(t, c); !tc.want(s, n, mode) {
				t.Errorf("%s, retried after %s: status %s × %d (entry %s × %d) reason %q; want the due change kept", tc.name, retry, s.SharingMode, s.Replicas, mode, n, s.Reason)
			}
		}
	}
}
