package updater

import (
	"errors"
	"strings"
	"testing"
	"time"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
)

const gi = int64(1) << 30

func podAlloc(mem, milli int64) PodAllocation {
	return PodAllocation{Containers: map[string]Alloc{"main": {Memory: mem, Compute: milli, Source: SourceAppliedRecord}}}
}

// tgt is a recommendation of 2Gi / 300m with bounds [1.5Gi, 3Gi] and [200m, 500m].
func tgt() map[string]contract.Target {
	return map[string]contract.Target{"main": {
		Memory: 2 * gi, LowerMemory: 3 * gi / 2, UpperMemory: 3 * gi,
		Compute: 300, LowerCompute: 200, UpperCompute: 500,
		PeakMemory: -1, ControlsMemory: true, ControlsCompute: true,
	}}
}

func TestEvaluateDecisionTable(t *testing.T) {
	young := PodFacts{Age: time.Minute}
	old := PodFacts{Age: 13 * time.Hour}
	base := Rules{Threshold: 0.1, MinPodAge: 12 * time.Hour, NearLimit: 0.9, UrgentGrowth: true}
	oom := &Termination{Container: "main", ExitCode: 1, Message: "CUDA out of memory", OOM: true}
	with := func(f func(*Rules)) Rules { r := base; f(&r); return r }
	withTarget := func(f func(*contract.Target)) map[string]contract.Target {
		m := tgt()
		x := m["main"]
		f(&x)
		m["main"] = x
		return m
	}
	for _, tc := range []struct {
		name    string
		alloc   PodAllocation
		targets map[string]contract.Target
		facts   PodFacts
		rules   Rules
		// want
		grow, shrink, urgent, rollback bool
		held                           string
		reason                         string // substring
	}{
		{name: "at target", alloc: podAlloc(2*gi, 300), facts: old, rules: base},
		{name: "inside bounds, young, 25% above target: wait for MinPodAge", alloc: podAlloc(5*gi/2, 300), facts: young, rules: base},
		{name: "inside bounds, old, 25% above target: shrink", alloc: podAlloc(5*gi/2, 300), facts: old, rules: base, shrink: true, reason: "above target 2Gi by 25%"},
		{name: "inside bounds, old, 5% off: below threshold", alloc: podAlloc(2*gi+gi/20, 300), facts: old, rules: base},
		{name: "above upper bound, young: shrink", alloc: podAlloc(4*gi, 300), facts: young, rules: base, shrink: true, reason: "memory 4Gi above upper bound 3Gi"},
		{name: "below lower bound, young: grow, not urgent", alloc: podAlloc(gi, 300), facts: young, rules: base, grow: true, reason: "below lower bound"},
		{name: "compute below lower bound", alloc: podAlloc(2*gi, 100), facts: young, rules: base, grow: true, reason: "compute 100m below lower bound 200m"},
		// A status whose bounds do not hold its target (edited, or written by another
		// tool): a pod at the target is what a replacement would get, never replaced
		// for a bound (each replacement would be replaced again); one below both grows.
		{name: "lower bound above the target, pod at the target: nothing", alloc: podAlloc(2*gi, 300), targets: withTarget(func(x *contract.Target) { x.LowerMemory, x.LowerCompute = 5*gi/2, 400 }), facts: young, rules: base},
		{name: "upper bound below the target, pod at the target: nothing", alloc: podAlloc(2*gi, 300), targets: withTarget(func(x *contract.Target) { x.UpperMemory, x.UpperCompute = 3*gi/2, 250 }), facts: young, rules: base},
		{name: "lower bound above the target, pod below both: grow", alloc: podAlloc(gi, 300), targets: withTarget(func(x *contract.Target) { x.LowerMemory = 5 * gi / 2 }), facts: young, rules: base, grow: true, reason: "below lower bound"},
		{name: "whole GPU without fraction: shrink", alloc: PodAllocation{Containers: map[string]Alloc{"main": {Memory: 80 * gi, Compute: 1000, Source: SourceWholeGPU}}}, facts: young, rules: base, shrink: true},
		{name: "grow and shrink at once", alloc: podAlloc(gi, 900), facts: young, rules: base, grow: true, shrink: true},
		{name: "applied record does not parse: whole GPU read, shrink held", alloc: PodAllocation{Containers: map[string]Alloc{"main": {Memory: 80 * gi, Compute: 1000, Source: SourceWholeGPU}},
			RecordError: errors.New("unexpected end of JSON input")}, facts: old, rules: base, held: SkipRecordInvalid, reason: "does not parse"},
		{name: "applied record does not parse: growth from the fields applies", alloc: func() PodAllocation { a := podAlloc(gi, 300); a.RecordError = errors.New("x"); return a }(),
			facts: young, rules: base, grow: true, reason: "below lower bound"},
		{name: "guardrail near: shrink held", alloc: podAlloc(4*gi, 300), facts: young, rules: with(func(r *Rules) { r.Guardrail = gpufracv1.GuardrailHold }), held: SkipGuardrail},
		{name: "guardrail breached: growth urgent", alloc: podAlloc(2*gi, 100), facts: young, rules: with(func(r *Rules) { r.Guardrail = gpufracv1.GuardrailBreached }), grow: true, urgent: true},
		{name: "guardrail breached, young pod, compute 20% below target: protective growth ignores MinPodAge", alloc: podAlloc(2*gi, 240), facts: young, rules: with(func(r *Rules) { r.Guardrail = gpufracv1.GuardrailBreached }), grow: true, urgent: true},
		{name: "guardrail breached but urgentGrowth false: not urgent", alloc: podAlloc(2*gi, 100), facts: young, rules: with(func(r *Rules) { r.Guardrail = gpufracv1.GuardrailBreached; r.UrgentGrowth = false }), grow: true},
		{name: "OOM exit, memory below target: urgent", alloc: podAlloc(gi*7/4, 300), facts: PodFacts{Age: time.Minute, OOM: oom}, rules: base, grow: true, urgent: true},
		{name: "OOM exit but memory at target: nothing to grow", alloc: podAlloc(2*gi, 300), facts: PodFacts{Age: time.Minute, OOM: oom}, rules: base},
		{name: "memory near limit: growth urgent", alloc: podAlloc(gi*7/4, 300), targets: withTarget(func(x *contract.Target) { x.PeakMemory = gi * 17 / 10 }), facts: young, rules: base, grow: true, urgent: true},
		{name: "OOM exit, target 5% above memory (under Threshold): used up, grows urgently", alloc: podAlloc(gi*19/10, 300), facts: PodFacts{Age: time.Minute, OOM: oom}, rules: base, grow: true, urgent: true, reason: "used up"},
		{name: "observed peak at the allocation, target 5% above: used up, grows urgently", alloc: podAlloc(gi*19/10, 300), targets: withTarget(func(x *contract.Target) { x.PeakMemory = gi * 19 / 10 }), facts: young, rules: base, grow: true, urgent: true, reason: "used up"},
		{name: "observed peak just under the allocation, target 5% above: near its limit, grows urgently under Threshold", alloc: podAlloc(gi*19/10, 300), targets: withTarget(func(x *contract.Target) { x.PeakMemory = gi*19/10 - 1 }), facts: old, rules: base, grow: true, urgent: true, reason: "near its limit"},
		{name: "observed peak at NearLimit of the allocation, target 5% above, young pod: grows urgently", alloc: podAlloc(gi*19/10, 300), targets: withTarget(func(x *contract.Target) { x.PeakMemory = gi*19/10*9/10 + 1 }), facts: young, rules: base, grow: true, urgent: true, reason: "near its limit (observed peak"},
		{name: "observed peak just under NearLimit, target 5% above: under Threshold, nothing", alloc: podAlloc(gi*19/10, 300), targets: withTarget(func(x *contract.Target) { x.PeakMemory = gi*19/10*9/10 - 1<<20 }), facts: old, rules: base},
		{name: "near its limit, target at the allocation (a rounded share): nothing to grow", alloc: podAlloc(2*gi, 300), targets: withTarget(func(x *contract.Target) { x.PeakMemory = gi * 19 / 10 }), facts: old, rules: base},
		{name: "memory peak far from limit: growth waits for MinPodAge", alloc: podAlloc(gi*7/4, 300), targets: withTarget(func(x *contract.Target) { x.PeakMemory = gi }), facts: young, rules: base},
		{name: "data incomplete: shrink held", alloc: podAlloc(4*gi, 300), facts: young, rules: with(func(r *Rules) { r.IncompleteData = "ExporterDown: x" }), held: SkipMetricsUnavailable},
		{name: "data incomplete: growth still applies", alloc: podAlloc(gi, 300), facts: young, rules: with(func(r *Rules) { r.IncompleteData = "ExporterDown: x" }), grow: true, reason: "below lower bound"},
		{name: "compute shrink held by a GPU HPA", alloc: podAlloc(2*gi, 900), facts: young, rules: with(func(r *Rules) { r.ComputeShrinkHeld = true }), held: SkipComputeHeld},
		{name: "compute held but memory shrinks", alloc: podAlloc(4*gi, 900), facts: young, rules: with(func(r *Rules) { r.ComputeShrinkHeld = true }), shrink: true, reason: "memory 4Gi above upper bound"},
		{name: "compute held, compute grows", alloc: podAlloc(2*gi, 100), facts: young, rules: with(func(r *Rules) { r.ComputeShrinkHeld = true }), grow: true},
		{name: "below floor, target reaches floor: urgent rollback", alloc: podAlloc(gi*7/4, 300),
			targets: withTarget(func(x *contract.Target) { x.Memory = 3 * gi; x.LowerMemory = gi; x.UpperMemory = 4 * gi }), facts: young,
			rules: with(func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: 3 * gi, Compute: -1}} }), grow: true, urgent: true, rollback: true, reason: "below rollback floor 3Gi"},
		{name: "below floor, recommendation not yet at floor: rollback to the floor anyway", alloc: podAlloc(2*gi, 300), facts: young,
			rules: with(func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: 3 * gi, Compute: -1}} }), grow: true, urgent: true, rollback: true,
			reason: "memory 2Gi below rollback floor 3Gi (recommendation 2Gi not there yet"},
		{name: "at the floor, recommendation below it: nothing (the webhook writes the floor)", alloc: podAlloc(3*gi, 300), facts: old,
			rules: with(func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: 3 * gi, Compute: -1}} })},
		{name: "compute below its floor, recommendation below it: rollback", alloc: podAlloc(2*gi, 300), facts: young,
			rules: with(func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: -1, Compute: 450}} }), grow: true, urgent: true, rollback: true, reason: "compute 300m below rollback floor 450m"},
		{name: "above the floor, old: shrink held while the floor is above the recommendation", alloc: podAlloc(gi*5/2, 300), facts: old,
			rules: with(func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: 9 * gi / 4, Compute: -1}} }), held: SkipBelowFloor},
		{name: "shrink below floor refused", alloc: podAlloc(4*gi, 300), facts: young,
			rules: with(func(r *Rules) { r.Floor = map[string]Alloc{"main": {Memory: 4 * gi, Compute: -1}} }), held: SkipBelowFloor},
		{name: "rollback with urgentGrowth false waits for a window", alloc: podAlloc(gi*7/4, 300),
			targets: withTarget(func(x *contract.Target) { x.Memory = 3 * gi; x.LowerMemory = gi; x.UpperMemory = 4 * gi }), facts: young,
			rules: with(func(r *Rules) {
				r.UrgentGrowth = false
				r.Floor = map[string]Alloc{"main": {Memory: 3 * gi, Compute: -1}}
			}), grow: true, rollback: true},
		{name: "compute not written (KAI): only memory compared", alloc: podAlloc(2*gi, -1), facts: old, rules: base},
		{name: "compute not controlled", alloc: podAlloc(2*gi, 900), targets: withTarget(func(x *contract.Target) { x.ControlsCompute = false }), facts: old, rules: base},
		{name: "container without recommendation", alloc: PodAllocation{Containers: map[string]Alloc{"sidecar": {Memory: 80 * gi, Compute: 1000}}}, facts: old, rules: base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			targets := tc.targets
			if targets == nil {
				targets = tgt()
			}
			n := Evaluate(tc.alloc, targets, tc.facts, tc.rules)
			if n.Grow != tc.grow || n.Shrink != tc.shrink || n.Urgent != tc.urgent || n.Rollback != tc.rollback || n.HeldReason != tc.held {
				t.Fatalf("got grow=%v shrink=%v urgent=%v rollback=%v held=%q (%s), want grow=%v shrink=%v urgent=%v rollback=%v held=%q",
					n.Grow, n.Shrink, n.Urgent, n.Rollback, n.HeldReason, n.Reason(), tc.grow, tc.shrink, tc.urgent, tc.rollback, tc.held)
			}
			if tc.reason != "" && !strings.Contains(n.Reason(), tc.reason) {
				t.Errorf("reason %q does not contain %q", n.Reason(), tc.reason)
			}
			if n.OutOfDate() != (tc.grow || tc.shrink || tc.held != "") {
				t.Errorf("OutOfDate = %v", n.OutOfDate())
			}
		})
	}
}
