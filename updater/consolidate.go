package updater

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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

// EventConsolidating (Normal, autoscaler): pods of the autoscaler are replaced to empty a
// shared GPU (once per GPU).
const EventConsolidating = "Consolidating"

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
	pods := u.movablePods(cy)
	if len(pods) == 0 {
		return
	}
	type at struct{ node, gpu int }
	var devs []packing.Device
	var where []at
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
