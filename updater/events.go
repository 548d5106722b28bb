package updater

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Event reasons the updater records (events.k8s.io) on autoscalers and pods.
const (
	// EventEvicted (Normal, pod and autoscaler): a pod was evicted to apply the
	// recommendation; the note says why.
	EventEvicted = "EvictedForFraction"
	// EventEvictionRefused (Warning, autoscaler): the Eviction API refused, e.g. a
	// PodDisruptionBudget allows no disruption.
	EventEvictionRefused = "EvictionRefused"
	// EventEvictionFailed (Warning, autoscaler): an eviction failed with the pod still
	// there (an admission webhook denied it, the API server failed it); retried after
	// --retry-backoff. Once per message.
	EventEvictionFailed = "EvictionFailed"
	// EventInPlace (Normal, pod and autoscaler): a pod's fraction was changed in place.
	EventInPlace = "FractionUpdatedInPlace"
	// EventWouldUpdate (Normal, autoscaler): updateMode Off; what the updater would do.
	EventWouldUpdate = "WouldUpdate"
	// EventRolledBack (Warning, autoscaler): a guardrail tripped after a shrink; a floor
	// is set and the previous allocation is restored.
	EventRolledBack = "RolledBack"
	// EventUpdatesBlocked (Warning, autoscaler): updates stopped for a reason the user
	// should see (admission webhook unavailable, invalid window, target unresolved,
	// replacement unchanged).
	EventUpdatesBlocked = "UpdatesBlocked"
	// EventOOMBump (Warning, autoscaler): a container ended out of memory; the memory
	// floor was raised to VPA's bump so the next pods get more.
	EventOOMBump = "OutOfMemoryBump"
	// EventComputeShrinkHeld (Normal, autoscaler): a horizontal autoscaler scales the
	// workload on GPU utilisation; compute is not shrunk.
	EventComputeShrinkHeld = "ComputeShrinkHeld"
	// EventAppliedRecordInvalid (Warning, autoscaler): pods carry an applied record
	// (gpufrac.io/applied) that does not parse; the note names them with the parse
	// error. They are never shrunk (SkipRecordInvalid).
	EventAppliedRecordInvalid = "AppliedRecordInvalid"
	// EventReplacementUnplaceable (Warning, autoscaler): a pod is kept because its
	// replacement could not be placed (Placeable); the note says what is missing.
	EventReplacementUnplaceable = "ReplacementUnplaceable"
	// EventReplacementNotCreated (Warning, autoscaler): an evicted pod's ReplicaSet,
	// StatefulSet or DaemonSet has not created its replacement within --replacement-timeout (a
	// ResourceQuota, LimitRange or admission webhook refuses it); it stays in flight.
	EventReplacementNotCreated = "ReplacementNotCreated"
)

// event records an event when a recorder is set.
func (u *Updater) event(regarding, related client.Object, typ, reason, action, note string) {
	if u.Events == nil {
		return
	}
	if related == nil {
		u.Events.Eventf(regarding, nil, typ, reason, action, "%s", truncate(note, 1000))
		return
	}
	u.Events.Eventf(regarding, related, typ, reason, action, "%s", truncate(note, 1000))
}

// podEvent records an event on c's pod (related: its autoscaler) and the same on the
// autoscaler (related: the pod), naming the pod.
func (u *Updater) podEvent(c *candidate, typ, reason, action, note string) {
	u.event(c.pod, c.p.gfa, typ, reason, action, note)
	u.event(c.p.gfa, c.pod, typ, reason, action, "pod "+c.pod.Name+" "+note)
}

// eventOnce records an event on an autoscaler unless the last one under key said the same.
func (u *Updater) eventOnce(gfa *gpufracv1.GPUFractionAutoscaler, key, typ, reason, action, note string) {
	m := u.noted[gfa.UID]
	if m == nil {
		m = map[string]string{}
		u.noted[gfa.UID] = m
	}
	if m[key] == note {
		return
	}
	m[key] = note
	u.event(gfa, nil, typ, reason, action, note)
}

// forget drops what eventOnce noted under key, so the next note is recorded again.
func (u *Updater) forget(gfa *gpufracv1.GPUFractionAutoscaler, key string) {
	if m := u.noted[gfa.UID]; m != nil {
		delete(m, key)
	}
}

// stamp formats t for event notes and status messages: RFC 3339 in UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// truncate cuts s to at most n bytes at a UTF-8 boundary, marking the cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// utf8Start reports whether b starts a UTF-8 sequence.
func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
