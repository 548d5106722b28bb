package updater

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
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
	// owner is the evicted pod's controller (nil: none), whose spec.replicas says
	// whether the replacement is still missing after the timeout (missingReplacements).
	owner *metav1.OwnerReference
	// missing: the timeout passed and the controller has not created the replacement;
	// it holds the workload's budget, not its device (nothing is placed there).
	missing bool
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
	if _, known := u.expect[ref]; !known {
		// First sight of the workload since the updater started: the replacements the
		// last status says are awaited are awaited again (a restart forgets none).
		u.expect[ref] = resumed(p.st.AwaitedReplacements, p.pods)
	}
	awaited, replacements, expired := settle(u.expect[ref], p.pods, now, cfg.ReplacementTimeout)
	missing, msg := u.missingReplacements(ctx, ref.Namespace, expired, p.pods, now)
	for _, e := range expired {
		if !slices.Contains(missing, e) {
			log.Info("Replacement not ready in time; no longer counted in flight", "evicted", e.pod, "timeout", cfg.ReplacementTimeout)
		}
	}
	if len(missing) > 0 {
		awaited = append(awaited, missing...)
		p.wl.missing = msg
		u.eventOnce(gfa, "missing", corev1.EventTypeWarning, EventReplacementNotCreated, "Evict", msg)
	} else {
		u.forget(gfa, "missing")
	}
	u.expect[ref] = awaited
	p.st.AwaitedReplacements = nil
	for _, e := range awaited {
		p.st.AwaitedReplacements = append(p.st.AwaitedReplacements, e.record())
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
		pods, stuck := u.withoutStuck(ctx, ref.Namespace, p.pods, now)
		wanted, short := u.wantedReplicas(ctx, ref.Namespace, p.pods, awaited)
		byOwner := map[types.UID]int{}
		for _, e := range awaited {
			o := types.UID("")
			if e.owner != nil {
				o = e.owner.UID
			}
			byOwner[o]++
		}
		p.wl.budget, p.wl.counted = NewBudget(pods, wanted, byOwner, p.evicted, minReplicas(gfa), cfg.MaxInFlight), true
		pending := pendingTooLong(p.pods, now, cfg.ReplacementTimeout)
		p.wl.missing = strings.Join(slices.DeleteFunc([]string{p.wl.missing, short, stuck, pending}, func(s string) bool { return s == "" }), "; ")
	}
}

// wantedReplicas reads how many pods each controller of pods and of the awaited
// expectations wants (desiredReplicas; those that cannot be read are left out), for the
// disruption budget (NewBudget): it needs no memory of earlier evictions, so an updater
// restart forgets no replacement its controller never created. short names
// the controllers with fewer pods, not terminating, than they want and no replacement
// awaited by this updater (after a restart, or evicted by someone else); those awaited
// are named by missingReplacements.
func (u *Updater) wantedReplicas(ctx context.Context, ns string, pods []*corev1.Pod, awaited []*expectation) (wanted map[types.UID]int32, short string) {
	wanted = map[types.UID]int32{}
	owners := map[types.UID]*metav1.OwnerReference{}
	var order []types.UID
	add := func(o *metav1.OwnerReference) {
		if o == nil || owners[o.UID] != nil {
			return
		}
		owners[o.UID] = o
		order = append(order, o.UID)
	}
	for _, p := range pods {
		add(metav1.GetControllerOf(p))
	}
	mine := map[types.UID]bool{}
	for _, e := range awaited {
		add(e.owner)
		if e.owner != nil {
			mine[e.owner.UID] = true
		}
	}
	var parts []string
	for _, uid := range order {
		o := owners[uid]
		want, ok := u.desiredReplicas(ctx, ns, o)
		if !ok {
			continue
		}
		wanted[uid] = want
		have := 0
		for _, p := range pods {
			if controllerUID(p) == uid && p.DeletionTimestamp == nil {
				have++
			}
		}
		if have < int(want) && !mine[uid] {
			parts = append(parts, fmt.Sprintf("%s %s has %d of %d pods (a replacement not created: a ResourceQuota, LimitRange or admission webhook refusing it? see its FailedCreate events)", o.Kind, o.Name, have, want))
		}
	}
	return wanted, strings.Join(parts, "; ")
}

// missingReplacements returns the expired expectations whose replacement its controller
// has not created: the evicted pod's ReplicaSet, StatefulSet or DaemonSet (desiredReplicas)
// has fewer pods, not terminating, than its spec.replicas, at most that many per
// controller. Such a replacement is refused (a ResourceQuota, a LimitRange, another
// product's admission webhook): it stays in flight, or every further eviction would
// cost the workload a pod. A controller of another kind, or one that cannot be read,
// lets them expire; so does one scaled down to the pods it has. msg describes them.
func (u *Updater) missingReplacements(ctx context.Context, ns string, expired []*expectation, pods []*corev1.Pod, now time.Time) (missing []*expectation, msg string) {
	byOwner := map[types.UID][]*expectation{}
	var owners []*metav1.OwnerReference
	for _, e := range expired {
		if e.owner == nil {
			continue
		}
		if byOwner[e.owner.UID] == nil {
			owners = append(owners, e.owner)
		}
		byOwner[e.owner.UID] = append(byOwner[e.owner.UID], e)
	}
	var parts []string
	for _, o := range owners {
		want, ok := u.desiredReplicas(ctx, ns, o)
		if !ok {
			continue
		}
		have := 0
		for _, p := range pods {
			if c := metav1.GetControllerOf(p); c != nil && c.UID == o.UID && p.DeletionTimestamp == nil {
				have++
			}
		}
		es := byOwner[o.UID]
		es = es[:min(len(es), max(0, int(want)-have))]
		missing = append(missing, es...)
		for _, e := range es {
			e.missing = true
			parts = append(parts, fmt.Sprintf("the replacement of pod %s, evicted %v ago, was not created (%s %s has %d of %d pods: a ResourceQuota, LimitRange or admission webhook refusing it? see its FailedCreate events)",
				e.pod, now.Sub(e.at).Truncate(time.Second), o.Kind, o.Name, have, want))
		}
	}
	return missing, strings.Join(parts, "; ")
}

// withoutStuck returns pods without those stuck terminating — past their deletion
// deadline (deletionTimestamp, the grace period included) by more than
// Config.ReplacementTimeout: a finalizer nobody removes, a node gone — whose controller
// (desiredReplicas) has its spec.replicas of other pods, not
// terminating: they serve nothing and were replaced, and counted in flight they would
// hold the workload for as long as they stay. One whose controller lacks a pod (a
// StatefulSet recreates it only once it is gone) or is of another kind still counts,
// and note names it.
func (u *Updater) withoutStuck(ctx context.Context, ns string, pods []*corev1.Pod, now time.Time) (out []*corev1.Pod, note string) {
	type owned struct {
		want int32
		ok   bool
	}
	read := map[types.UID]owned{}
	var counted []string
	for _, p := range pods {
		if p.DeletionTimestamp == nil || !now.After(p.DeletionTimestamp.Add(u.Config.ReplacementTimeout)) {
			out = append(out, p)
			continue
		}
		o := metav1.GetControllerOf(p)
		if o == nil {
			out = append(out, p)
			counted = append(counted, fmt.Sprintf("%s (terminating since %s)", p.Name, stamp(p.DeletionTimestamp.Time)))
			continue
		}
		r, seen := read[o.UID]
		if !seen {
			r.want, r.ok = u.desiredReplicas(ctx, ns, o)
			read[o.UID] = r
		}
		have := 0
		for _, q := range pods {
			if c := metav1.GetControllerOf(q); c != nil && c.UID == o.UID && q.DeletionTimestamp == nil {
				have++
			}
		}
		if r.ok && have >= int(r.want) {
			continue
		}
		out = append(out, p)
		if !r.ok {
			counted = append(counted, fmt.Sprintf("%s (terminating since %s)", p.Name, stamp(p.DeletionTimestamp.Time)))
			continue
		}
		counted = append(counted, fmt.Sprintf("%s (terminating since %s; %s %s has %d other pod(s) of %d)", p.Name, stamp(p.DeletionTimestamp.Time), o.Kind, o.Name, have, r.want))
	}
	if len(counted) > 0 {
		note = "pod(s) stuck terminating, counted in flight until they are gone (a finalizer, or their node gone?): " + strings.Join(counted, ", ")
	}
	return out, note
}

// pendingTooLong names the pods (at most three) Pending for longer than timeout, with
// why: the scheduler's message, or a container's waiting reason (an image that does not
// pull). They count in flight for as long as they stay ("" when none).
func pendingTooLong(pods []*corev1.Pod, now time.Time, timeout time.Duration) string {
	var parts []string
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending || now.Sub(p.CreationTimestamp.Time) <= timeout {
			continue
		}
		if n++; n > 3 {
			continue
		}
		why := "not started"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				why = strings.TrimSpace(c.Reason + ": " + c.Message)
			}
		}
		if why == "not started" {
			for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
				if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
					why = strings.TrimSpace(w.Reason + ": " + w.Message)
					break
				}
			}
		}
		parts = append(parts, fmt.Sprintf("%s Pending for %v (%s)", p.Name, now.Sub(p.CreationTimestamp.Time).Truncate(time.Second), truncate(why, 200)))
	}
	if n > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", n-3))
	}
	if len(parts) == 0 {
		return ""
	}
	return "pod(s) Pending, counted in flight until they run: " + strings.Join(parts, ", ")
}

// desiredReplicas reads how many pods o wants, a ReplicaSet's or StatefulSet's
// spec.replicas (unset is 1), a DaemonSet's status.desiredNumberScheduled or a Job's
// active pods (jobWanted), in namespace ns, through Client (the informer cache, as the
// pods are read: the budget, the replacements not created and the stuck pods all read
// the same controllers, and a cycle costs the API server no read per workload). It is
// false for other controllers (their replacements count in flight only while this
// updater awaits them, until Config.ReplacementTimeout, and not across a restart), for
// a Job whose wanted pods cannot be told, and on errors.
func (u *Updater) desiredReplicas(ctx context.Context, ns string, o *metav1.OwnerReference) (int32, bool) {
	r := u.Client
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err == nil && gv.Group == batchv1.GroupName && o.Kind == "Job" {
		job := &batchv1.Job{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.Name}, job); err != nil || job.UID != o.UID {
			return 0, false
		}
		return jobWanted(job)
	}
	if err != nil || gv.Group != appsv1.GroupName {
		return 0, false
	}
	var obj client.Object
	var replicas func() *int32
	switch o.Kind {
	case "ReplicaSet":
		rs := &appsv1.ReplicaSet{}
		obj, replicas = rs, func() *int32 { return rs.Spec.Replicas }
	case "StatefulSet":
		sts := &appsv1.StatefulSet{}
		obj, replicas = sts, func() *int32 { return sts.Spec.Replicas }
	case "DaemonSet":
		ds := &appsv1.DaemonSet{}
		obj, replicas = ds, func() *int32 { return &ds.Status.DesiredNumberScheduled }
	default:
		return 0, false
	}
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.Name}, obj); err != nil || obj.GetUID() != o.UID {
		return 0, false
	}
	if r := replicas(); r != nil {
		return *r, true
	}
	return 1, true
}

// jobWanted is how many pods, not finished, job's controller keeps: none while it is
// suspended or finished (Complete or Failed); else spec.parallelism (unset is 1), at
// most the completions still wanted (spec.completions − status.succeeded). A Job
// without spec.completions (a work queue) starts no pod once one has succeeded: its
// wanted pods are then whatever runs, which cannot be told, and it is false.
func jobWanted(job *batchv1.Job) (int32, bool) {
	if ptr.Deref(job.Spec.Suspend, false) {
		return 0, true
	}
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return 0, true
		}
	}
	want := ptr.Deref(job.Spec.Parallelism, 1)
	if job.Spec.Completions == nil {
		if job.Status.Succeeded > 0 {
			return 0, false
		}
		return want, true
	}
	return max(0, min(want, *job.Spec.Completions-job.Status.Succeeded)), true
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
	e := &expectation{at: now, evicted: c.pod.UID, before: u.knownPods(ctx, p), pod: c.pod.Name, devices: podDevices(c.pod), owner: metav1.GetControllerOf(c.pod)}
	u.expect[p.ref] = append(u.expect[p.ref], e)
	p.st.AwaitedReplacements = append(p.st.AwaitedReplacements, e.record())
}

// record is e as status.updater.awaitedReplacements keeps it across restarts.
func (e *expectation) record() gpufracv1.AwaitedReplacement {
	return gpufracv1.AwaitedReplacement{Pod: e.pod, UID: e.evicted, EvictedAt: *secs(e.at), Controller: e.owner.DeepCopy()}
}

// resumed returns the expectations of records, the replacements the status says were
// awaited when the updater stopped: a pod of pods created since a record's eviction is
// its replacement (the pods the evicted one left are unknown after a restart). Devices
// are not known either: a resumed replacement holds the budget, not a device.
func resumed(records []gpufracv1.AwaitedReplacement, pods []*corev1.Pod) []*expectation {
	var out []*expectation
	for _, r := range records {
		e := &expectation{at: r.EvictedAt.Time, evicted: r.UID, before: map[types.UID]bool{r.UID: true}, pod: r.Pod, owner: r.Controller.DeepCopy()}
		for _, p := range pods {
			if p.CreationTimestamp.Before(&r.EvictedAt) {
				e.before[p.UID] = true
			}
		}
		out = append(out, e)
	}
	return out
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
