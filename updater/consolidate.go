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
	"github.com/gpufrac/gpufrac/packing"
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
	at          time.Time
	autoscalers []types.UID
}

// movable is a pod consolidation may replace: its plan and what its replacement takes
// on a shared GPU, bytes.
type movable struct {
	p    *plan
	pod  *corev1.Pod
	next int64
}

// consolidate adds the candidates of this cycle's consolidation to their plans and to
// cy.cands (Config.Consolidate; nothing when the capacity is unknown, while a
// replacement of this updater is awaited or a pod of an autoscaler is terminating, or
// when no shared GPU can be emptied).
func (u *Updater) consolidate(ctx context.Context, cy *cycle) {
	if !u.Config.Consolidate {
		return
	}
	// One GPU at a time: while a replacement is awaited, where it lands is not known yet,
	// and a GPU it leaves could look like room (or a GPU to empty) that is not there.
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
	cy.readCapacity(ctx, u)
	if cy.capacity == nil {
		return
	}
	if u.checkDrained(ctx, cy); cy.now.Before(u.consolidationHeld) {
		return
	}
	pods := u.movablePods(cy)
	if len(pods) == 0 {
		return
	}
	type at struct{ node, gpu int }
	var devs []packing.Device
	var where []at // where[i] is devs[i]'s node and shared GPU, filled before Consolidation reads Allowed
	for ni, n := range cy.capacity {
		for gi, g := range n.Shared {
			if len(g.Tenants) == 0 {
				continue
			}
			d := packing.Device{MemoryBytes: g.MemoryBytes}
			for _, t := range g.Tenants {
				tn := packing.Tenant{Alloc: packing.Alloc{MemoryBytes: t.MemoryBytes}, Next: packing.Alloc{MemoryBytes: t.MemoryBytes}}
				if m, ok := pods[t.UID]; ok {
					tn.Next.MemoryBytes, tn.Movable = m.next, true
					tn.Allowed = func(i int) bool { return runsOn(m.pod, cy.capacity[where[i].node].node) }
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
	for j, t := range gpu.Tenants {
		m := pods[t.UID]
		to := cy.capacity[where[dest[j]].node]
		reason := fmt.Sprintf("consolidation: the %d pod(s) on GPU %s fit on the other shared GPUs in use (this one's replacement, %s, on %s/%s); emptying it frees a GPU",
			len(gpu.Tenants), from, fmtBytes(m.next), to.Name, to.Shared[where[dest[j]].gpu].ID)
		c := &candidate{p: m.p, pod: m.pod, alloc: m.p.allocs[m.pod.UID], action: gpufracv1.PodUpdateEvict,
			need: Need{Consolidate: true, Reasons: []string{reason}}}
		c.upd = gpufracv1.PodUpdate{Pod: m.pod.Name, Action: c.action, Reason: truncate(reason, 600)}
		m.p.updates = append(m.p.updates, c)
		if admit(c, pendingGate, modeGate, recommendationGate, recommenderGate, windowGate, publishingGate) {
			m.p.cands = append(m.p.cands, c)
			cy.cands = append(cy.cands, c)
		}
		u.eventOnce(m.p.gfa, "consolidate", corev1.EventTypeNormal, EventConsolidating, "Evict",
			fmt.Sprintf("replacing pods to empty shared GPU %s: its %d pod(s) fit on the other GPUs in use", from, len(gpu.Tenants)))
	}
	st := &drainState{at: cy.now}
	for _, t := range gpu.Tenants {
		st.autoscalers = append(st.autoscalers, pods[t.UID].p.gfa.UID)
	}
	u.drained[from] = st
	consolidationsTotal.Inc()
	klog.FromContext(ctx).Info("Consolidating a shared GPU", "gpu", from, "pods", len(gpu.Tenants))
}

// movablePods returns, by UID, the pods consolidation may replace now: Ready pods of
// autoscalers that replace pods (Recreate, or InPlaceOrRecreate off the annotations
// backend) with a recommendation the webhook applies, a resize window open, a fresh
// recommender and nothing being published, at least Config.MinPodAge old, on one shared
// GPU, neither excluded, going away nor already out of date.
func (u *Updater) movablePods(cy *cycle) map[types.UID]movable {
	out := map[types.UID]movable{}
	for _, p := range cy.plans {
		replaces := p.mode == gpufracv1.UpdateModeRecreate ||
			(p.mode == gpufracv1.UpdateModeInPlaceOrRecreate && p.backend != gpufracv1.BackendAnnotations)
		if !replaces || p.recSkip != "" || p.blockR != "" || !p.window.Open || p.werr != nil ||
			p.staleMsg != "" || p.heldPending != "" || p.floorPending != "" {
			continue
		}
		for _, pod := range p.pods {
			if pod.DeletionTimestamp != nil || p.evicted[pod.UID] || !IsReady(pod) ||
				pod.Annotations[gpufracv1.AnnotationExclude] == "true" ||
				cy.now.Sub(pod.CreationTimestamp.Time) < u.Config.MinPodAge || len(podDevices(pod)) != 1 ||
				slices.ContainsFunc(p.updates, func(c *candidate) bool { return c.pod.UID == pod.UID }) {
				continue
			}
			r := replacementNeed(pod, p.allocs[pod.UID], p.targets, p.backend, u.Config.Backend, p.overhead)
			if r.SharedMemory <= 0 {
				continue
			}
			out[pod.UID] = movable{p: p, pod: pod, next: r.SharedMemory}
		}
	}
	return out
}

// runsOn reports whether pod's replacement may be scheduled on node as far as its
// required node affinity, node selector and the node's NoSchedule and NoExecute taints
// say (k8s.io/component-helpers, as the scheduler's filters read them); true for an
// unknown node.
func runsOn(pod *corev1.Pod, node *corev1.Node) bool {
	if node == nil {
		return true
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated
}

// checkDrained looks at the shared GPUs consolidation emptied within the last
// Config.ReplacementTimeout (older ones are forgotten): one that holds a pod created
// after it was emptied was refilled by the scheduler, so consolidation stops for
// ConsolidationHold (EventConsolidationUndone on the autoscalers whose pods moved).
func (u *Updater) checkDrained(ctx context.Context, cy *cycle) {
	for key, st := range u.drained {
		if cy.now.Sub(st.at) > u.Config.ReplacementTimeout {
			delete(u.drained, key)
			continue
		}
		for _, n := range cy.capacity {
			for _, g := range n.Shared {
				if n.Name+"/"+g.ID != key || !slices.ContainsFunc(g.Tenants, func(t DeviceTenant) bool { return t.Created.After(st.at) }) {
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
