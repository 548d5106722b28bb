package updater

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

// Rollback verification: after a shrink the guardrails are watched for
// Config.VerificationPeriod; a breach, or an out-of-memory exit at any time, raises
// status.updater.floor, which the recommender honours and the webhook writes.

// Reasons of the RolledBack condition (status.updater.conditions).
const (
	// ReasonLatencyBreach: RolledBack True after a latency breach.
	ReasonLatencyBreach = "LatencyBreach"
	// ReasonRestartAfterShrink: RolledBack True after a container restart.
	ReasonRestartAfterShrink = "RestartAfterShrink"
	// ReasonOutOfMemory: RolledBack True after an out-of-memory exit raised the floor.
	ReasonOutOfMemory = "OutOfMemory"
	// ReasonNoFloor: RolledBack False.
	ReasonNoFloor = "NoFloor"
)

// verifyShrink is the plan's rollback-verification step: when the shrink under
// verification is breached (breach) it raises the floor to the allocation before the
// shrink, ends the verification, sets RolledBack and the note of the RolledBack event.
func (u *Updater) verifyShrink(ctx context.Context, p *plan, now time.Time) {
	v, st, cfg := p.st.Verification, p.st, u.Config
	if v == nil {
		return
	}
	trigger, msg := breach(v, p.guard, p.guardMsg, p.pods, p.allocs)
	if trigger == "" {
		return
	}
	reason := fmt.Sprintf("%s within %v after the shrink at %s", msg, cfg.VerificationPeriod, stamp(v.Started.Time))
	st.Floor = raiseFloor(st.Floor, v.Previous, now.Add(cfg.FloorDuration), reason)
	st.Verification = nil
	condReason := ReasonLatencyBreach
	if trigger == "restart" {
		condReason = ReasonRestartAfterShrink
	}
	p.setRolledBack(metav1.ConditionTrue, condReason, reason)
	rollbacksTotal.WithLabelValues(trigger).Inc()
	p.rollback = fmt.Sprintf("Rolling back: %s. Floor %s until %s: the recommender must not go below it, and pods below it are replaced (urgently, outside resize windows when urgentGrowth allows) as soon as the recommendation reaches it.",
		reason, describeAllocs(st.Floor.Containers), stamp(st.Floor.Until.Time))
	klog.FromContext(ctx).Info("Guardrail tripped after a shrink; rolling back", "autoscaler", klog.KObj(p.gfa), "trigger", trigger, "reason", reason)
}

// setRolledBack sets the RolledBack condition.
func (p *plan) setRolledBack(status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&p.st.Conditions, metav1.Condition{Type: gpufracv1.UpdaterConditionRolledBack, Status: status,
		Reason: reason, Message: truncate(msg, 1000), ObservedGeneration: p.gfa.Generation})
}

// noFloorCondition sets RolledBack False when no floor is in force.
func (p *plan) noFloorCondition() {
	if p.st.Floor == nil {
		p.setRolledBack(metav1.ConditionFalse, ReasonNoFloor, "no rollback floor in force")
	}
}

// oomFloors raises the floor for out-of-memory exits (running pods that restarted, and
// pods that ended Failed, such as a Job's pod with restartPolicy Never): each raises the
// floor of the container's memory to VPA's bump, which the recommender honours and the
// webhook writes into the next pod. The floor lasts FloorDuration from the exit, so an
// old exit expires.
func (u *Updater) oomFloors(ctx context.Context, p *plan, byNS map[string][]corev1.Pod, now time.Time) {
	failed := u.failedPodsOf(ctx, p.ref, byNS)
	for _, pod := range failed {
		p.allocs[pod.UID] = ReadAllocation(pod, p.backend, u.Config.Backend, p.overhead)
	}
	for _, pod := range append(append([]*corev1.Pod(nil), p.pods...), failed...) {
		for _, t := range Terminations(pod) {
			u.oomFloor(ctx, p, pod, t, now)
		}
	}
}

// oomFloor raises the floor for one termination when it is an out-of-memory exit within
// FloorDuration whose bump is above the floor, with the condition and an OutOfMemoryBump
// event.
func (u *Updater) oomFloor(ctx context.Context, p *plan, pod *corev1.Pod, t Termination, now time.Time) {
	applied := int64(-1)
	if a, ok := p.allocs[pod.UID].Containers[t.Container]; ok {
		applied = a.Memory
	}
	floor, reason := RaiseOOMFloor(p.st.Floor, pod.Name, t, applied, u.Config.FloorDuration, now)
	if reason == "" {
		return
	}
	p.st.Floor = floor
	p.setRolledBack(metav1.ConditionTrue, ReasonOutOfMemory, reason)
	u.event(p.gfa, pod, corev1.EventTypeWarning, EventOOMBump, "Update", "out of memory: "+reason+"; the next pods get at least this memory")
	klog.FromContext(ctx).Info("Out-of-memory exit; memory floor raised", "autoscaler", klog.KObj(p.gfa), "pod", pod.Name, "container", t.Container, "floor", fmtBytes(floorMemory(floor, t.Container)))
}

// RaiseOOMFloor is the rollback floor after the termination t of pod's container whose
// memory is applied (bytes, the pod's allocation; -1 unknown), as the updater raises
// status.updater.floor for it, and the floor's reason: for an out-of-memory exit that
// ended less than d ago at now, whose bump (OOMBump) is above the container's floor in
// floor (nil: none), a copy of floor raised to the bump for that container, until
// t.FinishedAt + d or floor's end where later. Otherwise it returns floor and "". It
// is the one rule the updater (oomFloor) and gpufrac simulate run; floor is not
// modified.
func RaiseOOMFloor(floor *gpufracv1.UpdaterFloor, pod string, t Termination, applied int64, d time.Duration, now time.Time) (*gpufracv1.UpdaterFloor, string) {
	until := t.FinishedAt.Add(d)
	if !t.OOM || !now.Before(until) {
		return floor, ""
	}
	bump := OOMBump(t, applied)
	if bump <= 0 || floorMemory(floor, t.Container) >= bump {
		return floor, ""
	}
	reason := fmt.Sprintf("pod %s: %s; memory floor %s (max(used + 100Mi, used × 1.2))", pod, t, fmtBytes(bump))
	return raiseFloor(floor, []gpufracv1.ContainerAllocation{{ContainerName: t.Container, Memory: resource.NewQuantity(bump, resource.BinarySI)}}, until, reason), reason
}

// FloorExpired reports whether the rollback floor f (nil: none) has ended at now
// (its until): the updater drops it, and the webhook and the recommender no longer
// apply it (contract.Floor).
func FloorExpired(f *gpufracv1.UpdaterFloor, now time.Time) bool {
	return f != nil && !now.Before(f.Until.Time)
}

// publishFloor holds the plan's replacements while a floor raised this cycle is not yet
// in the published status.updater.floor, which the webhook reads (contract.Floor) to
// give the replacement at least the floor, and the webhook would write a replacement
// below it without it (AwaitsFloor): it returns why, or "". A replacement whose target
// is already at or above the new floor (the recommendation grew past it) gets it
// whether or not the floor is published: holding it would only delay a protective
// growth by a cycle.
func (p *plan) publishFloor(now time.Time, gpuMemoryBytes int64) string {
	below := AwaitsFloor(p.st.Floor, p.gfa, p.targets, gpuMemoryBytes, now)
	if len(below) == 0 {
		return ""
	}
	return fmt.Sprintf("the rollback floor (%s) is being published in status.updater.floor, which the webhook writes into the replacement, and the recommendation of %s is below it; next cycle", describeAllocs(p.st.Floor.Containers), strings.Join(below, ", "))
}

// AwaitsFloor returns the containers, by name, whose replacement the webhook would
// write below the rollback floor (status.updater.floor as decided this cycle; nil:
// none) at now unless the floor is published first: a resource of the floor above
// what published's status.updater.floor gives (what the webhook reads now,
// contract.Floor) and above what targets (the webhook's targets of the containers,
// contract.Target: the need, NeedMemory, and Compute) write by themselves, the floor at
// most one GPU of gpuMemoryBytes bytes (0: unknown) or 1000m as the webhook writes it.
// A container without a target that controls the resource counts as below. Nil when
// a replacement created now gets at least the floor. It is the one rule the updater
// (publishFloor, the awaiting-floor hold) and gpufrac simulate run.
func AwaitsFloor(floor *gpufracv1.UpdaterFloor, published *gpufracv1.GPUFractionAutoscaler, targets map[string]contract.Target, gpuMemoryBytes int64, now time.Time) []string {
	if floor == nil {
		return nil
	}
	var below []string
	for _, c := range floor.Containers {
		pm, pc := contract.Floor(published, c.ContainerName, now)
		t, ok := targets[c.ContainerName]
		w := writableFloor(Alloc{Memory: contract.BytesOf(c.Memory), Compute: contract.MilliOf(c.Compute)}, gpuMemoryBytes)
		memBelow := c.Memory != nil && pm < c.Memory.Value() && (!ok || !t.ControlsMemory || t.NeedMemory() < w.Memory)
		computeBelow := c.Compute != nil && pc < c.Compute.MilliValue() && (!ok || !t.ControlsCompute || t.Compute < w.Compute)
		if memBelow || computeBelow {
			below = append(below, c.ContainerName)
		}
	}
	return below
}

// floorMemory returns the floor's memory for a container, bytes (-1 none).
func floorMemory(f *gpufracv1.UpdaterFloor, container string) int64 {
	if f == nil {
		return -1
	}
	for _, c := range f.Containers {
		if c.ContainerName == container && c.Memory != nil {
			return c.Memory.Value()
		}
	}
	return -1
}

// breach checks a shrink under verification: the latency guardrail breached, or a
// container of a pod running with a smaller fraction than before the shrink ended after
// it started. It returns the trigger (latency, restart) and a message, or "".
func breach(v *gpufracv1.ShrinkVerification, guard gpufracv1.Guardrail, guardMsg string, pods []*corev1.Pod, allocs map[types.UID]PodAllocation) (string, string) {
	if guard == gpufracv1.GuardrailBreached {
		msg := "latency objective breached"
		if guardMsg != "" {
			msg += " (" + guardMsg + ")"
		}
		return "latency", msg
	}
	prev := map[string]Alloc{}
	for _, c := range v.Previous {
		prev[c.ContainerName] = Alloc{Memory: contract.BytesOf(c.Memory), Compute: contract.MilliOf(c.Compute)}
	}
	for _, pod := range pods {
		a := allocs[pod.UID]
		smaller := false
		for name, ca := range a.Containers {
			pa, ok := prev[name]
			if !ok {
				continue
			}
			if (pa.Memory >= 0 && ca.Memory >= 0 && ca.Memory < pa.Memory) || (pa.Compute >= 0 && ca.Compute >= 0 && ca.Compute < pa.Compute) {
				smaller = true
			}
		}
		if !smaller {
			continue
		}
		for _, t := range Terminations(pod) {
			if t.FinishedAt.After(v.Started.Time) {
				return "restart", fmt.Sprintf("pod %s restarted with the smaller fraction: %s", pod.Name, t)
			}
		}
	}
	return "", ""
}

// raiseFloor returns a floor of at least prev per container (and at least an existing
// floor that has not expired), until the later of the two ends.
func raiseFloor(existing *gpufracv1.UpdaterFloor, prev []gpufracv1.ContainerAllocation, until time.Time, reason string) *gpufracv1.UpdaterFloor {
	f := &gpufracv1.UpdaterFloor{Until: *secs(until), Reason: truncate(reason, 1000)}
	index := map[string]int{}
	add := func(c gpufracv1.ContainerAllocation) {
		i, ok := index[c.ContainerName]
		if !ok {
			i = len(f.Containers)
			index[c.ContainerName] = i
			f.Containers = append(f.Containers, gpufracv1.ContainerAllocation{ContainerName: c.ContainerName})
		}
		cur := &f.Containers[i]
		cur.Memory = maxQuantity(cur.Memory, c.Memory)
		cur.Compute = maxQuantity(cur.Compute, c.Compute)
	}
	if existing != nil {
		for _, c := range existing.Containers {
			add(c)
		}
		if existing.Until.After(until) {
			f.Until = existing.Until
		}
	}
	for _, c := range prev {
		add(c)
	}
	sortAllocs(f.Containers)
	f.Memory, f.Compute = sumAllocs(f.Containers)
	return f
}

// sumAllocs returns the pod's totals of memory (bytes) and compute (share of one GPU)
// over its containers; nil where no container has the resource.
func sumAllocs(cs []gpufracv1.ContainerAllocation) (mem, compute *resource.Quantity) {
	for _, c := range cs {
		if c.Memory != nil {
			if mem == nil {
				mem = resource.NewQuantity(0, resource.BinarySI)
			}
			mem.Add(*c.Memory)
		}
		if c.Compute != nil {
			if compute == nil {
				compute = resource.NewMilliQuantity(0, resource.DecimalSI)
			}
			compute.Add(*c.Compute)
		}
	}
	return mem, compute
}

// maxQuantity returns the larger of two optional quantities (a copy of b when b wins).
func maxQuantity(a, b *resource.Quantity) *resource.Quantity {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil:
		c := b.DeepCopy()
		return &c
	case b == nil || a.Cmp(*b) >= 0:
		return a
	default:
		c := b.DeepCopy()
		return &c
	}
}

// allocationOf converts a pod's allocation into ContainerAllocations (known values only).
func allocationOf(a PodAllocation) []gpufracv1.ContainerAllocation {
	var out []gpufracv1.ContainerAllocation
	for name, c := range a.Containers {
		ca := gpufracv1.ContainerAllocation{ContainerName: name}
		if c.Memory >= 0 {
			ca.Memory = resource.NewQuantity(c.Memory, resource.BinarySI)
		}
		if c.Compute >= 0 {
			ca.Compute = resource.NewMilliQuantity(c.Compute, resource.DecimalSI)
		}
		out = append(out, ca)
	}
	sortAllocs(out)
	return out
}

// sortAllocs orders container allocations by container name, as the status lists them.
func sortAllocs(cs []gpufracv1.ContainerAllocation) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].ContainerName < cs[j].ContainerName })
}

// recordShrink starts (or extends) the verification of a shrink of a pod with
// allocation a at now.
func (p *plan) recordShrink(a PodAllocation, now time.Time, period time.Duration) {
	prev := allocationOf(a)
	v := p.st.Verification
	if v != nil {
		merged := raiseFloor(&gpufracv1.UpdaterFloor{Containers: v.Previous}, prev, now, "")
		prev = merged.Containers
	}
	p.st.Verification = &gpufracv1.ShrinkVerification{Started: *secs(now), Until: *secs(now.Add(period)), Previous: prev}
}

// describeAllocs renders container allocations for messages ("main: memory 3Gi compute 250m").
func describeAllocs(cs []gpufracv1.ContainerAllocation) string {
	var parts []string
	for _, c := range cs {
		s := c.ContainerName + ":"
		if c.Memory != nil {
			s += " memory " + fmtBytes(c.Memory.Value())
		}
		if c.Compute != nil {
			s += " compute " + fmtMilli(c.Compute.MilliValue())
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
