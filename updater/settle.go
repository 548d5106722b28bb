package updater

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Settling replacements: after each eviction (or deletion) the updater waits for the
// workload's replacement; until it is ready it counts in flight, and a replacement that
// came back without its fraction pauses the workload's evictions.

// stuckState pauses a workload's evictions after a replacement came back unchanged.
type stuckState struct {
	until time.Time
	msg   string
	// n counts the replacements that came back unchanged in a row (the pause is
	// StuckBackoff doubled n−1 times, at most MaxStuckBackoff).
	n int
}

// expectation is a replacement the updater waits for after evicting a pod.
type expectation struct {
	// at is when the pod was evicted.
	at time.Time
	// evicted is the evicted pod's UID; before lists the workload's pods at that time
	// (a replacement is a pod not among them).
	evicted types.UID
	before  map[types.UID]bool
	// pod is the evicted pod's name, for messages.
	pod string
	// devices are the devices the evicted pod was on (podDevices), each with one
	// replacement in flight.
	devices []string
}

// settle matches ready new pods to expectations, oldest first, each pod to one
// expectation. It returns the expectations still awaited (younger than timeout) and
// the matched replacement pods, and the expectations that timed out.
func settle(exps []*expectation, pods []*corev1.Pod, now time.Time, timeout time.Duration) (awaited []*expectation, replacements []*corev1.Pod, expired []*expectation) {
	used := map[types.UID]bool{}
	for _, e := range exps {
		var match *corev1.Pod
		for _, p := range pods {
			if e.before[p.UID] || used[p.UID] || p.DeletionTimestamp != nil || !IsReady(p) {
				continue
			}
			match = p
			break
		}
		switch {
		case match != nil:
			used[match.UID] = true
			replacements = append(replacements, match)
		case now.Sub(e.at) > timeout:
			expired = append(expired, e)
		default:
			awaited = append(awaited, e)
		}
	}
	return awaited, replacements, expired
}

// settleReplacements is the plan's settling step: it matches earlier evictions to their
// ready replacements (settle), forgets those that timed out, pauses the workload when a
// replacement came back without a fraction (SkipReplacementUnchanged), and counts the
// workload's disruption budget once per cycle.
func (u *Updater) settleReplacements(ctx context.Context, p *plan, now time.Time) {
	cfg, ref, gfa := u.Config, p.ref, p.gfa
	log := klog.FromContext(ctx).WithValues("autoscaler", klog.KObj(gfa))
	awaited, replacements, expired := settle(u.expect[ref], p.pods, now, cfg.ReplacementTimeout)
	u.expect[ref] = awaited
	for _, e := range expired {
		log.Info("Replacement not ready in time; no longer counted in flight", "evicted", e.pod, "timeout", cfg.ReplacementTimeout)
	}
	for _, rp := range replacements {
		a := p.allocs[rp.UID]
		switch {
		case a.Record != nil || a.RecordError != nil:
			delete(u.stuck, ref) // the webhook wrote this one: pauses start over
		case p.recSkip == "" && gfa.Annotations[gpufracv1.AnnotationExclude] != "true" && rp.Annotations[gpufracv1.AnnotationExclude] != "true":
			// Each replacement in a row that came back unchanged doubles the pause: a
			// webhook that never writes this workload's pods while its Lease is fresh
			// would otherwise cost a restart every StuckBackoff, forever.
			n := u.stuck[ref].n + 1
			d := UnreadyBackoff(n, cfg.StuckBackoff, max(MaxStuckBackoff, cfg.StuckBackoff))
			msg := fmt.Sprintf("replacement pod %s came back without a fraction (the admission webhook left it unchanged; see its FractionNotApplied events; %d in a row): evictions of %s paused for %v", rp.Name, n, ref, d)
			u.stuck[ref] = stuckState{until: now.Add(d), msg: msg, n: n}
			log.Info("Replacement unchanged; pausing evictions", "pod", rp.Name, "for", d, "inARow", n)
		}
	}
	p.evicted = map[types.UID]bool{}
	for _, e := range awaited {
		p.evicted[e.evicted] = true
	}
	if !p.wl.counted {
		p.wl.budget, p.wl.counted = NewBudget(p.pods, len(awaited), p.evicted, minReplicas(gfa), cfg.MaxInFlight), true
	}
}

// replaced records a replacement of c's pod (evicted or deleted) at now: the hysteresis
// round, the workload's budget, status.updater.lastEvictionTime, and the replacement to
// await.
func (u *Updater) replaced(ctx context.Context, c *candidate, now time.Time) {
	p := c.p
	u.hyst.Replaced(p.ref.String(), now, c.need)
	p.wl.budget.Took()
	p.acted = true
	p.st.LastEvictionTime = secs(now)
	u.expect[p.ref] = append(u.expect[p.ref], &expectation{at: now, evicted: c.pod.UID, before: u.knownPods(ctx, p), pod: c.pod.Name, devices: podDevices(c.pod)})
}

// knownPods returns the UIDs of the workload's pods in the cache now (a replacement is
// a pod not among them).
func (u *Updater) knownPods(ctx context.Context, p *plan) map[types.UID]bool {
	out := map[types.UID]bool{}
	var list corev1.PodList
	if err := u.Client.List(ctx, &list, client.InNamespace(p.ref.Namespace)); err != nil {
		for _, c := range p.updates {
			out[c.pod.UID] = true
		}
		return out
	}
	for i := range list.Items {
		pod := &list.Items[i]
		if r, ok := u.owners.TopController(ctx, pod); ok && r == p.ref {
			out[pod.UID] = true
		}
	}
	return out
}
