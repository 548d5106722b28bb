package policy

import (
	"fmt"
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// TestGuardrailHoldsWithinTheMaximum: the latency guardrail (breached or near) holds the
// previous target, but not above a maxMemory or maxCompute the user has lowered since it
// was written: the policy's maximum is the user's explicit choice, and the webhook and
// the updater would otherwise apply a target the policy forbids. Bounds stay ordered
// around the target.
func TestGuardrailHoldsWithinTheMaximum(t *testing.T) {
	c := Config{GPUMemoryBytes: 80 * gib}
	for _, g := range []gpufracv1.Guardrail{gpufracv1.GuardrailHold, gpufracv1.GuardrailBreached} {
		for _, prevMem := range []string{"21Gi", "30Gi", "60Gi"} {
			for _, prevCPU := range []string{"310m", "400m", "900m"} {
				name := fmt.Sprintf("guardrail %d, previous %s %s", g, prevMem, prevCPU)
				prev := &gpufracv1.ContainerRecommendation{Target: gpufracv1.GPUResources{Memory: q(prevMem), Compute: q(prevCPU)}}
				cp := &gpufracv1.ContainerPolicy{ContainerName: "*", MaxMemory: q("20Gi"), MaxCompute: q("300m")}
				r := c.Recommend("main", est(10*gib, 0.2, 0.1, 0.2), cp, prev, g)
				if r.Target.Memory.Cmp(*cp.MaxMemory) > 0 || r.Target.Compute.Cmp(*cp.MaxCompute) > 0 {
					t.Errorf("%s: target %s %s above maxMemory %s, maxCompute %s", name, r.Target.Memory, r.Target.Compute, cp.MaxMemory, cp.MaxCompute)
				}
				if r.UpperBound.Memory.Cmp(*cp.MaxMemory) > 0 || r.UpperBound.Compute.Cmp(*cp.MaxCompute) > 0 {
					t.Errorf("%s: upper bound %s %s above the maximum", name, r.UpperBound.Memory, r.UpperBound.Compute)
				}
				if r.LowerBound.Memory.Cmp(*r.Target.Memory) > 0 || r.LowerBound.Compute.Cmp(*r.Target.Compute) > 0 {
					t.Errorf("%s: lower bound %s %s above the target %s %s", name, r.LowerBound.Memory, r.LowerBound.Compute, r.Target.Memory, r.Target.Compute)
				}
			}
		}
	}
}
