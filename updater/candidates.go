package updater

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// evaluated is one out-of-date pod and its decision.
type evaluated struct {
	pod   *corev1.Pod
	alloc PodAllocation
	need  Need
}

// evaluate is the plan's decision step: it decides for every pod of the plan that is
// not going away or excluded (Evaluate under rules), counts status.updater.pods, and
// returns the pods out of date. The hysteresis observes the workload's needs in every
// mode (a change seen before updateMode Off and after it back to Recreate persisted
// only if it was seen in the cycles between), after its rounds were seeded from the
// status (a restart forgets them; the last action stands in for the last round's start).
func (u *Updater) evaluate(p *plan, rules Rules, now time.Time) []evaluated {
	hkey := p.ref.String()
	// p.st holds the last round and replacement times carried over from the last status
	// (newPlan: none written for another target). A status of an earlier version has no
	// round: its last replacement stands in for the start of a round in either direction.
	if r := p.st.LastRound; r != nil {
		u.hyst.Seed(hkey, Round{Start: r.Started.Time, Grow: r.Grow, Shrink: r.Shrink})
	} else {
		for _, t := range []*metav1.Time{p.st.LastEvictionTime, p.st.LastInPlaceUpdateTime} {
			if t != nil {
				u.hyst.Seed(hkey, Round{Start: t.Time, Grow: true, Shrink: true})
			}
		}
	}
	var evals []evaluated
	var needs []Need
	for _, pod := range p.pods {
		if pod.DeletionTimestamp != nil || p.evicted[pod.UID] {
			continue // already going (the cache may not show the eviction yet)
		}
		p.st.Pods++
		if pod.Annotations[gpufracv1.AnnotationExclude] == "true" {
			continue
		}
		alloc := p.allocs[pod.UID]
		need := Evaluate(alloc, p.targets, podFacts(pod, now), rules)
		if !need.OutOfDate() {
			continue
		}
		evals = append(evals, evaluated{pod: pod, alloc: alloc, need: need})
		needs = append(needs, need)
	}
	// Observed in every mode, Off and Initial included: persistence counts consecutive
	// cycles of the target, not of the mode, so a streak seen before the mode was set
	// to Off does not go on across the cycles not observed.
	u.hyst.Observe(hkey, now, needs, p.window.Start)
	return evals
}

// podFacts are the pod's age at now and its last out-of-memory termination.
func podFacts(pod *corev1.Pod, now time.Time) PodFacts {
	facts := PodFacts{Age: now.Sub(pod.CreationTimestamp.Time)}
	for _, t := range Terminations(pod) {
		if t.OOM {
			facts.OOM = &t
		}
	}
	return facts
}

// selectCandidates lists every out-of-date pod in the plan's updates (status.updater
// .updates) and makes those that pass the plan's gates (planGates) candidates of this
// cycle.
func (u *Updater) selectCandidates(p *plan, evals []evaluated, now time.Time) {
	gates := u.planGates(now)
	for _, ev := range evals {
		p.st.PodsOutOfDate++
		c := &candidate{p: p, pod: ev.pod, alloc: ev.alloc, need: ev.need, action: gpufracv1.PodUpdateEvict}
		if p.mode == gpufracv1.UpdateModeInPlaceOrRecreate && p.backend == gpufracv1.BackendAnnotations && u.InPlace != nil {
			c.action = gpufracv1.PodUpdateInPlace
		}
		c.upd = gpufracv1.PodUpdate{Pod: ev.pod.Name, Action: c.action, Urgent: ev.need.Urgent, Reason: truncate(ev.need.Reason(), 600)}
		p.updates = append(p.updates, c)
		if admit(c, gates...) {
			p.cands = append(p.cands, c)
		}
	}
}
