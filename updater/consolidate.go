package updater

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/workload"
)

// Consolidation (Config.Consolidate): pods never move once placed, so shared GPUs are
// left holding a few small tenants that would fit on other GPUs in use. Once per cycle
// the updater picks one shared GPU (a HAMi device or a KAI GPU group: where it knows
// each pod's GPU) whose tenants are all pods it may replace now, and whose replacements,
// at what the webhook writes now, all fit on the other shared GPUs in use
// (packing.Consolidation, the code the what-if simulator runs). Its pods become
// candidates like any other out-of-date pod: the disruption budget, the per-device
// in-flight limit, the placement check and the eviction rate still apply, and a binpack
// scheduler (KAI's default; HAMi with the binpack GPU policy) places the replacements
// on the fuller GPUs.

// Consolidation's events.
const (
	// EventConsolidating (Normal, autoscaler): pods of the autoscaler are replaced to
	// empty a shared GPU (once per GPU).
	EventConsolidating = "Consolidating"
	// EventConsolidationUndone (Warning, autoscaler): a pod was placed on a shared GPU
	// that consolidation had just emptied, so the scheduler does not binpack (HAMi's
	// default GPU policy is spread); consolidation stops for ConsolidationHold.
	EventConsolidationUndone = "ConsolidationUndone"
)

// ConsolidationHold is how long consolidation stops after a pod was placed on a shared
// GPU it had just emptied: a scheduler that spreads undoes every consolidation, and
// every pod moved is a restart.
const ConsolidationHold = 24 * time.Hour

// drainState is a shared GPU consolidation emptied: when, and the autoscalers whose pods
// it replaced (their events).
type drainState struct {
	at          time.Time // the last eviction from it
	autoscalers []types.UID
	refs        []workload.Ref // the workloads whose pods left it
}

// movable is a pod consolidation may replace: its plan and what its replacement takes
// on a shared GPU (memory bytes, compute milli-GPU).
type movable struct {
	p       *plan
	pod     *corev1.Pod
	next    int64
	compute int64
}

// consolidate adds the candidates of this cycle's consolidation to their plans and to
// cy.cands (Config.Consolidate). Nothing is consolidated during the updater's warm-up,
// while consolidation is held (checkDrained), while this cycle has other candidates, a replacement of this
// updater is awaited or a pod of an autoscaler is terminating (where they land is not
// known yet, so a GPU could look like room, or like a GPU to empty, that is not there),
// when the capacity is unknown, or when no shared GPU can be emptied. The GPU chosen is
// recorded as drained only when one of its pods is evicted (noteConsolidated).
func (u *Updater) consolidate(ctx context.Context, cy *cycle) {
	if !u.Config.Consolidate {
		return
	}
	if len(u.drained) > 0 {
		cy.readCapacity(ctx, u)
		u.checkDrained(ctx, cy)
	}
	if cy.now.Before(u.consolidationHeld) || len(cy.cands) > 0 || cy.now.Sub(u.started) < u.Config.WarmUp {
		return
	}
	for _, exps := range u.expect {
		if len(exps) > 0 {
			return
		}
	}
	for _, p := range cy.plans {
		for _, pod := range p.pods {
			if pod.DeletionTimestamp != nil {
				return
			}
		}
	}
	// Movable pods first: the capacity is a cluster-wide list of nodes and pods, read
	// only when something could move.
	pods := u.movablePods(cy)
	if len(pods) == 0 {
		return
	}
	cy.readCapacity(ctx, u)
	if cy.capacity == nil {
		return
	}
	type at struct{ node, gpu int }
	var devs []packing.Device
	var where []at // where[i] is devs[i]'s node and shared GPU, filled before Consolidation reads Allowed
	for ni, n := range cy.capacity {
		if n.node != nil && n.node.Spec.Unschedulable {
			continue // cordoned: its GPUs are neither emptied nor filled
		}
		for gi, g := range n.Shared {
			if len(g.Tenants) == 0 {
				continue
			}
			key := n.Name + "/" + g.ID
			skipped := cy.now.Before(u.consolidationSkip[key])
			d := packing.Device{MemoryBytes: g.MemoryBytes}
			if g.FreeSlots < unlimitedSlots {
				d.MaxTenants = len(g.Tenants) + int(max(g.FreeSlots, 0))
			}
			for _, t := range g.Tenants {
				cur := packing.Alloc{MemoryBytes: t.MemoryBytes, ComputeMilli: t.ComputeMilli}
				tn := packing.Tenant{Alloc: cur, Next: cur}
				if m, ok := pods[t.UID]; ok && !skipped {
					tn.Next, tn.Movable = packing.Alloc{MemoryBytes: m.next, ComputeMilli: m.compute}, true
					tn.Allowed = func(i int) bool {
						node := cy.capacity[where[i].node]
						if ownNodeOnly(m.pod) {
							return node.Name == m.pod.Spec.NodeName // a DaemonSet runs it there only
						}
						return runsOn(m.pod, node.node)
					}
				}
				d.Tenants = append(d.Tenants, tn)
			}
			devs = append(devs, d)
			where = append(where, at{ni, gi})
		}
	}
	drain, dest, ok := packing.Consolidation(devs, packing.ConsolidationOptions{MaxComputeMilli: u.Config.ConsolidationComputeMilli})
	if !ok {
		return
	}
	node := cy.capacity[where[drain].node]
	gpu := node.Shared[where[drain].gpu]
	from := node.Name + "/" + gpu.ID
	cy.consolidating = from
	for j, t := range gpu.Tenants {
		m := pods[t.UID]
		to := cy.capacity[where[dest[j]].node]
		reason := fmt.Sprintf("consolidation: the %d pod(s) on GPU %s fit on the other shared GPUs in use (this one's replacement, %s, on %s/%s); emptying it frees a GPU",
			len(gpu.Tenants), from, fmtBytes(m.next), to.Name, to.Shared[where[dest[j]].gpu].ID)
		c := &candidate{p: m.p, pod: m.pod, alloc: m.p.allocs[m.pod.UID], action: gpufracv1.PodUpdateEvict,
			need: Need{Consolidate: true, Reasons: []string{reason}}, drain: drainOf{node: node.Name, gpu: gpu.ID, pods: len(gpu.Tenants)}}
		c.upd = gpufracv1.PodUpdate{Pod: m.pod.Name, Action: c.action, Reason: truncate(reason, 600)}
		m.p.updates = append(m.p.updates, c)
		// The plan's gates but the hysteresis: no target changed, so there is nothing to
		// persist; --min-pod-age was checked above.
		if admit(c, baseGates()...) {
			m.p.cands = append(m.p.cands, c)
			cy.cands = append(cy.cands, c)
			cy.consCands = append(cy.consCands, c)
		}
	}
	klog.FromContext(ctx).Info("Consolidating a shared GPU", "gpu", from, "pods", len(gpu.Tenants))
}

// drainOf is the shared GPU a consolidation candidate is moved off, and how many pods
// it holds.
type drainOf struct {
	node, gpu string
	pods      int
}

// key is the GPU as "node/ID".
func (d drainOf) key() string { return d.node + "/" + d.gpu }

// noteConsolidated records an eviction of consolidation candidate c: the GPU it leaves
// is drained from now (checkDrained), counted once and announced once per GPU
// (EventConsolidating) on the autoscaler.
func (u *Updater) noteConsolidated(c *candidate, now time.Time) {
	key := c.drain.key()
	st := u.drained[key]
	if st == nil {
		st = &drainState{}
		u.drained[key] = st
		consolidationsTotal.Inc()
	}
	st.at = now
	if !slices.Contains(st.autoscalers, c.p.gfa.UID) {
		st.autoscalers = append(st.autoscalers, c.p.gfa.UID)
	}
	if !slices.Contains(st.refs, c.p.ref) {
		st.refs = append(st.refs, c.p.ref)
	}
	u.eventOnce(c.p.gfa, "consolidate", corev1.EventTypeNormal, EventConsolidating, "Evict",
		fmt.Sprintf("replacing pods to empty shared GPU %s: its %d pod(s) fit on the other GPUs in use", key, c.drain.pods))
}

// consolidationOutcome, after the cycle's evictions: a GPU chosen whose pods all stayed
// for reasons of their own (a disruption budget, a refused eviction, a placement check,
// a device's replacement in flight) is passed over for Config.RetryBackoff, so that the
// next cycle tries another instead of the same one; one held for the cluster's reasons
// (the rate limit, the webhook) is chosen again.
func (u *Updater) consolidationOutcome(cy *cycle) {
	if cy.consolidating == "" {
		return
	}
	gpuBound := false
	for _, c := range cy.consCands {
		switch c.upd.SkipReason {
		case "":
			return // evicted
		case SkipPDB, SkipMinReplicas, SkipInFlight, SkipNoCapacity, SkipDeviceInFlight, SkipEvictionError:
			gpuBound = true // this GPU's pods, not the cluster (warm-up, rate limit, webhook)
		}
	}
	if !gpuBound {
		return
	}
	u.consolidationSkip[cy.consolidating] = cy.now.Add(u.Config.RetryBackoff)
	for k, until := range u.consolidationSkip {
		if !cy.now.Before(until) {
			delete(u.consolidationSkip, k)
		}
	}
}

// movablePods returns, by UID, the pods consolidation may replace now: Ready pods that
// restart (restartPolicy Always: not a Job's) of autoscalers that replace pods
// (Recreate, or InPlaceOrRecreate off the annotations backend) with a recommendation the
// webhook applies, a resize window open, a fresh recommender that selects its namespace, complete data, no
// guardrail holding, no rollback floor or shrink under verification and nothing being
// published, at least Config.MinPodAge old, on one shared GPU, neither excluded, going
// away, already out of date, waiting to retry an eviction nor of a workload whose
// replacements came back unchanged or whose evictions a PodDisruptionBudget refused lately.
func (u *Updater) movablePods(cy *cycle) map[types.UID]movable {
	out := map[types.UID]movable{}
	for _, p := range cy.plans {
		replaces := p.mode == gpufracv1.UpdateModeRecreate ||
			(p.mode == gpufracv1.UpdateModeInPlaceOrRecreate && p.backend != gpufracv1.BackendAnnotations)
		if !replaces || p.recSkip != "" || p.blockR != "" || !p.window.Open || p.werr != nil ||
			p.staleMsg != "" || p.notSelectedMsg != "" || p.heldPending != "" || p.floorPending != "" ||
			p.guard != gpufracv1.GuardrailNone || contract.IncompleteData(p.gfr) != "" ||
			p.st.Floor != nil || p.st.Verification != nil {
			continue
		}
		if s, ok := u.stuck[p.ref]; ok && cy.now.Before(s.until) {
			continue
		}
		if s, ok := u.refusals[p.ref]; ok && cy.now.Before(s.until) {
			continue
		}
		for _, pod := range p.pods {
			if r, ok := u.retry[pod.UID]; ok && cy.now.Before(r.until) {
				continue
			}
			rp := pod.Spec.RestartPolicy
			if pod.DeletionTimestamp != nil || p.evicted[pod.UID] || !IsReady(pod) || (rp != "" && rp != corev1.RestartPolicyAlways) ||
				pod.Annotations[gpufracv1.AnnotationExclude] == "true" ||
				cy.now.Sub(pod.CreationTimestamp.Time) < u.Config.MinPodAge || len(podDevices(pod)) != 1 ||
				slices.ContainsFunc(p.updates, func(c *candidate) bool { return c.pod.UID == pod.UID }) {
				continue
			}
			alloc := p.allocs[pod.UID]
			r := replacementNeed(pod, alloc, p.gfa, p.targets, p.backend, u.Config.Backend, p.overhead, cy.now)
			if r.SharedMemory <= 0 {
				continue
			}
			out[pod.UID] = movable{p: p, pod: pod, next: r.SharedMemory, compute: replacementCompute(alloc, p, cy.now)}
		}
	}
	return out
}

// replacementCompute is the compute, milli-GPU, the replacement of a pod with
// allocation alloc holds on its GPU at now where the backend partitions compute (HAMi's
// gpucores): each container's compute as the webhook writes it where the policy controls
// it (contract.WrittenOf: the target, at least the rollback floor in force), else what it
// holds now; 0 where none is written.
func replacementCompute(alloc PodAllocation, p *plan, now time.Time) int64 {
	if p.backend != gpufracv1.BackendHAMi {
		return 0
	}
	var sum int64
	for name, a := range alloc.Containers {
		v := max(a.Compute, 0)
		if t, ok := p.targets[name]; ok && t.ControlsCompute && t.Compute >= 0 {
			v = contract.WrittenOf(p.gfa, t, now, 0, 0).ComputeMilli
		}
		sum += v
	}
	return sum
}

// runsOn reports whether pod's replacement may be scheduled on node as far as its
// required node affinity, node selector, the node's NoSchedule and NoExecute taints and
// its spec.unschedulable (a cordoned node: only for a pod that tolerates the
// node.kubernetes.io/unschedulable NoSchedule taint, as a DaemonSet's pods do) say
// (k8s.io/component-helpers, as the scheduler's filters, NodeUnschedulable among them,
// read them); true for an unknown node.
func runsOn(pod *corev1.Pod, node *corev1.Node) bool {
	if node == nil {
		return true
	}
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, false) {
		return false
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated
}

// checkDrained looks at the shared GPUs consolidation evicted a pod from within the
// last Config.ReplacementTimeout (older ones are forgotten): one that holds a pod of a
// workload whose pods left it, created after the last eviction from it (a replacement),
// was refilled by the scheduler, so consolidation stops for ConsolidationHold
// (EventConsolidationUndone on the autoscalers whose pods moved). A KAI GPU group that
// was emptied has no ID left to find it by, so this is seen on HAMi devices only; the
// state is the process's, so a restart or a new leader forgets it.
func (u *Updater) checkDrained(ctx context.Context, cy *cycle) {
	refs := map[types.UID]workload.Ref{} // the planned pods' workloads
	for _, p := range cy.plans {
		for _, pod := range p.pods {
			refs[pod.UID] = p.ref
		}
	}
	for key, st := range u.drained {
		if cy.now.Sub(st.at) > u.Config.ReplacementTimeout {
			delete(u.drained, key)
			continue
		}
		for _, n := range cy.capacity {
			for _, g := range n.Shared {
				if n.Name+"/"+g.ID != key || !slices.ContainsFunc(g.Tenants, func(t DeviceTenant) bool {
					ref, ok := refs[t.UID]
					return ok && t.Created.After(st.at) && slices.Contains(st.refs, ref)
				}) {
					continue
				}
				delete(u.drained, key)
				u.consolidationHeld = cy.now.Add(ConsolidationHold)
				msg := fmt.Sprintf("a new pod was placed on shared GPU %s right after consolidation emptied it: the scheduler does not binpack GPU fractions (HAMi: set its GPU scheduler policy to binpack), so consolidation stops until %s", key, stamp(u.consolidationHeld))
				for _, p := range cy.plans {
					if slices.Contains(st.autoscalers, p.gfa.UID) {
						u.eventOnce(p.gfa, "consolidation-undone", corev1.EventTypeWarning, EventConsolidationUndone, "Evict", msg)
					}
				}
				klog.FromContext(ctx).Info("Consolidation undone by the scheduler; consolidation stopped", "gpu", key, "until", u.consolidationHeld)
			}
		}
	}
}
