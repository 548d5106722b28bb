// Package controller reconciles GPUSharingPolicies: it reads the node pool and the
// recommendations of the opted-in autoscalers, computes the plan (sharingplan.Compute)
// into the policy's status, and in Apply mode writes the NVIDIA device-plugin config
// entry into the policy's ConfigMap and labels the pool's nodes
// nvidia.com/device-plugin.config with it. It never touches a pod: the device plugin
// advertises the new replica count and the scheduler places new pods on it; running pods
// move only when the updater replaces them inside their resize windows.
//
// It runs in the recommender's manager, so only the elected leader writes.
package controller

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/internal/promreg"
	"github.com/gpufrac/gpufrac/sharingplan"
)

// Node labels set by NVIDIA GPU feature discovery that the planner reads.
const (
	// GPUCountLabel is the number of physical GPUs of a node.
	GPUCountLabel = "nvidia.com/gpu.count"
	// GPUMemoryLabel is the memory of one GPU, MiB.
	GPUMemoryLabel = "nvidia.com/gpu.memory"
)

// Metrics of the planner (registered by Register).
var (
	planReplicas  = promreg.GaugeVec("gpufrac_sharing_plan_replicas", "Replicas per GPU planned by each GPUSharingPolicy (1: no sharing).", "policy")
	planGPUsFreed = promreg.GaugeVec("gpufrac_sharing_plan_gpus_freed", "GPUs each GPUSharingPolicy's plan frees: the opted-in pods at one GPU each minus at the planned replicas per GPU.", "policy")
)

// Register adds the planner's metrics to reg; it returns the first registration error.
func Register(reg prometheus.Registerer) error {
	return promreg.Register(reg, planReplicas, planGPUsFreed)
}

// Reconciler plans and applies one GPUSharingPolicy per reconcile.
type Reconciler struct {
	// Client writes statuses, the ConfigMap and node labels.
	Client client.Client
	// Reader reads nodes, autoscalers, recommendations and the ConfigMap; nil reads
	// through Client. cmd/recommender passes the manager's uncached API reader, so no
	// cluster-wide node or ConfigMap informer is kept for a once-a-minute read.
	Reader client.Reader
	// Events records events on policies; nil records none.
	Events events.EventRecorder
	// Interval is how often a policy is planned again (recommendations change without
	// the policy changing); default one minute.
	Interval time.Duration
	// RaiseDelay is how long every plan must have had more replicas per GPU than the
	// policy's status before the raise is planned (holdRaise), and the other sharing mode
	// before the change is (holdModeChange); fewer replicas are planned at once. SetupWithManager's default for 0: 5 × Interval; below 0 (or 0 without
	// SetupWithManager): no delay.
	RaiseDelay time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu sync.Mutex
	// raises: policy name → since when its plans have had more replicas than its status.
	raises map[string]pending
	// modeChanges: policy name → since when its plans have called for the other sharing
	// mode than its status (holdModeChange).
	modeChanges map[string]pending
}

// pending is a held change (holdRaise, holdModeChange): since when the plans have
// called for it, and the status value (replicas or sharing mode) they moved from.
type pending struct {
	since time.Time
	from  string
}

func (r *Reconciler) reader() client.Reader {
	if r.Reader != nil {
		return r.Reader
	}
	return r.Client
}

// SetupWithManager registers the reconciler with mgr; it runs only on the leader.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Interval <= 0 {
		r.Interval = time.Minute
	}
	if r.RaiseDelay == 0 {
		r.RaiseDelay = 5 * r.Interval
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sharingplan").
		For(&gpufracv1.GPUSharingPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler: plan, apply in Apply mode, write status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pol gpufracv1.GPUSharingPolicy
	if err := r.reader().Get(ctx, req.NamespacedName, &pol); err != nil {
		if apierrors.IsNotFound(err) {
			planReplicas.DeleteLabelValues(req.Name)
			planGPUsFreed.DeleteLabelValues(req.Name)
			r.mu.Lock()
			delete(r.raises, req.Name)
			delete(r.modeChanges, req.Name)
			r.mu.Unlock()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	old := pol.Status.DeepCopy()
	nodes, err := r.plan(ctx, &pol)
	if err == nil {
		err = r.apply(ctx, &pol, nodes)
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "sharing plan", "policy", pol.Name)
	}
	pol.Status.ObservedGeneration = pol.Generation
	if err := r.Client.Status().Update(ctx, &pol); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing status of GPUSharingPolicy %s: %w", pol.Name, err)
	}
	if old.Replicas != pol.Status.Replicas && pol.Status.Replicas > 0 {
		r.event(&pol, corev1.EventTypeNormal, "PlanChanged", "%s × %d per GPU (%s); frees %d GPU(s)", pol.Status.SharingMode, pol.Status.Replicas, pol.Status.Reason, pol.Status.GPUsFreed)
	}
	return ctrl.Result{RequeueAfter: r.Interval}, nil
}

// plan computes the plan into pol.Status and returns the pool's nodes. A problem with
// the input sets Planned=False with its reason and keeps the last plan; it returns an
// error only when reading the cluster fails.
func (r *Reconciler) plan(ctx context.Context, pol *gpufracv1.GPUSharingPolicy) ([]corev1.Node, error) {
	nodes, err := r.nodes(ctx, pol)
	if err != nil {
		return nil, err
	}
	stray, err := r.strayNodes(ctx, pol, nodes)
	if err != nil {
		return nil, err
	}
	in, note, reason, msg, err := r.input(ctx, pol, nodes, stray)
	if err != nil || reason != "" {
		r.setCondition(pol, gpufracv1.ConditionPlanned, metav1.ConditionFalse, reason, msg)
		return nil, err
	}
	if in.Held, err = r.held(ctx, pol, append(append([]corev1.Node(nil), nodes...), stray...), in.Workloads); err != nil {
		return nil, err
	}
	p, err := sharingplan.Compute(in)
	if err != nil {
		r.setCondition(pol, gpufracv1.ConditionPlanned, metav1.ConditionFalse, gpufracv1.ReasonInvalidSpec, err.Error())
		return nil, nil
	}
	in, p = r.holdModeChange(pol, in, p)
	p = r.holdRaise(pol, in, p)
	if note != "" {
		p.Reason += "; " + note
	}
	if len(stray) > 0 {
		p.Reason += "; " + strayReason(pol, len(nodes), stray)
	}
	cfg, err := sharingplan.DevicePluginConfig(p)
	if err != nil {
		return nil, err
	}
	setStatus(pol, in, p, cfg)
	r.setCondition(pol, gpufracv1.ConditionPlanned, metav1.ConditionTrue, gpufracv1.ReasonPlanned, p.Reason)
	planReplicas.WithLabelValues(pol.Name).Set(float64(p.Replicas))
	planGPUsFreed.WithLabelValues(pol.Name).Set(float64(p.GPUsFreed))
	if nodes == nil {
		nodes = []corev1.Node{} // planned for stray nodes alone: apply writes the entry
	}
	return nodes, nil
}

// nodes lists the pool's nodes and records their count and physical GPUs.
func (r *Reconciler) nodes(ctx context.Context, pol *gpufracv1.GPUSharingPolicy) ([]corev1.Node, error) {
	sel, err := metav1.LabelSelectorAsSelector(&pol.Spec.NodeSelector)
	if err != nil {
		r.setCondition(pol, gpufracv1.ConditionPlanned, metav1.ConditionFalse, gpufracv1.ReasonInvalidSpec, "nodeSelector: "+err.Error())
		return nil, nil
	}
	var list corev1.NodeList
	if err := r.reader().List(ctx, &list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	pol.Status.Nodes, pol.Status.GPUs, pol.Status.LabeledNodes = int32(len(list.Items)), 0, 0
	for _, n := range list.Items {
		pol.Status.GPUs += int32(physicalGPUs(&n))
		if pol.Status.ConfigName != "" && n.Labels[gpufracv1.DevicePluginConfigLabel] == pol.Status.ConfigName {
			pol.Status.LabeledNodes++
		}
	}
	return list.Items, nil
}

// holdRaise returns p, or the plan of in at the replicas of pol's status when p has
// more and every plan since less than RaiseDelay ago has had more: recommendations that
// move back and forth across a boundary (a memory target around a quarter of the GPU)
// would otherwise rewrite the entry at each move, and at each write the device plugin
// restarts on every node of the pool and, with MPS, its control daemon under the
// running clients. Fewer replicas are never held (new pods must fit at once), nor a
// raise after a spec change (status.observedGeneration behind: the user asked) or of a
// policy never planned. The held plan's reason says until when and what the
// recommendations allow. The time is kept in memory: a new leader waits the delay again.
func (r *Reconciler) holdRaise(pol *gpufracv1.GPUSharingPolicy, in sharingplan.Input, p sharingplan.Plan) sharingplan.Plan {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := int(pol.Status.Replicas)
	if r.RaiseDelay <= 0 || prev < 1 || p.Replicas <= prev || pol.Status.ObservedGeneration != pol.Generation {
		delete(r.raises, pol.Name)
		return p
	}
	since, waited := r.waited(&r.raises, pol.Name, strconv.Itoa(prev))
	if waited {
		return p
	}
	in.MaxReplicas = prev // below p.Replicas ≤ in.MaxReplicas
	held, err := sharingplan.Compute(in)
	if err != nil {
		return p // cannot happen: the same input planned p
	}
	held.Reason = fmt.Sprintf("held at %d until %s: the recommendations allow %d (%s); a raise is planned once every plan has allowed more for %s",
		prev, since.Add(r.RaiseDelay).UTC().Format(time.RFC3339), p.Replicas, p.Reason, r.RaiseDelay)
	return held
}

// waited records in *since (policy name → held change; created on first use) when
// policy name's plans began to call for a change from the status value from, now if not
// yet recorded or recorded from another value, and returns that time and whether
// RaiseDelay has passed since. The record is kept once it has passed, until the plans no
// longer call for a change (the caller deletes it) or the status moves: a change written
// to the entry whose status write then failed (a conflict) is planned again at once by
// the retry, not held another RaiseDelay with the entry written back. The caller holds
// r.mu.
func (r *Reconciler) waited(since *map[string]pending, name, from string) (time.Time, bool) {
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	p, ok := (*since)[name]
	if !ok || p.from != from {
		if *since == nil {
			*since = map[string]pending{}
		}
		p = pending{since: now, from: from}
		(*since)[name] = p
	}
	return p.since, now.Sub(p.since) >= r.RaiseDelay
}

// holdModeChange returns in and p, or, with in's Mode set to the sharing mode of pol's
// status, in and its plan, when the mode follows the recommendations (spec.sharingMode
// omitted), p shares GPUs in the other device-plugin mode (MPS or TimeSlicing) than the
// status, and not every plan since less than RaiseDelay ago has called for it: a
// recommendation near the steady-compute boundary moves between MPS and TimeSlicing from
// one recommender cycle to the next, and each change of the entry between sharing.mps
// and sharing.timeSlicing restarts the device plugin on every node of the pool, starts
// or stops its MPS daemon under the running pods, and moves which backend's pods
// (nvidia-mps or nvidia-timeslicing) the webhook places. A spec change, a plan without
// sharing (N = 1, at once) and a policy never planned are not held. The held plan's
// reason says until when and what the recommendations call for; the time is kept in
// memory, as holdRaise's.
func (r *Reconciler) holdModeChange(pol *gpufracv1.GPUSharingPolicy, in sharingplan.Input, p sharingplan.Plan) (sharingplan.Input, sharingplan.Plan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := pol.Status.SharingMode
	sharing := func(m gpufracv1.SharingMode) bool {
		return m == gpufracv1.SharingModeMPS || m == gpufracv1.SharingModeTimeSlicing
	}
	if r.RaiseDelay <= 0 || in.Mode != "" || !sharing(prev) || !sharing(p.Mode) || p.Mode == prev || pol.Status.ObservedGeneration != pol.Generation {
		delete(r.modeChanges, pol.Name)
		return in, p
	}
	since, waited := r.waited(&r.modeChanges, pol.Name, string(prev))
	if waited {
		return in, p
	}
	forced := in
	forced.Mode = prev
	held, err := sharingplan.Compute(forced)
	if err != nil {
		return in, p // cannot happen: the same input in another sharing mode planned p
	}
	held.Reason = fmt.Sprintf("%s kept until %s: the recommendations call for %s; a change of mode is planned once every plan has called for it for %s; %s",
		prev, since.Add(r.RaiseDelay).UTC().Format(time.RFC3339), p.Mode, r.RaiseDelay, held.Reason)
	return forced, held
}

// strayNodes lists the nodes outside the pool (pool: the selected nodes) that still
// carry the label nvidia.com/device-plugin.config naming pol's config: labeled while
// selected, they left the nodeSelector (a node relabeled, the selector narrowed). Their
// device plugin still runs the plan's entry and the webhook still places the plan's pods
// on them (the pods' nodeSelector is the label), so the plan sizes its replicas for their
// GPUs too. The planner does not remove the label: under MPS that would stop the MPS
// daemon under the pods running there.
func (r *Reconciler) strayNodes(ctx context.Context, pol *gpufracv1.GPUSharingPolicy, pool []corev1.Node) ([]corev1.Node, error) {
	var list corev1.NodeList
	if err := r.reader().List(ctx, &list, client.MatchingLabels{gpufracv1.DevicePluginConfigLabel: ConfigName(pol)}); err != nil {
		return nil, fmt.Errorf("listing nodes labeled %s=%s: %w", gpufracv1.DevicePluginConfigLabel, ConfigName(pol), err)
	}
	in := make(map[string]bool, len(pool))
	for _, n := range pool {
		in[n.Name] = true
	}
	var out []corev1.Node
	for _, n := range list.Items {
		if !in[n.Name] {
			out = append(out, n)
		}
	}
	return out, nil
}

// held lists the running pods on nodes that an earlier plan placed
// (backend.AnnotationSharingPolicy names pol, or another policy whose node joined pol's
// pool and now runs pol's entry) whose autoscaler (the gpufrac.io/applied record's, in
// the pod's namespace) is none of planned: it opted out of the policy or was deleted
// while its pods kept running, it is another policy's, or the record cannot be read. Each is held at the replicas per GPU it was admitted at
// (backend.AnnotationSharingReplicas; one that does not parse is held at 1: its share is
// not known). It reads the pods node by node (field spec.nodeName); the error is a
// failed list.
func (r *Reconciler) held(ctx context.Context, pol *gpufracv1.GPUSharingPolicy, nodes []corev1.Node, planned []sharingplan.Workload) ([]sharingplan.Held, error) {
	names := make(map[string]bool, len(planned))
	for _, w := range planned {
		names[w.Name] = true
	}
	var out []sharingplan.Held
	for _, n := range nodes {
		var pods corev1.PodList
		if err := r.reader().List(ctx, &pods, client.MatchingFields{"spec.nodeName": n.Name}); err != nil {
			return nil, fmt.Errorf("listing the pods of node %s: %w", n.Name, err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			placedBy := p.Annotations[backend.AnnotationSharingPolicy]
			if placedBy == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			owner := "no readable " + gpufracv1.AnnotationApplied + " record"
			if rec, err := gpufracv1.ParseApplied(p.Annotations); err == nil && rec != nil && rec.Autoscaler != "" {
				if names[p.Namespace+"/"+rec.Autoscaler] {
					continue
				}
				owner = "autoscaler " + p.Namespace + "/" + rec.Autoscaler
			}
			if placedBy != pol.Name {
				owner += ", placed by GPUSharingPolicy " + placedBy
			}
			replicas, err := strconv.Atoi(p.Annotations[backend.AnnotationSharingReplicas])
			if err != nil || replicas < 1 {
				replicas = 1
			}
			out = append(out, sharingplan.Held{Name: fmt.Sprintf("pod %s/%s (%s) on node %s", p.Namespace, p.Name, owner, n.Name), Replicas: replicas})
		}
	}
	return out, nil
}

// strayReason says which stray nodes (strayNodes) the plan also sizes for, at most three
// named, and what to do; selected is the number of nodes the nodeSelector matches.
func strayReason(pol *gpufracv1.GPUSharingPolicy, selected int, stray []corev1.Node) string {
	if selected == 0 {
		return fmt.Sprintf("the nodeSelector matches no node: GPU memory counts the %d node(s) that still carry %s=%s and get the plan's pods (%s): remove the label once their pods are gone",
			len(stray), gpufracv1.DevicePluginConfigLabel, ConfigName(pol), nodeNames(stray))
	}
	return fmt.Sprintf("GPU memory also counts %d node(s) outside the nodeSelector that still carry %s=%s and get the plan's pods (%s): remove the label once their pods are gone",
		len(stray), gpufracv1.DevicePluginConfigLabel, ConfigName(pol), nodeNames(stray))
}

// physicalGPUs is the node's nvidia.com/gpu.count label, else its nvidia.com/gpu
// capacity (which counts replicas once sharing is on: hence the label first).
func physicalGPUs(n *corev1.Node) int64 {
	if v, err := strconv.ParseInt(n.Labels[GPUCountLabel], 10, 64); err == nil && v >= 0 {
		return v
	}
	q := n.Status.Capacity[corev1.ResourceName(sharingplan.GPUResource)]
	return q.Value()
}

// input builds the planner's input; the GPU memory counts the pool's nodes and the
// stray ones (strayNodes), and a pool whose every node left the nodeSelector while
// labeled is planned for the stray ones alone (they still run the entry and get the
// plan's pods). A node that carries the plan's label without a valid
// nvidia.com/gpu.memory label (lost since it was labeled: GPU feature discovery's or
// node-feature-discovery's labels removed) still runs the entry on a GPU of a size no
// longer known: without spec.gpuMemory (the user's bound on every GPU of the pool) the
// GPU memory is then at most the last plan's (status.gpuMemory), and note says so. A non-empty reason (with msg) says why there is nothing to plan; err is
// a failure to read the cluster.
func (r *Reconciler) input(ctx context.Context, pol *gpufracv1.GPUSharingPolicy, nodes, stray []corev1.Node) (in sharingplan.Input, note, reason, msg string, err error) {
	if len(nodes) == 0 && len(stray) == 0 {
		return in, "", gpufracv1.ReasonNoNodes, "the nodeSelector matches no node", nil
	}
	if msg := specGPUMemoryInvalid(pol); msg != "" {
		return in, "", gpufracv1.ReasonInvalidSpec, msg, nil
	}
	all := append(append([]corev1.Node(nil), nodes...), stray...)
	in.GPUMemoryBytes = gpuMemory(pol, all)
	if unsized := unsizedLabeled(pol, all); len(unsized) > 0 && pol.Spec.GPUMemory == nil && pol.Status.GPUMemory != nil {
		if last := pol.Status.GPUMemory.Value(); last > 0 && (in.GPUMemoryBytes <= 0 || last < in.GPUMemoryBytes) {
			in.GPUMemoryBytes = last
			note = fmt.Sprintf("GPU memory kept at most at the last plan's %dMiB: %d node(s) carry %s=%s without a valid %s label (%s), so their GPU's size is no longer known",
				last/sharingplan.MiB, len(unsized), gpufracv1.DevicePluginConfigLabel, ConfigName(pol), GPUMemoryLabel, nodeNames(unsized))
		}
	}
	if in.GPUMemoryBytes <= 0 {
		return in, "", gpufracv1.ReasonNoGPUMemory, "set spec.gpuMemory: no selected node has the " + GPUMemoryLabel + " label", nil
	}
	sel, err := metav1.LabelSelectorAsSelector(&pol.Spec.AutoscalerSelector)
	if err != nil {
		return in, "", gpufracv1.ReasonInvalidSpec, "autoscalerSelector: " + err.Error(), nil
	}
	var policies gpufracv1.GPUSharingPolicyList
	if err := r.reader().List(ctx, &policies); err != nil {
		return in, "", "", "", fmt.Errorf("listing GPUSharingPolicies: %w", err)
	}
	var shared string
	if in.Workloads, shared, err = r.workloads(ctx, sel, in.GPUMemoryBytes, otherSelectors(pol, policies.Items)); err != nil {
		return in, "", "", "", err
	}
	if shared != "" {
		note = strings.TrimPrefix(note+"; "+shared, "; ")
	}
	if len(in.Workloads) == 0 {
		return in, "", gpufracv1.ReasonNoRecommendations, "no selected GPUFractionAutoscaler has a recommendation with a memory target yet", nil
	}
	in.Mode = pol.Spec.SharingMode
	in.MaxReplicas = int(pol.Spec.MaxReplicas)
	if in.MaxReplicas == 0 {
		in.MaxReplicas = 8
	}
	in.MinConfidencePercent = contract.MinConfidence(pol.Spec.MinConfidence)
	in.ComputeBudgetMilli = 1000
	if pol.Spec.ComputeBudget != nil {
		in.ComputeBudgetMilli = pol.Spec.ComputeBudget.MilliValue()
	}
	return in, note, "", "", nil
}

// unsizedLabeled lists the nodes that carry pol's config label without a valid
// nvidia.com/gpu.memory label.
func unsizedLabeled(pol *gpufracv1.GPUSharingPolicy, nodes []corev1.Node) []corev1.Node {
	var out []corev1.Node
	for i := range nodes {
		if _, ok := nodeGPUMemoryMiB(&nodes[i]); !ok && nodes[i].Labels[gpufracv1.DevicePluginConfigLabel] == ConfigName(pol) {
			out = append(out, nodes[i])
		}
	}
	return out
}

// gpuMemory is the memory of one GPU the plan sizes its replicas for, bytes: the
// smaller of spec.gpuMemory and the smallest nvidia.com/gpu.memory label of the nodes
// (MiB → bytes), either alone where the other is missing, else 0. A pool of several GPU
// sizes is planned for its smallest GPU: every GPU of the pool is advertised as the same
// N replicas, and the device plugin gives each MPS client 1/N of the GPU it runs on, so a
// spec.gpuMemory above a node's GPU would give the pods on that node less memory than
// the plan counted (time-slicing: N pods whose targets add up to more than the GPU).
func gpuMemory(pol *gpufracv1.GPUSharingPolicy, nodes []corev1.Node) int64 {
	var least int64
	for i := range nodes {
		if v, ok := nodeGPUMemoryMiB(&nodes[i]); ok && (least == 0 || v < least) {
			least = v
		}
	}
	least *= sharingplan.MiB
	if pol.Spec.GPUMemory != nil && (least == 0 || pol.Spec.GPUMemory.Value() < least) {
		return pol.Spec.GPUMemory.Value()
	}
	return least
}

// specGPUMemoryInvalid says why pol's spec.gpuMemory is no GPU's size ("" when it is
// omitted or is one): zero, negative, beyond int64 bytes, or under 1Mi, which is the
// nvidia.com/gpu.memory label's MiB written without a unit (81920 is 81920 bytes).
func specGPUMemoryInvalid(pol *gpufracv1.GPUSharingPolicy) string {
	q := pol.Spec.GPUMemory
	if q == nil {
		return ""
	}
	if v, ok := q.AsInt64(); !ok || v < sharingplan.MiB {
		return fmt.Sprintf("spec.gpuMemory %s is no GPU's memory: want bytes, at least 1Mi (a number without a unit is bytes: write the nvidia.com/gpu.memory label's 81920 as 81920Mi)", q.String())
	}
	return ""
}

// nodeGPUMemoryMiB is n's nvidia.com/gpu.memory label, MiB; false when it is missing,
// not a positive integer, or too large to count in bytes (2^43 MiB and more: in bytes
// it would wrap to a negative size).
func nodeGPUMemoryMiB(n *corev1.Node) (int64, bool) {
	v, err := strconv.ParseInt(n.Labels[GPUMemoryLabel], 10, 64)
	return v, err == nil && v > 0 && v <= math.MaxInt64/sharingplan.MiB
}

// workloads reads the recommendations of the autoscalers sel selects, in every
// namespace, as the admission webhook reads them: a recommendation it does not apply
// (contract.Applies: the autoscaler being deleted, a stale, orphaned or retargeted
// recommendation, one not provided) is, while its pods run, a workload of unknown need
// (below) naming the reason, and left out without pods; one that applies counts at the
// pod memory the webhook writes (contract.PodMemory: raised to the policies' minMemory). An autoscaler whose workload's need is not known — no recommendation
// written yet, or one without a memory target while its pods run (no samples yet, a
// retarget) — is a workload of gpuMemory bytes (the whole GPU its pods ask for) without
// a confidence, which holds the pool to one pod per GPU (no data is not zero: its pods
// would get a 1/N share on the pool); one without a memory target that is in charge of
// no pod (ConfigUnsupported, such as a duplicate of another autoscaler of its workload,
// or no matched pods) is left out.
//
// An autoscaler that another policy's autoscalerSelector selects too (others: policy
// name → selector) has no pool: the webhook places its pods on neither plan
// (backend.SelectSharingPlan). It still sizes N (its pods, asking whole GPUs, may land
// on the pool), and shared says which such autoscalers there are ("" when none).
func (r *Reconciler) workloads(ctx context.Context, sel labels.Selector, gpuMemory int64, others map[string]labels.Selector) (out []sharingplan.Workload, shared string, err error) {
	var gfas gpufracv1.GPUFractionAutoscalerList
	if err := r.reader().List(ctx, &gfas, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, "", fmt.Errorf("listing GPUFractionAutoscalers: %w", err)
	}
	var ambiguous []string
	also := map[string]bool{}
	for _, g := range gfas.Items {
		amb := false
		for name, o := range others {
			if o.Matches(labels.Set(g.Labels)) {
				amb, also[name] = true, true
			}
		}
		if amb {
			ambiguous = append(ambiguous, g.Namespace+"/"+g.Name)
		}
		var rec gpufracv1.GPUFractionRecommendation
		if err := r.reader().Get(ctx, client.ObjectKeyFromObject(&g), &rec); err != nil && !apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("reading GPUFractionRecommendation %s/%s: %w", g.Namespace, g.Name, err)
		}
		st := rec.Status
		if st.Memory == nil || st.Memory.Sign() <= 0 {
			unsupported := meta.IsStatusConditionTrue(st.Conditions, gpufracv1.ConditionConfigUnsupported)
			if rec.Name == "" || (!unsupported && st.MatchedPods > 0) {
				out = append(out, sharingplan.Workload{Name: g.Namespace + "/" + g.Name, MemoryBytes: gpuMemory, ComputeMilli: -1, Pods: int(st.MatchedPods), ConfidencePercent: -1})
			}
			continue
		}
		// The webhook's gates (contract.Applies; the planner's own minConfidence below):
		// a recommendation the webhook does not apply is not what the pods get.
		if reason, _ := contract.Applies(&g, &rec, 0); reason != "" {
			if st.MatchedPods > 0 {
				out = append(out, sharingplan.Workload{Name: g.Namespace + "/" + g.Name, MemoryBytes: gpuMemory, ComputeMilli: -1, Pods: int(st.MatchedPods), ConfidencePercent: -1, NotApplied: string(reason)})
			}
			continue
		}
		// What the webhook writes: minMemory raises a recommendation that predates it.
		mem, _, _ := contract.PodMemory(&g, &rec, gpuMemory)
		w := sharingplan.Workload{Name: g.Namespace + "/" + g.Name, MemoryBytes: mem, ComputeMilli: -1, Mode: st.SharingMode, Pods: int(st.MatchedPods), ConfidencePercent: -1}
		if st.ConfidencePercent != nil {
			w.ConfidencePercent = *st.ConfidencePercent
		}
		if st.Compute != nil {
			w.ComputeMilli = st.Compute.MilliValue()
		}
		out = append(out, w)
	}
	if len(ambiguous) > 0 {
		names := make([]string, 0, len(also))
		for n := range also {
			names = append(names, n)
		}
		sort.Strings(names)
		shared = fmt.Sprintf("%d workload(s) (%s) also selected by GPUSharingPolicy %s: the webhook places their pods on neither pool, so they keep whole GPUs (make the autoscalerSelectors disjoint)",
			len(ambiguous), firstNames(ambiguous), strings.Join(names, ", "))
	}
	return out, shared, nil
}

// otherSelectors returns the autoscalerSelectors of the policies other than pol that
// the webhook reads as selecting an autoscaler too (backend.SelectSharingPlan: not
// being deleted, a selector that parses), by policy name.
func otherSelectors(pol *gpufracv1.GPUSharingPolicy, policies []gpufracv1.GPUSharingPolicy) map[string]labels.Selector {
	out := map[string]labels.Selector{}
	for i := range policies {
		o := &policies[i]
		if o.Name == pol.Name || o.DeletionTimestamp != nil {
			continue
		}
		if sel, err := metav1.LabelSelectorAsSelector(&o.Spec.AutoscalerSelector); err == nil {
			out[o.Name] = sel
		}
	}
	return out
}

// firstNames joins at most three names, then a count of the rest.
func firstNames(names []string) string {
	if len(names) > 3 {
		return strings.Join(names[:3], ", ") + fmt.Sprintf(", %d more", len(names)-3)
	}
	return strings.Join(names, ", ")
}

// setStatus writes the plan into pol.Status.
func setStatus(pol *gpufracv1.GPUSharingPolicy, in sharingplan.Input, p sharingplan.Plan, cfg string) {
	s := &pol.Status
	s.GPUMemory = resource.NewQuantity(in.GPUMemoryBytes, resource.BinarySI)
	s.SharingMode, s.Replicas, s.Reason = p.Mode, int32(p.Replicas), p.Reason
	s.MemoryReplicas, s.ComputeReplicas = int32(p.MemoryReplicas), int32(p.ComputeReplicas)
	s.LargestMemory = resource.NewQuantity(p.LargestMemoryBytes, resource.BinarySI)
	s.LargestCompute = nil
	if p.LargestComputeMilli >= 0 {
		s.LargestCompute = resource.NewMilliQuantity(p.LargestComputeMilli, resource.DecimalSI)
	}
	s.MPS = nil
	if p.Mode == gpufracv1.SharingModeMPS {
		s.MPS = &gpufracv1.MPSPlan{
			PinnedDeviceMemoryLimit: *resource.NewQuantity(p.PinnedMemoryBytes, resource.BinarySI),
			ActiveThreadPercentage:  int32(p.ActiveThreadPercentage),
		}
	}
	s.Workloads, s.Pods = int32(len(in.Workloads)), int32(p.Pods)
	s.GPUsHeld, s.GPUsNeeded, s.GPUsFreed = int32(p.GPUsHeld), int32(p.GPUsNeeded), int32(p.GPUsFreed)
	s.ConfigName, s.Config = ConfigName(pol), cfg
	now := metav1.Now()
	s.LastPlanTime = &now
}

// ConfigName is the device-plugin config key and node label value of pol's plan:
// gpufrac-<policy name>.
func ConfigName(pol *gpufracv1.GPUSharingPolicy) string { return "gpufrac-" + pol.Name }

func (r *Reconciler) setCondition(pol *gpufracv1.GPUSharingPolicy, typ string, st metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&pol.Status.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: pol.Generation})
}

func (r *Reconciler) event(pol *gpufracv1.GPUSharingPolicy, typ, reason, format string, args ...any) {
	if r.Events != nil {
		r.Events.Eventf(pol, nil, typ, reason, "Plan", format, args...)
	}
}
