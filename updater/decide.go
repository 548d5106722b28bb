package updater

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Target is the recommendation for one container in the units the updater compares:
// memory in bytes and compute in thousandths of one GPU; -1 means absent.
type Target struct {
	// Memory, LowerMemory and UpperMemory are the target and bounds of GPU memory, bytes.
	Memory, LowerMemory, UpperMemory int64
	// Compute, LowerCompute and UpperCompute are the target and bounds of compute,
	// thousandths of one GPU.
	Compute, LowerCompute, UpperCompute int64
	// PeakMemory is the recent observed memory peak, bytes (-1: unknown).
	PeakMemory int64
	// ControlsMemory and ControlsCompute say whether the container's policy lets
	// gpufrac write the resource (controlledResources, mode).
	ControlsMemory, ControlsCompute bool
}

// TargetsOf converts a recommendation's container recommendations into Targets, keeping
// only containers whose policy mode is not Off, and the resources each policy controls
// (as the admission webhook does); compute only where the recommendation partitions it
// (ContainerRecommendation.PartitionsCompute).
func TargetsOf(gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation) map[string]Target {
	out := map[string]Target{}
	if gfr == nil {
		return out
	}
	for _, r := range gfr.Status.ContainerRecommendations {
		var pol *gpufracv1.ContainerPolicy
		if gfa != nil {
			pol = gfa.Spec.ContainerPolicy(r.ContainerName)
		}
		if !pol.Enabled() {
			continue
		}
		t := Target{
			Memory: bytesOf(r.Target.Memory), LowerMemory: bytesOf(r.LowerBound.Memory), UpperMemory: bytesOf(r.UpperBound.Memory),
			Compute: milliOf(r.Target.Compute), LowerCompute: milliOf(r.LowerBound.Compute), UpperCompute: milliOf(r.UpperBound.Compute),
			PeakMemory:     bytesOf(r.ObservedPeakMemory),
			ControlsMemory: pol.Controls(gpufracv1.ResourceMemory), ControlsCompute: pol.Controls(gpufracv1.ResourceCompute) && r.PartitionsCompute(),
		}
		if t.Compute >= 0 {
			// While a horizontal autoscaler scales on GPU utilisation, what the webhook
			// writes is at least what the pods hold (admission.HeldCompute): compare
			// with that, so nothing is replaced towards less compute.
			if v, raised := admission.HeldCompute(gfa, r.ContainerName, t.Compute); raised {
				t.Compute, t.UpperCompute = v, max(t.UpperCompute, v)
			}
		}
		out[r.ContainerName] = t
	}
	return out
}

func bytesOf(q *resource.Quantity) int64 {
	if q == nil {
		return -1
	}
	return q.Value()
}

func milliOf(q *resource.Quantity) int64 {
	if q == nil {
		return -1
	}
	return q.MilliValue()
}

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
	// UrgentGrowth allows protective growth outside resize windows
	// (spec.updatePolicy.urgentGrowth, default true).
	UrgentGrowth bool
	// ComputeShrinkHeld is true while a horizontal autoscaler scales the workload on
	// GPU utilisation (and the autoscaler did not opt in): compute is never shrunk.
	ComputeShrinkHeld bool
	// Guardrail is the latency guardrail state: Hold and Breached stop shrinking;
	// Breached makes growth urgent.
	Guardrail Guardrail
	// Floor, when not nil, is the rollback floor per container: never shrink below it,
	// compare with max(target, floor) (what the webhook writes, admission.Floor), and
	// grow pods below it urgently (a rollback) whatever the recommendation says.
	Floor map[string]Alloc
}

// Need is the decision for one pod.
type Need struct {
	// Grow and Shrink say in which direction the replacement (or in-place change) moves
	// at least one resource; both may be true.
	Grow, Shrink bool
	// Urgent is true when a growth is protective and may apply outside windows.
	Urgent bool
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
	// done about it (guardrail-active, below-floor, compute-held).
	HeldReason, HeldMessage string
}

// Needed reports whether the pod should be changed.
func (n Need) Needed() bool { return n.Grow || n.Shrink }

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
// (TargetsOf) under rules; it is the decision table of docs/updater.md:
//
//   - memory or compute below the lower bound, or below the target by Threshold or more
//     when the pod is older than MinPodAge or the growth is protective → grow;
//   - memory used up (an out-of-memory exit, or an observed peak at or above the
//     allocation) and below the target by any amount → grow (protective);
//   - above the upper bound, or (older than MinPodAge) above the target by Threshold
//     or more → shrink, unless the guardrail holds or is breached, the floor is above the
//     target, or (compute) a GPU horizontal autoscaler holds compute;
//   - below the rollback floor → grow (rollback), whatever the recommendation says: the
//     target compared (and written by the webhook, admission.Floor) is max(target,
//     floor);
//   - growth is urgent when UrgentGrowth and: the guardrail is breached, the pod had an
//     out-of-memory exit (memory), its observed memory peak is at least NearLimit of
//     its memory (memory), or it is a rollback.
//
// Resources the backend did not write (Alloc −1), the policy does not control, or the
// recommendation lacks are not compared.
func Evaluate(alloc PodAllocation, targets map[string]Target, facts PodFacts, r Rules) Need {
	var n Need
	names := make([]string, 0, len(alloc.Containers))
	for name := range alloc.Containers {
		names = append(names, name)
	}
	slices.Sort(names)
	old := facts.Age >= r.MinPodAge
	var holds []string
	var holdReason string
	hold := func(reason, msg string) {
		if holdReason == "" {
			holdReason = reason
		}
		holds = append(holds, msg)
	}
	for _, name := range names {
		a := alloc.Containers[name]
		t, ok := targets[name]
		if !ok {
			continue
		}
		var floor Alloc
		floorSet := false
		if r.Floor != nil {
			floor, floorSet = r.Floor[name]
		}
		type res struct {
			name                 string
			applied, tgt, lo, hi int64
			floor                int64
			controlled, isMemory bool
			format               func(int64) string
			holdShrinkCompute    bool
		}
		rs := []res{
			{name: "memory", applied: a.Memory, tgt: t.Memory, lo: t.LowerMemory, hi: t.UpperMemory, floor: -1,
				controlled: t.ControlsMemory, isMemory: true, format: fmtBytes},
			{name: "compute", applied: a.Compute, tgt: t.Compute, lo: t.LowerCompute, hi: t.UpperCompute, floor: -1,
				controlled: t.ControlsCompute, format: fmtMilli, holdShrinkCompute: r.ComputeShrinkHeld},
		}
		if floorSet {
			rs[0].floor, rs[1].floor = floor.Memory, floor.Compute
		}
		for _, x := range rs {
			if !x.controlled || x.applied < 0 || x.tgt < 0 {
				continue
			}
			// The webhook writes max(recommendation, rollback floor) into new pods
			// (admission.Floor): compare with the same, so a floor reaches the pods
			// whether or not the recommendation has caught up.
			recommended := x.tgt
			if x.floor > x.tgt {
				x.tgt = x.floor
			}
			// Protective growth does not wait for MinPodAge: an out-of-memory exit or a
			// peak near the limit (memory), or a breached latency objective.
			oom := x.isMemory && facts.OOM != nil
			near := x.isMemory && t.PeakMemory >= 0 && x.applied > 0 && float64(t.PeakMemory) >= r.NearLimit*float64(x.applied)
			protective := oom || near || r.Guardrail == GuardrailBreached
			// Memory already used up to (or past) the allocation: any larger target
			// grows, however small the step, since the next byte is a crash.
			over := oom || (x.isMemory && t.PeakMemory >= 0 && t.PeakMemory >= x.applied)
			var grow, shrink []string
			outOfBounds := false
			if x.lo >= 0 && x.applied < x.lo {
				grow = append(grow, fmt.Sprintf("%s: %s %s below lower bound %s", name, x.name, x.format(x.applied), x.format(x.lo)))
				outOfBounds = true
			} else if over && x.tgt > x.applied {
				grow = append(grow, fmt.Sprintf("%s: %s %s used up (observed peak %s) below target %s", name, x.name, x.format(x.applied), x.format(max(t.PeakMemory, x.applied)), x.format(x.tgt)))
			} else if (old || protective) && x.tgt > x.applied && float64(x.tgt-x.applied) >= r.Threshold*float64(x.tgt) {
				grow = append(grow, fmt.Sprintf("%s: %s %s below target %s by %s", name, x.name, x.format(x.applied), x.format(x.tgt), pct(x.tgt-x.applied, x.tgt)))
			}
			if x.hi >= 0 && x.applied > x.hi {
				shrink = append(shrink, fmt.Sprintf("%s: %s %s above upper bound %s", name, x.name, x.format(x.applied), x.format(x.hi)))
				outOfBounds = true
			} else if old && x.applied > x.tgt && float64(x.applied-x.tgt) >= r.Threshold*float64(x.tgt) {
				shrink = append(shrink, fmt.Sprintf("%s: %s %s above target %s by %s", name, x.name, x.format(x.applied), x.format(x.tgt), pct(x.applied-x.tgt, x.tgt)))
			}
			rollback := false
			if x.floor >= 0 && x.applied < x.floor {
				msg := fmt.Sprintf("%s: %s %s below rollback floor %s", name, x.name, x.format(x.applied), x.format(x.floor))
				if recommended < x.floor {
					msg += fmt.Sprintf(" (recommendation %s not there yet: the replacement gets the floor)", x.format(recommended))
				}
				grow = append(grow, msg)
				rollback, outOfBounds = true, true
			}
			if len(shrink) > 0 {
				switch {
				case r.Guardrail != GuardrailNone:
					hold(SkipGuardrail, shrink[0]+" (latency guardrail active: no shrinking)")
					shrink = nil
				case x.floor >= 0 && recommended < x.floor:
					hold(SkipBelowFloor, shrink[0]+fmt.Sprintf(" (target %s is below the rollback floor %s)", x.format(recommended), x.format(x.floor)))
					shrink = nil
				case x.holdShrinkCompute:
					hold(SkipComputeHeld, shrink[0]+" (a horizontal autoscaler scales on GPU utilisation: compute is not shrunk)")
					shrink = nil
				}
			}
			if len(grow) > 0 {
				n.Grow = true
				n.Reasons = append(n.Reasons, grow...)
				if (rollback || protective) && r.UrgentGrowth {
					n.Urgent = true
				}
				n.Rollback = n.Rollback || rollback
				n.OutOfBounds = n.OutOfBounds || outOfBounds
			}
			if len(shrink) > 0 {
				n.Shrink = true
				n.OutOfBounds = n.OutOfBounds || outOfBounds
				n.Reasons = append(n.Reasons, shrink...)
			}
		}
	}
	if !n.Needed() && holdReason != "" {
		n.HeldReason, n.HeldMessage = holdReason, strings.Join(holds, "; ")
	}
	return n
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
