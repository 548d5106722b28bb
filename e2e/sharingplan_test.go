package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/e2e/framework"
)

// TestSharingPlanner runs the NVIDIA device-plugin sharing planner (GPUSharingPolicy,
// in the recommender) on a pool of two KWOK nodes with one GPU each. A stand-in for the
// device plugin, written here from NVIDIA's config format, reads the ConfigMap entry
// each node's nvidia.com/device-plugin.config label names and sets the node's
// nvidia.com/gpu to GPUs × replicas. The workload's recommendation is a fixture (its
// autoscaler names another recommender, so the running one leaves it alone): 18Gi and
// 300m per pod, six pods. Dry run must plan N = min(memory 4, compute 3) = 3 and change
// nothing (two pods run, one per GPU); Apply must write the entry and the labels, and
// the six pods then run three per GPU.
func TestSharingPlanner(t *testing.T) {
	ctx := context.Background()
	c := testCluster.Client
	const (
		ns, poolLabel, taint = "e2e-planner", "gpufrac.io/e2e-pool", "gpufrac.io/e2e-planner"
		memTarget, cpuMilli  = int64(18 << 30), int64(300)
		pods                 = 6
	)
	nodes := []string{"planner-gpu-0", "planner-gpu-1"}
	for _, n := range nodes {
		if err := testCluster.CreateGPUNode(ctx, n, 1); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}) })
		patchNode(t, n, func(node *corev1.Node) {
			node.Labels[poolLabel] = "a"
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: taint, Effect: corev1.TaintEffectNoSchedule})
		})
	}
	createNamespace(t, ns)
	stopPlugin := standInDevicePlugin(t, ns, poolLabel)
	defer stopPlugin()

	// The opted-in workload and its recommendation (fixture).
	gfa := autoscaler(ns, "inf", "inf")
	gfa.Labels = map[string]string{"gpufrac.io/share": "yes"}
	gfa.Spec.Recommenders = []gpufracv1.RecommenderName{{Name: "e2e-fixture"}}
	create(t, gfa)
	// Controlled by its autoscaler, as the recommender writes it: one without the
	// reference is stale for the webhook and the updater (contract.Adopted).
	rec := &gpufracv1.GPUFractionRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inf", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: gfa.Name, UID: gfa.UID, Controller: ptr.To(true)}}},
		Spec: gpufracv1.GPUFractionRecommendationSpec{TargetRef: gfa.Spec.TargetRef}}
	create(t, rec)
	rec.Status.Memory = resource.NewQuantity(memTarget, resource.BinarySI)
	rec.Status.Compute = resource.NewMilliQuantity(cpuMilli, resource.DecimalSI)
	rec.Status.SharingMode, rec.Status.MatchedPods = gpufracv1.SharingModeTimeSlicing, pods
	rec.Status.ConfidencePercent = ptr.To[int32](90) // over the planner's default minConfidence
	// Provided, with its container recommendation, as the recommender writes it: the
	// planner reads only what the webhook applies (contract.Applies).
	rec.Status.ContainerRecommendations = []gpufracv1.ContainerRecommendation{{ContainerName: "main", SharingMode: gpufracv1.SharingModeTimeSlicing, ConfidencePercent: 90,
		Target: gpufracv1.GPUResources{Memory: rec.Status.Memory, Compute: rec.Status.Compute}}}
	meta.SetStatusCondition(&rec.Status.Conditions, metav1.Condition{Type: gpufracv1.ConditionRecommendationProvided, Status: metav1.ConditionTrue, Reason: "Recommended", Message: "fixture"})
	if err := c.Status().Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	d := gpuDeployment(ns, "inf", "main", pods)
	d.Spec.Template.Spec.NodeSelector = map[string]string{poolLabel: "a"}
	d.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: taint, Operator: corev1.TolerationOpExists}}
	create(t, d)
	waitRunning(t, ns, "inf", 2) // one per GPU before sharing

	startRecommender(t, "--sharing-plan-interval=2s")
	pol := &gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-planner"}, Spec: gpufracv1.GPUSharingPolicySpec{
		NodeSelector:       metav1.LabelSelector{MatchLabels: map[string]string{poolLabel: "a"}},
		AutoscalerSelector: metav1.LabelSelector{MatchLabels: map[string]string{"gpufrac.io/share": "yes"}},
		ConfigMap:          gpufracv1.ConfigMapReference{Namespace: ns, Name: "device-plugin-config"},
	}}
	create(t, pol)
	t.Cleanup(func() { _ = c.Delete(context.Background(), pol) })
	// A name whose config name ("gpufrac-" + name) is no label value is refused by the
	// API server (the CRD's rule), where the webhook would otherwise have to ignore it.
	long := &gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("p", 56)}, Spec: *pol.Spec.DeepCopy()}
	if err := c.Create(ctx, long); !apierrors.IsInvalid(err) {
		t.Errorf("a GPUSharingPolicy named with 56 characters: %v, want Invalid", err)
		_ = c.Delete(context.Background(), long)
	}

	// Expected independently: memory first, then compute, then the default maxReplicas 8.
	wantN := min(int32(int64(framework.GPUMemoryMiB)<<20/memTarget), int32(1000/cpuMilli), 8)
	if wantN != 3 {
		t.Fatalf("fixture: expected N %d, want 3 (compute-bound) for this test to mean anything", wantN)
	}
	got := waitPlan(t, pol.Name, func(s *gpufracv1.GPUSharingPolicyStatus) bool {
		return s.Replicas > 0 && meta.IsStatusConditionFalse(s.Conditions, gpufracv1.ConditionApplied)
	})
	st := got.Status
	if got.Spec.Mode != gpufracv1.PlanModeDryRun || st.Replicas != wantN || st.SharingMode != gpufracv1.SharingModeTimeSlicing || st.Nodes != 2 || st.GPUs != 2 {
		t.Fatalf("mode %s, plan %+v, want the default DryRun, TimeSlicing × %d on 2 nodes, 2 GPUs", got.Spec.Mode, st, wantN)
	}
	if st.Pods != pods || st.GPUsNeeded != 2 || st.GPUsFreed != 4 {
		t.Errorf("pods %d needed %d freed %d, want 6 2 4", st.Pods, st.GPUsNeeded, st.GPUsFreed)
	}
	if c := meta.FindStatusCondition(st.Conditions, gpufracv1.ConditionApplied); c == nil || c.Reason != gpufracv1.ReasonDryRun {
		t.Errorf("Applied %+v, want reason DryRun", c)
	}
	// Dry run changed nothing: no ConfigMap, no label, one GPU per node, two pods.
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "device-plugin-config"}, &cm); !apierrors.IsNotFound(err) {
		t.Fatalf("dry run: ConfigMap exists (err %v)", err)
	}
	for _, n := range nodes {
		node := getNode(t, n)
		if v, ok := node.Labels[gpufracv1.DevicePluginConfigLabel]; ok {
			t.Errorf("dry run labeled %s %q", n, v)
		}
		if a := node.Status.Allocatable[framework.GPUResource]; a.Value() != 1 {
			t.Errorf("dry run: %s allocatable %s", n, a.String())
		}
	}
	if got := podsPerNode(t, ns, "inf"); len(got) != 2 || got[nodes[0]] != 1 || got[nodes[1]] != 1 {
		t.Errorf("dry run: running pods per node %v, want one on each", got)
	}

	// Apply: the entry and the labels are written; pods then land N per GPU.
	patchPolicyMode(t, pol.Name, gpufracv1.PlanModeApply)
	waitPlan(t, pol.Name, func(s *gpufracv1.GPUSharingPolicyStatus) bool {
		return meta.IsStatusConditionTrue(s.Conditions, gpufracv1.ConditionApplied)
	})
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "device-plugin-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	if n, err := replicasOf(cm.Data["gpufrac-e2e-planner"]); err != nil || n != int64(wantN) {
		t.Fatalf("ConfigMap entry %q: replicas %d (%v), want %d", cm.Data["gpufrac-e2e-planner"], n, err, wantN)
	}
	for _, n := range nodes {
		if v := getNode(t, n).Labels[gpufracv1.DevicePluginConfigLabel]; v != "gpufrac-e2e-planner" {
			t.Errorf("node %s label %q", n, v)
		}
	}
	waitRunning(t, ns, "inf", pods)
	if got := podsPerNode(t, ns, "inf"); got[nodes[0]] != int(wantN) || got[nodes[1]] != int(wantN) {
		t.Errorf("running pods per node %v, want %d on each GPU", got, wantN)
	}
	out, err := exec.Command(filepath.Join(repoRoot, "bin", "gpufrac"), "plan", "--kubeconfig="+testCluster.Kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "e2e-planner") || !regexpLine(string(out), "e2e-planner", "Apply", "TimeSlicing", strconv.Itoa(int(wantN)), "Applied") {
		t.Errorf("gpufrac plan (%v):\n%s", err, out)
	}

	t.Run("the updater moves the workload onto the shared GPUs inside its window", func(t *testing.T) {
		moveOntoSharedGPUs(t, d, gfa, nodes, int(wantN))
	})
}

// moveOntoSharedGPUs (issue 16 items 1 and 2): the workload's pods run on the applied
// plan's replicas but were created before gpufrac placed them (no record: each holds a
// whole GPU for the updater). The autoscaler switches to nvidia-timeslicing under
// Recreate with an open resize window and an 18Gi recommendation ([16Gi, 20Gi]); with the
// real webhook and updater, every pod is replaced and its replacement carries one
// nvidia.com/gpu, the nodeSelector on the plan's config, and the record of the replica's
// share (GPU memory / N). The deployment first drops to 2N − 1 pods so a replacement has
// a free replica, then returns to 2N: the webhook's pods then run N per GPU.
func moveOntoSharedGPUs(t *testing.T, d *appsv1.Deployment, gfa *gpufracv1.GPUFractionAutoscaler, nodes []string, n int) {
	ctx := context.Background()
	c := testCluster.Client
	ns := d.Namespace
	var namespace corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: ns}, &namespace); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(namespace.DeepCopy())
	namespace.Labels = map[string]string{admLabel: updLabelValue}
	if err := c.Patch(ctx, &namespace, patch); err != nil {
		t.Fatal(err)
	}
	sysNS := ns + "-system" // the webhook's Secret and status Lease (never its own pods' namespace)
	createNamespace(t, sysNS)
	startUpdaterWebhookIn(t, sysNS)
	if err := c.Get(ctx, client.ObjectKeyFromObject(gfa), gfa); err != nil {
		t.Fatal(err)
	}
	gfa.Spec.Backend = &gpufracv1.Backend{Type: gpufracv1.BackendNVIDIATimeSlicing}
	gfa.Spec.UpdatePolicy = &gpufracv1.UpdatePolicy{UpdateMode: ptr.To(gpufracv1.UpdateModeRecreate)}
	alwaysOpen(gfa)
	if err := c.Update(ctx, gfa); err != nil {
		t.Fatal(err)
	}
	updRecommend(t, gfa, "18Gi", "16Gi", "20Gi")
	share := fmt.Sprintf("%dMi", framework.GPUMemoryMiB/n) // whole MiB down
	// The webhook's admission warnings say why a pod was left alone.
	warned := &warnings{}
	cfg := rest.CopyConfig(testCluster.RESTConfig)
	cfg.WarningHandler = warned
	wc, err := client.New(cfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "webhook places "+ns+" pods on the plan", func() (bool, error) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true)}}}, Spec: *d.Spec.Template.Spec.DeepCopy()}
		if err := wc.Create(ctx, p, client.DryRunAll); err != nil {
			return false, err
		}
		return p.Spec.NodeSelector[gpufracv1.DevicePluginConfigLabel] == "gpufrac-e2e-planner", fmt.Errorf("nodeSelector %v, warnings %q", p.Spec.NodeSelector, warned.last())
	})
	scale(t, d, int32(2*n-1))
	upd := startUpdater(t, []string{ns}, "--admission-namespace="+sysNS)
	defer upd.stop()
	onPlan := func(p *corev1.Pod) error {
		rec, err := gpufracv1.ParseApplied(p.Annotations)
		switch {
		case err != nil || rec == nil || rec.Backend != gpufracv1.BackendNVIDIATimeSlicing || rec.Container("main") == nil:
			return fmt.Errorf("pod %s: record %+v (%v)", p.Name, rec, err)
		case rec.Container("main").WrittenMemory.String() != share || rec.Container("main").Memory.String() != "18Gi":
			return fmt.Errorf("pod %s: record %+v, want memory 18Gi written as the %s share", p.Name, rec.Container("main"), share)
		case p.Spec.NodeSelector[gpufracv1.DevicePluginConfigLabel] != "gpufrac-e2e-planner" || p.Annotations["gpufrac.io/sharing-replicas"] != strconv.Itoa(n):
			return fmt.Errorf("pod %s: nodeSelector %v, annotations %v", p.Name, p.Spec.NodeSelector, p.Annotations)
		}
		if l := p.Spec.Containers[0].Resources.Limits[framework.GPUResource]; l.Value() != 1 {
			return fmt.Errorf("pod %s: nvidia.com/gpu %s", p.Name, l.String())
		}
		return nil
	}
	allOnPlan := func(want int) func() (bool, error) {
		return func() (bool, error) {
			pods := updPods(t, ns, "inf")
			if len(pods) != want {
				return false, fmt.Errorf("%d pods", len(pods))
			}
			for i := range pods {
				if err := onPlan(&pods[i]); err != nil || pods[i].Status.Phase != corev1.PodRunning {
					return false, fmt.Errorf("%v (phase %s)", err, pods[i].Status.Phase)
				}
			}
			return true, nil
		}
	}
	waitFor(t, 3*time.Minute, "every pod replaced onto the plan", allOnPlan(2*n-1))
	if got := upd.counter(t, "gpufrac_updater_evictions_total", "result", "evicted"); got < float64(2*n-1) {
		t.Errorf("%v evictions, want at least %d (every pod off the plan)", got, 2*n-1)
	}
	upd.stop() // the rest is the webhook's and the scheduler's
	scale(t, d, int32(2*n))
	waitFor(t, time.Minute, "a new pod on the plan", allOnPlan(2*n))
	if got := podsPerNode(t, ns, "inf"); got[nodes[0]] != n || got[nodes[1]] != n {
		t.Errorf("pods per node %v, want %d per GPU", got, n)
	}
}

// waitPlan waits until the policy's status satisfies ok and returns the policy.
func waitPlan(t *testing.T, name string, ok func(*gpufracv1.GPUSharingPolicyStatus) bool) *gpufracv1.GPUSharingPolicy {
	t.Helper()
	var pol gpufracv1.GPUSharingPolicy
	waitFor(t, 90*time.Second, "GPUSharingPolicy "+name+" plan", func() (bool, error) {
		if err := testCluster.Client.Get(context.Background(), types.NamespacedName{Name: name}, &pol); err != nil {
			return false, err
		}
		return ok(&pol.Status), fmt.Errorf("status %+v", pol.Status)
	})
	return &pol
}

func patchPolicyMode(t *testing.T, name string, mode gpufracv1.PlanMode) {
	t.Helper()
	var pol gpufracv1.GPUSharingPolicy
	if err := testCluster.Client.Get(context.Background(), types.NamespacedName{Name: name}, &pol); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(pol.DeepCopy())
	pol.Spec.Mode = mode
	if err := testCluster.Client.Patch(context.Background(), &pol, patch); err != nil {
		t.Fatal(err)
	}
}

func getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	var n corev1.Node
	if err := testCluster.Client.Get(context.Background(), types.NamespacedName{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

func patchNode(t *testing.T, name string, edit func(*corev1.Node)) {
	t.Helper()
	n := getNode(t, name)
	patch := client.MergeFrom(n.DeepCopy())
	edit(n)
	if err := testCluster.Client.Patch(context.Background(), n, patch); err != nil {
		t.Fatal(err)
	}
}

// podsPerNode counts the running pods with app=name per node.
func podsPerNode(t *testing.T, ns, name string) map[string]int {
	t.Helper()
	var pods corev1.PodList
	if err := testCluster.Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			out[p.Spec.NodeName]++
		}
	}
	return out
}

// regexpLine reports whether one line of out holds every field, in order.
func regexpLine(out string, fields ...string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		rest, ok := line, true
		for _, f := range fields {
			i := strings.Index(rest, f)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(f):]
		}
		if ok {
			return true
		}
	}
	return false
}

// replicasOf reads nvidia.com/gpu's replicas from a device-plugin config entry, as the
// NVIDIA device plugin does (config format v1: sharing.timeSlicing or sharing.mps
// resources); 1 when the entry shares nothing.
func replicasOf(entry string) (int64, error) {
	type res struct {
		Resources []struct {
			Name     string `json:"name"`
			Replicas int64  `json:"replicas"`
		} `json:"resources"`
	}
	var cfg struct {
		Version string `json:"version"`
		Sharing struct {
			TimeSlicing *res `json:"timeSlicing"`
			MPS         *res `json:"mps"`
		} `json:"sharing"`
	}
	if err := yaml.Unmarshal([]byte(entry), &cfg); err != nil {
		return 0, err
	}
	if cfg.Version != "v1" {
		return 0, fmt.Errorf("config version %q, want v1", cfg.Version)
	}
	for _, r := range []*res{cfg.Sharing.TimeSlicing, cfg.Sharing.MPS} {
		if r == nil {
			continue
		}
		for _, x := range r.Resources {
			if x.Name == string(framework.GPUResource) {
				return x.Replicas, nil
			}
		}
	}
	return 1, nil
}

// standInDevicePlugin stands in for NVIDIA's device plugin on the KWOK nodes labelled
// poolLabel: every 500ms, for each node whose nvidia.com/device-plugin.config label names
// an entry of ConfigMap ns/device-plugin-config, it sets the node's nvidia.com/gpu
// capacity and allocatable to nvidia.com/gpu.count × replicas.
func standInDevicePlugin(t *testing.T, ns, poolLabel string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := syncDevicePlugin(ctx, ns, poolLabel); err != nil && ctx.Err() == nil {
				t.Logf("stand-in device plugin: %v", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

func syncDevicePlugin(ctx context.Context, ns, poolLabel string) error {
	c := testCluster.Client
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.HasLabels{poolLabel}); err != nil {
		return err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		key, ok := n.Labels[gpufracv1.DevicePluginConfigLabel]
		if !ok {
			continue
		}
		var cm corev1.ConfigMap
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "device-plugin-config"}, &cm); err != nil {
			return err
		}
		replicas, err := replicasOf(cm.Data[key])
		if err != nil {
			return fmt.Errorf("node %s config %s: %w", n.Name, key, err)
		}
		gpus, err := strconv.ParseInt(n.Labels[framework.GPUCountLabel], 10, 64)
		if err != nil {
			return err
		}
		want := *resource.NewQuantity(gpus*replicas, resource.DecimalSI)
		if q := n.Status.Allocatable[framework.GPUResource]; q.Cmp(want) == 0 {
			continue
		}
		patch := client.MergeFrom(n.DeepCopy())
		n.Status.Capacity[framework.GPUResource] = want
		n.Status.Allocatable[framework.GPUResource] = want
		if err := c.Status().Patch(ctx, n, patch); err != nil {
			return err
		}
	}
	return nil
}

// warnings keeps the API server's warnings (rest.WarningHandler).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) last() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.msgs[max(0, len(w.msgs)-3):]
}
