package updater

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

// Rules are the settings of the per-pod decision.
type Rules struct {
	// Threshold is the relative difference from the target (|applied − target| ÷
	// target) at which a pod old enough is replaced even inside its bounds. Default 0.1.
	Threshold float64
	// MinPodAge is the age a pod must reach before Threshold applies (bounds apply at
	// any age).
	MinPodAge time.Duration
	// NearLimit is the ratio of observed peak memory to applied memory at or above
	// which memory growth is urgent. Default 0.9.
	NearLimit float64
	// ComputeRequestGrowth is Config.ComputeRequestGrowth (0 or negative: off): a
	// container whose recommended computeRequest is at least (1 + this) × the one it
	// was placed with, and MinComputeRequestStep more, grows (not urgent; inside the
	// bounds, so it waits for the hysteresis, but not for MinPodAge), unless the
	// recommendation is young (contract.Target.Young).
	ComputeRequestGrowth float64
	// UrgentGrowth allows protective growth outside resize windows
	// (spec.updatePolicy.urgentGrowth, default true).
	UrgentGrowth bool
	// ComputeShrinkHeld is true while a horizontal autoscaler scales the workload on
	// GPU utilisation (and the autoscaler did not opt in): compute is never shrunk.
	ComputeShrinkHeld bool
	// Guardrail is the latency guardrail state: Hold and Breached stop shrinking;
	// Breached makes growth urgent.
	Guardrail gpufracv1.Guardrail
	// IncompleteData, when not "", says why the recommender's data of the workload are
	// incomplete now (contract.IncompleteData): shrinks are held (SkipMetricsUnavailable),
	// growth is not.
	IncompleteData string
	// Floor, when not nil, is the rollback floor per container: never shrink below it,
	// compare with max(target, floor) (what the webhook writes, contract.Floor), and
	// grow pods below it urgently (a rollback) whatever the recommendation says.
	Floor map[string]Alloc
	// Unchanged, when not nil, names the containers whose replacement the webhook
	// admits unchanged, with the whole GPU it lands on: a recommendation below its
	// --min-confidence (AdmittedUnchanged), or a memory target above one GPU while a pod
	// holds a fraction (plan.unwritable). Their targets are one GPU (--gpu-memory). A
	// pod of such a container that holds memory gpufrac wrote (Alloc.Source
	// SourceAppliedRecord) and exited out of memory grows even at one GPU: --gpu-memory is
	// the smallest GPU the pods may land on, the GPU under the pod may be larger, and
	// unchanged the pod gets all of it (on a GPU of that size, the same memory).
	Unchanged map[string]bool
}

// Need is the decision for one pod.
type Need struct {
	// Grow and Shrink say in which direction the replacement (or in-place change) moves
	// at least one resource; both may be true.
	Grow, Shrink bool
	// Urgent is true when a growth is protective and may apply outside windows.
	Urgent bool
	// Protective is true when a growth protects the pod (an out-of-memory exit, memory
	// near its limit, a latency breach, a rollback), whether or not urgentGrowth lets it
	// apply outside windows (Urgent): it rests on what the pod uses now or on the
	// updater's floor, not only on a current recommendation.
	Protective bool
	// MemoryRunningOut is true when a growth rests on the pod's own memory running out:
	// an out-of-memory exit of the pod (part of Protective). The observed peak is the
	// workload's (the recommendation's observedPeakMemory: the highest sample of any of
	// its pods, earlier ones included), not the pod's: near the pod's memory or above it,
	// it is protective but not the pod's own evidence; nor is a rollback floor or a
	// latency breach.
	MemoryRunningOut bool
	// Rollback is true when the pod is below the rollback floor.
	Rollback bool
	// OutOfBounds is true when a change is needed because a resource is outside the
	// recommendation's [lowerBound, upperBound] (or below the rollback floor), not only
	// Threshold away from the target inside the bounds. Changes inside the bounds wait
	// until they persist (Hysteresis); changes out of bounds do not.
	OutOfBounds bool
	// Reasons say, per container and resource, what is out of date.
	Reasons []string
	// HeldReason and HeldMessage are set when the pod is out of date but nothing may be
	// done about it (guardrail-active, metrics-unavailable, below-floor, compute-held).
	HeldReason, HeldMessage string
	// Consolidate is true when the pod is replaced to empty its shared GPU
	// (Config.Consolidate), not for its own allocation: never urgent.
	Consolidate bool
}

// LowConfidenceAdmits reports whether n replaces a pod while its recommendation is
// below the webhook's --min-confidence (judged against AdmittedUnchanged's whole-GPU
// targets): only a protective growth that shrinks nothing, since the replacement comes
// back with the whole GPU and only holds more.
func LowConfidenceAdmits(n Need) bool { return n.Protective && n.Grow && !n.Shrink }

// Needed reports whether the pod should be changed.
func (n Need) Needed() bool { return n.Grow || n.Shrink || n.Consolidate }

// OutOfDate reports whether the pod differs from the recommendation, whether or not it
// may be changed.
func (n Need) OutOfDate() bool { return n.Needed() || n.HeldReason != "" }

// Reason joins Reasons (or, when held, the held message).
func (n Need) Reason() string {
	if len(n.Reasons) == 0 {
		return n.HeldMessage
	}
	return strings.Join(n.Reasons, "; ")
}

// PodFacts are what the decision reads about a pod besides its allocation.
type PodFacts struct {
	// Age is how long the pod has existed.
	Age time.Duration
	// OOM is the pod's last out-of-memory termination, if any.
	OOM *Termination
}

// Evaluate decides whether a pod with allocation alloc is out of date with targets
// (contract.TargetsOf) under rules; it is the decision table of docs/updater.md:
//
//   - memory or compute below the lower bound, or below the target by Threshold or more
//     when the pod is older than MinPodAge or the growth is protective → grow;
//   - memory used up (an out-of-memory exit, or an observed peak at or above the
//     allocation) and below the target by any amount → grow (protective);
//   - above the upper bound, or (older than MinPodAge) above the target by Threshold
//     or more → shrink, unless the pod's applied record does not parse
//     (alloc.RecordError: what it holds is unknown), the guardrail holds or is breached, the recommender's
//     data are incomplete, the floor is above the target, or (compute) a GPU horizontal
//     autoscaler holds compute;
//   - below the rollback floor → grow (rollback), whatever the recommendation says: the
//     target compared (and written by the webhook, contract.Floor) is max(target,
//     floor);
//   - growth is urgent when UrgentGrowth and: the guardrail is breached, the pod had an
//     out-of-memory exit (memory), its observed memory peak is at least NearLimit of
//     its memory (memory), or it is a rollback;
//   - a pod that holds a compute partition while the recommendation time-slices compute,
//     or was placed time-sliced while it now partitions compute, moves (older than
//     MinPodAge; sharingModeMoved).
//
// Resources the backend did not write (Alloc −1), the policy does not control, or the
// recommendation lacks are not compared.
func Evaluate(alloc PodAllocation, targets map[string]contract.Target, facts PodFacts, r Rules) Need {
	var n Need
	var h holds
	names := make([]string, 0, len(alloc.Containers))
	for name := range alloc.Containers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t, ok := targets[name]
		if !ok {
			continue
		}
		if msg := oomAtWrittenGPU(name, alloc.Containers[name], t, facts, r); msg != "" {
			n.add(verdict{grow: []string{msg}, protective: true, own: true}, r.UrgentGrowth)
		}
		for _, x := range resourcesOf(name, alloc.Containers[name], t, r) {
			x.recordInvalid = alloc.RecordError
			if x.controlled && x.applied >= 0 && x.tgt >= 0 {
				n.add(x.compare(t, facts, r, &h), r.UrgentGrowth)
			}
		}
		if msg := computeRequestGrowth(name, alloc.Containers[name], t, r); msg != "" {
			n.add(verdict{grow: []string{msg}}, r.UrgentGrowth)
		}
		n.add(sharingModeMoved(name, alloc.Containers[name], t, facts, r, &h), r.UrgentGrowth)
	}
	if !n.Needed() && h.reason != "" {
		n.HeldReason, n.HeldMessage = h.reason, strings.Join(h.msgs, "; ")
	}
	return n
}

// oomAtWrittenGPU returns why container name's pod grows though it holds its memory
// target, or "": the webhook admits the container's replacement unchanged
// (Rules.Unchanged), the pod holds memory gpufrac wrote (a, read from its applied record:
// backend fields may be the pod template's own, which a replacement would get again) of at
// least the target (one GPU of --gpu-memory), and it exited out of memory (facts.OOM).
// Smaller allocations grow by the usual rules.
func oomAtWrittenGPU(name string, a Alloc, t contract.Target, facts PodFacts, r Rules) string {
	if !r.Unchanged[name] || facts.OOM == nil || facts.OOM.Container != name || a.Source != SourceAppliedRecord || a.Memory < 0 || !t.ControlsMemory || t.Memory < 0 || a.Memory < t.Memory {
		return ""
	}
	return fmt.Sprintf("%s: memory %s written by gpufrac, out of memory (%s), and a replacement is admitted unchanged with the whole GPU it lands on (--gpu-memory %s is the smallest GPU)",
		name, fmtBytes(a.Memory), facts.OOM, fmtBytes(t.Memory))
}

// computeRequestGrowth returns why container name's pod is out of date for its compute
// request (Rules.ComputeRequestGrowth), or "". A time-sliced container reserves no
// compute, only a placement request (contract.Target.ComputeRequest): the scheduler
// summed the request the pod was placed with (a.ComputeRequest) to keep its GPU's
// co-tenants within the contention budget. Once the recommended request has grown by
// the ratio, the GPU carries more load than it was packed for, and replacing the pod
// places it again by its current request. A smaller request never replaces a pod: it
// frees no GPU by itself. Nor does a young workload's request (contract.Target.Young):
// it rises as the workload's first hours are seen, and its pods take the request of the
// moment as they are replaced for their memory.
func computeRequestGrowth(name string, a Alloc, t contract.Target, r Rules) string {
	if r.ComputeRequestGrowth <= 0 || a.ComputeRequest <= 0 || t.ComputeRequest <= 0 || t.Young() {
		return ""
	}
	if float64(t.ComputeRequest) < float64(a.ComputeRequest)*(1+r.ComputeRequestGrowth) || t.ComputeRequest-a.ComputeRequest < MinComputeRequestStep {
		return ""
	}
	return fmt.Sprintf("%s: computeRequest %s placed, recommendation %s (+%s)", name, fmtMilli(a.ComputeRequest), fmtMilli(t.ComputeRequest), pct(t.ComputeRequest-a.ComputeRequest, a.ComputeRequest))
}

// sharingModeMoved returns the verdict for a container whose recommendation moved
// between partitioning compute (Exclusive, MPS) and time-slicing it since its pod was
// admitted, which the compute comparison cannot see (one side has no compute value):
//
//   - the pod holds a compute partition gpufrac wrote (its applied record's compute) and
//     the recommendation time-slices compute (contract.Target.TimeSlicesCompute): the
//     partition caps the pod and reserves compute its GPU's packing no longer counts on;
//   - the pod was placed time-sliced by a compute request gpufrac wrote (the record's
//     writtenComputeRequest, written only by backends that also write a partition) and
//     the recommendation now partitions compute (contract.Target.ControlsCompute).
//
// The move is a growth where the compute the pod is placed by rises (a partition above
// the request it was placed with, or a request above the partition it holds), else a
// shrink, held as any shrink is (shrinkHeld; compute held by a horizontal autoscaler
// holds only the move that adds a cap). It is a change inside the bounds: it waits for
// MinPodAge and the hysteresis, never urgent. A replacement gets the recommendation's
// mode, so the pod is out of date once: the webhook records a partition only where the
// recommendation partitions compute. A partition at or above a compute rollback floor in
// force (Rules.Floor) is not dropped (SkipBelowFloor): the floor restores the compute a
// shrink that breached the latency objective took, and time-slicing guarantees none.
// The pod moves once the floor expires. A pod placed time-sliced while such a floor
// makes the recommendation partition compute (contract.WithFloor) is below the
// floor: it grows as a rollback, at any age.
func sharingModeMoved(name string, a Alloc, t contract.Target, facts PodFacts, r Rules, h *holds) verdict {
	var v verdict
	if a.Source != SourceAppliedRecord {
		return v
	}
	var msg string
	var from, to int64
	addsCap := false
	switch {
	case t.TimeSlicesCompute && a.Compute >= 0:
		from, to = a.Compute, max(t.ComputeRequest, 0)
		msg = fmt.Sprintf("%s: compute partition %s, recommendation time-slices compute (placed by a request of %s, no partition)", name, fmtMilli(a.Compute), fmtMilli(to))
	case t.ControlsCompute && t.Compute >= 0 && a.Compute < 0 && a.ComputeRequest > 0:
		from, to, addsCap = a.ComputeRequest, t.Compute, true
		msg = fmt.Sprintf("%s: compute time-sliced (placed by a request of %s), recommendation partitions %s", name, fmtMilli(a.ComputeRequest), fmtMilli(t.Compute))
	default:
		return v
	}
	if f, ok := r.Floor[name]; ok && addsCap && f.Compute >= 0 {
		// A compute floor in force makes the recommendation partition compute
		// (contract.WithFloor): a pod placed time-sliced holds no partition,
		// below the floor, and its replacement gets max(target, floor).
		v.grow = []string{fmt.Sprintf("%s: compute time-sliced (placed by a request of %s, no partition) below rollback floor %s", name, fmtMilli(a.ComputeRequest), fmtMilli(f.Compute))}
		v.rollback, v.outOfBounds = true, true
		return v
	}
	if facts.Age < r.MinPodAge {
		return v
	}
	if f, ok := r.Floor[name]; ok && !addsCap && f.Compute >= 0 && a.Compute >= f.Compute {
		// The floor restores what a shrink that breached the latency objective took, and
		// time-slicing guarantees no compute: the partition it protects stays while it
		// is in force, whichever way the compute the pod is placed by moves.
		h.hold(SkipBelowFloor, fmt.Sprintf("%s (a rollback floor of compute %s is in force: the partition stays until it expires)", msg, fmtMilli(f.Compute)))
		return v
	}
	if to > from {
		v.grow = []string{msg}
		return v
	}
	x := resourceCheck{container: name, name: "compute", floor: -1, format: fmtMilli, holdShrink: addsCap && r.ComputeShrinkHeld}
	if reason, why := x.shrinkHeld(r, to); reason != "" {
		h.hold(reason, msg+why)
		return v
	}
	v.shrink = []string{msg}
	return v
}

// holds collects the shrinks the decision holds: the first reason and every message.
type holds struct {
	reason string
	msgs   []string
}

func (h *holds) hold(reason, msg string) {
	if h.reason == "" {
		h.reason = reason
	}
	h.msgs = append(h.msgs, msg)
}

// resourceCheck is one resource of one container in Evaluate: what the pod holds and
// what the recommendation (and the floor) say.
type resourceCheck struct {
	container, name      string
	applied, tgt, lo, hi int64
	// floor is the rollback floor (-1: none).
	floor                int64
	controlled, isMemory bool
	format               func(int64) string
	// holdShrink holds a shrink (compute while a GPU horizontal autoscaler scales).
	holdShrink bool
	// recordInvalid is the parse error of the pod's applied record (nil: none): applied
	// was read without it and may overstate what the pod holds, so no shrink.
	recordInvalid error
}

// resourcesOf returns the memory and compute checks of container name.
func resourcesOf(name string, a Alloc, t contract.Target, r Rules) []resourceCheck {
	rs := []resourceCheck{
		{container: name, name: "memory", applied: a.Memory, tgt: t.Memory, lo: t.LowerMemory, hi: t.UpperMemory, floor: -1,
			controlled: t.ControlsMemory, isMemory: true, format: fmtBytes},
		{container: name, name: "compute", applied: a.Compute, tgt: t.Compute, lo: t.LowerCompute, hi: t.UpperCompute, floor: -1,
			controlled: t.ControlsCompute, format: fmtMilli, holdShrink: r.ComputeShrinkHeld},
	}
	if floor, ok := r.Floor[name]; ok {
		rs[0].floor, rs[1].floor = floor.Memory, floor.Compute
	}
	return rs
}

// verdict is the decision for one resource of one container.
type verdict struct {
	grow, shrink                      []string
	protective, rollback, outOfBounds bool
	// own: the growth rests on the pod's own out-of-memory exit (Need.MemoryRunningOut).
	own bool
}

// add merges one resource's verdict into the pod's Need.
func (n *Need) add(v verdict, urgentGrowth bool) {
	if len(v.grow) > 0 {
		n.Grow = true
		n.Reasons = append(n.Reasons, v.grow...)
		if v.rollback || v.protective {
			n.Protective = true
			n.Urgent = n.Urgent || urgentGrowth
		}
		n.MemoryRunningOut = n.MemoryRunningOut || v.own
		n.Rollback = n.Rollback || v.rollback
		n.OutOfBounds = n.OutOfBounds || v.outOfBounds
	}
	if len(v.shrink) > 0 {
		n.Shrink = true
		n.OutOfBounds = n.OutOfBounds || v.outOfBounds
		n.Reasons = append(n.Reasons, v.shrink...)
	}
}

// compare decides one resource (the rows of Evaluate's table); shrinks it may not make
// go to h.
func (x resourceCheck) compare(t contract.Target, facts PodFacts, r Rules, h *holds) verdict {
	// The webhook writes max(recommendation, rollback floor) into new pods
	// (contract.Floor): compare with the same, so a floor reaches the pods whether or
	// not the recommendation has caught up.
	recommended := x.tgt
	if x.floor > x.tgt {
		x.tgt = x.floor
	}
	// Protective growth does not wait for MinPodAge: an out-of-memory exit or a peak
	// near the limit (memory), or a breached latency objective.
	oom := x.isMemory && facts.OOM != nil
	near := x.isMemory && t.PeakMemory >= 0 && x.applied > 0 && float64(t.PeakMemory) >= r.NearLimit*float64(x.applied)
	v := verdict{protective: oom || near || r.Guardrail == gpufracv1.GuardrailBreached, own: oom}
	// Memory already used up to (or past) the allocation, or near it: any larger target
	// grows, however small the step. Used up, the next byte is a crash; near the limit,
	// the peak is an out-of-memory exit that has not happened yet, a sample of need as
	// much as an exit is (Threshold is for churn, not for a pod about to crash).
	over := oom || (x.isMemory && t.PeakMemory >= 0 && t.PeakMemory >= x.applied)
	old := facts.Age >= r.MinPodAge
	x.growth(&v, t, over, near, old || v.protective, r.Threshold)
	x.shrinkage(&v, old, r.Threshold, recommended)
	x.belowFloor(&v, recommended)
	if len(v.shrink) > 0 {
		if reason, why := x.shrinkHeld(r, recommended); reason != "" {
			h.hold(reason, v.shrink[0]+why)
			v.shrink = nil
		}
	}
	return v
}

// growth adds a growth below the lower bound, of used-up memory (over) or memory near
// its limit (near) below the target by any amount, or below the target by the
// threshold (when old enough or protective).
func (x resourceCheck) growth(v *verdict, t contract.Target, over, near, due bool, threshold float64) {
	switch {
	case x.lo >= 0 && x.applied < x.lo && x.tgt > x.applied:
		v.grow = append(v.grow, fmt.Sprintf("%s: %s %s below lower bound %s", x.container, x.name, x.format(x.applied), x.format(x.lo)))
		v.outOfBounds = true
	case over && x.tgt > x.applied:
		v.grow = append(v.grow, fmt.Sprintf("%s: %s %s used up (observed peak %s) below target %s", x.container, x.name, x.format(x.applied), x.format(max(t.PeakMemory, x.applied)), x.format(x.tgt)))
	case near && x.tgt > x.applied:
		v.grow = append(v.grow, fmt.Sprintf("%s: %s %s near its limit (observed peak %s, %s) below target %s", x.container, x.name, x.format(x.applied), x.format(t.PeakMemory), pct(t.PeakMemory, x.applied), x.format(x.tgt)))
	case due && x.tgt > x.applied && float64(x.tgt-x.applied) >= threshold*float64(x.tgt):
		v.grow = append(v.grow, fmt.Sprintf("%s: %s %s below target %s by %s", x.container, x.name, x.format(x.applied), x.format(x.tgt), pct(x.tgt-x.applied, x.tgt)))
	}
}

// shrinkage adds a shrink above the upper bound, or above the target by the threshold
// when old enough. A bound is a reason to move towards the recommended target only
// (here and in growth): a status whose bounds do not hold its target (edited, or
// written by another tool) would otherwise replace a pod at the target with one at the
// target, again and again.
func (x resourceCheck) shrinkage(v *verdict, old bool, threshold float64, recommended int64) {
	switch {
	case x.hi >= 0 && x.applied > x.hi && recommended < x.applied:
		v.shrink = append(v.shrink, fmt.Sprintf("%s: %s %s above upper bound %s", x.container, x.name, x.format(x.applied), x.format(x.hi)))
		v.outOfBounds = true
	case old && x.applied > x.tgt && float64(x.applied-x.tgt) >= threshold*float64(x.tgt):
		v.shrink = append(v.shrink, fmt.Sprintf("%s: %s %s above target %s by %s", x.container, x.name, x.format(x.applied), x.format(x.tgt), pct(x.applied-x.tgt, x.tgt)))
	}
}

// belowFloor adds a rollback growth when the pod is below the floor, whatever the
// recommendation says.
func (x resourceCheck) belowFloor(v *verdict, recommended int64) {
	if x.floor < 0 || x.applied >= x.floor {
		return
	}
	msg := fmt.Sprintf("%s: %s %s below rollback floor %s", x.container, x.name, x.format(x.applied), x.format(x.floor))
	if recommended < x.floor {
		msg += fmt.Sprintf(" (recommendation %s not there yet: the replacement gets the floor)", x.format(recommended))
	}
	v.grow = append(v.grow, msg)
	v.rollback, v.outOfBounds = true, true
}

// shrinkHeld returns the skip reason and the note of a shrink that is held: an applied
// record that does not parse, the guardrail, incomplete data, a target below the floor,
// or compute held; "" when it may go ahead.
func (x resourceCheck) shrinkHeld(r Rules, recommended int64) (string, string) {
	switch {
	case x.recordInvalid != nil:
		return SkipRecordInvalid, " (its " + gpufracv1.AnnotationApplied + " record does not parse: what it holds is unknown, no shrinking)"
	case r.Guardrail != gpufracv1.GuardrailNone:
		return SkipGuardrail, " (latency guardrail active: no shrinking)"
	case r.IncompleteData != "":
		return SkipMetricsUnavailable, " (the recommender's data are incomplete, " + r.IncompleteData + ": no shrinking)"
	case x.floor >= 0 && recommended < x.floor:
		return SkipBelowFloor, fmt.Sprintf(" (target %s is below the rollback floor %s)", x.format(recommended), x.format(x.floor))
	case x.holdShrink:
		return SkipComputeHeld, " (a horizontal autoscaler scales on GPU utilisation: compute is not shrunk)"
	}
	return "", ""
}

// Admissible reports whether a needed change may be made now under the autoscaler's
// resize windows: urgent (protective) changes at any time, others only while a window is
// open. The updater applies it to every pod, and the simulator to every simulated pod.
func Admissible(n Need, windowOpen bool) bool { return n.Needed() && (windowOpen || n.Urgent) }

func pct(d, of int64) string {
	if of <= 0 {
		return "∞"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(d)/float64(of))
}

// fmtBytes renders bytes as a binary quantity rounded up to MiB ("3Gi", "1536Mi").
func fmtBytes(b int64) string {
	const mib = 1 << 20
	if b%mib != 0 {
		b = (b/mib + 1) * mib
	}
	return resource.NewQuantity(b, resource.BinarySI).String()
}

// fmtMilli renders thousandths of a GPU as a quantity ("250m", "1").
func fmtMilli(m int64) string { return resource.NewMilliQuantity(m, resource.DecimalSI).String() }
