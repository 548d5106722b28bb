package policy

import (
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/estimate"
)

const gib = float64(1 << 30)

func est(mem, cpu, median, p95 float64) estimate.Estimate {
	return estimate.Estimate{
		Target:     estimate.Resources{MemoryBytes: mem, Compute: cpu},
		LowerBound: estimate.Resources{MemoryBytes: mem / 2, Compute: cpu / 2},
		UpperBound: estimate.Resources{MemoryBytes: mem * 2, Compute: cpu * 2},
		HasMemory:  true, HasCompute: true, ComputeMedian: median, ComputeP95: p95, Confidence: 1,
		RecentPeakBytes: mem / 1.15,
	}
}

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

func TestRecommendCaps(t *testing.T) {
	c := Config{GPUMemoryBytes: 80 * gib}
	tests := []struct {
		name              string
		e                 estimate.Estimate
		cp                *gpufracv1.ContainerPolicy
		mem, cpu          string // expected target ("" = absent)
		uncappedMem       string
		upperMem, upperCP string
	}{
		{name: "no policy", e: est(20*gib, 0.3, 0.2, 0.3), mem: "20Gi", cpu: "300m", uncappedMem: "20Gi", upperMem: "40Gi", upperCP: "600m"},
		{name: "max memory caps target and bounds", e: est(20*gib, 0.3, 0.2, 0.3), cp: &gpufracv1.ContainerPolicy{ContainerName: "*", MaxMemory: q("16Gi")},
			mem: "16Gi", cpu: "300m", uncappedMem: "20Gi", upperMem: "16Gi", upperCP: "600m"},
		{name: "min compute lifts target", e: est(20*gib, 0.05, 0.01, 0.05), cp: &gpufracv1.ContainerPolicy{ContainerName: "*", MinCompute: q("250m")},
			mem: "20Gi", cpu: "250m", uncappedMem: "20Gi", upperMem: "40Gi", upperCP: "250m"},
		{name: "one GPU is the ceiling", e: est(100*gib, 1.4, 0.9, 1), mem: "80Gi", cpu: "1", uncappedMem: "100Gi", upperMem: "80Gi", upperCP: "1"},
		{name: "memory only", e: est(20*gib, 0.3, 0.2, 0.3), cp: &gpufracv1.ContainerPolicy{ContainerName: "*", ControlledResources: []gpufracv1.GPUResourceName{gpufracv1.ResourceMemory}},
			mem: "20Gi", cpu: "", uncappedMem: "20Gi", upperMem: "40Gi", upperCP: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Recommend("main", tc.e, tc.cp, nil, gpufracv1.GuardrailNone)
			str := func(q *resource.Quantity) string {
				if q == nil {
					return ""
				}
				return q.String()
			}
			if got := str(r.Target.Memory); got != tc.mem {
				t.Errorf("target memory %s, want %s", got, tc.mem)
			}
			if got := str(r.Target.Compute); got != tc.cpu {
				t.Errorf("target compute %s, want %s", got, tc.cpu)
			}
			if got := str(r.UncappedTarget.Memory); got != tc.uncappedMem {
				t.Errorf("uncapped memory %s, want %s", got, tc.uncappedMem)
			}
			if got := str(r.UpperBound.Memory); got != tc.upperMem {
				t.Errorf("upper memory %s, want %s", got, tc.upperMem)
			}
			if got := str(r.UpperBound.Compute); got != tc.upperCP {
				t.Errorf("upper compute %s, want %s", got, tc.upperCP)
			}
		})
	}
}

func TestGuardrail(t *testing.T) {
	c := Config{GPUMemoryBytes: 80 * gib}
	prev := &gpufracv1.ContainerRecommendation{Target: gpufracv1.GPUResources{Memory: q("30Gi"), Compute: q("400m")}}
	shrink := est(20*gib, 0.2, 0.1, 0.2)
	if r := c.Recommend("main", shrink, nil, prev, gpufracv1.GuardrailNone); r.Target.Memory.String() != "20Gi" || r.Target.Compute.String() != "200m" {
		t.Errorf("without guardrail the target shrinks: got %s %s", r.Target.Memory, r.Target.Compute)
	}
	if r := c.Recommend("main", shrink, nil, prev, gpufracv1.GuardrailHold); r.Target.Memory.String() != "30Gi" || r.Target.Compute.String() != "400m" {
		t.Errorf("near the objective nothing shrinks or grows: got %s %s", r.Target.Memory, r.Target.Compute)
	}
	if r := c.Recommend("main", shrink, nil, prev, gpufracv1.GuardrailBreached); r.Target.Memory.String() != "30Gi" || r.Target.Compute.String() != "500m" {
		t.Errorf("breached: memory kept, compute +100m: got %s %s", r.Target.Memory, r.Target.Compute)
	}
	capped := &gpufracv1.ContainerPolicy{ContainerName: "*", MaxCompute: q("450m")}
	if r := c.Recommend("main", shrink, capped, prev, gpufracv1.GuardrailBreached); r.Target.Compute.String() != "450m" {
		t.Errorf("breached growth stops at maxCompute: got %s", r.Target.Compute)
	}
}

func TestSharingMode(t *testing.T) {
	c := Config{GPUMemoryBytes: 80 * gib}
	tests := []struct {
		name    string
		e       estimate.Estimate
		allowed []gpufracv1.SharingMode
		want    gpufracv1.SharingMode
		reason  string
	}{
		{"most of the GPU's memory", est(70*gib, 0.3, 0.2, 0.3), nil, gpufracv1.SharingModeExclusive, "88% of GPU memory"},
		{"steady compute", est(20*gib, 0.4, 0.3, 0.35), nil, gpufracv1.SharingModeMPS, "steady"},
		{"bursty, mostly idle", est(20*gib, 0.3, 0, 0.5), nil, gpufracv1.SharingModeTimeSlicing, "bursty"},
		{"policy forbids time-slicing", est(20*gib, 0.3, 0, 0.5), []gpufracv1.SharingMode{gpufracv1.SharingModeMPS}, gpufracv1.SharingModeMPS, "TimeSlicing not allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cp := &gpufracv1.ContainerPolicy{ContainerName: "*", AllowedSharingModes: tc.allowed}
			m, why := c.SharingMode(tc.e, tc.e.Target, cp)
			if m != tc.want || !strings.Contains(why, tc.reason) {
				t.Errorf("got %s (%s), want %s containing %q", m, why, tc.want, tc.reason)
			}
		})
	}
}

func TestContainerPolicyFor(t *testing.T) {
	rp := &gpufracv1.ResourcePolicy{ContainerPolicies: []gpufracv1.ContainerPolicy{
		{ContainerName: "*", MemoryHeadroomPercent: ptr.To[int32](30)},
		{ContainerName: "sidecar", Mode: ptr.To(gpufracv1.ContainerScalingModeOff)},
	}}
	spec := &gpufracv1.GPUFractionAutoscalerSpec{ResourcePolicy: rp}
	if cp := spec.ContainerPolicy("sidecar"); cp.Enabled() {
		t.Error("sidecar's own policy (Off) must win over *")
	}
	if cp := spec.ContainerPolicy("main"); !cp.Enabled() || MemoryHeadroom(cp) != 0.3 {
		t.Errorf("main falls back to *: %+v", cp)
	}
	if MemoryHeadroom(nil) != estimate.DefaultMemoryHeadroom {
		t.Error("default headroom")
	}
}

func TestApplyFloor(t *testing.T) {
	rec := gpufracv1.ContainerRecommendation{
		Target:     gpufracv1.GPUResources{Memory: q("10Gi"), Compute: q("200m")},
		LowerBound: gpufracv1.GPUResources{Memory: q("8Gi"), Compute: q("100m")},
		UpperBound: gpufracv1.GPUResources{Memory: q("12Gi"), Compute: q("300m")},
	}
	ApplyFloor(&rec, gpufracv1.ContainerAllocation{ContainerName: "main", Memory: q("16Gi"), Compute: q("150m")})
	if rec.Target.Memory.String() != "16Gi" || rec.UpperBound.Memory.String() != "16Gi" || rec.LowerBound.Memory.String() != "8Gi" {
		t.Errorf("memory raised to the floor with bounds ordered: %v [%v, %v]", rec.Target.Memory, rec.LowerBound.Memory, rec.UpperBound.Memory)
	}
	if rec.Target.Compute.String() != "200m" {
		t.Errorf("compute above its floor stays: %v", rec.Target.Compute)
	}
}

func TestFitShare(t *testing.T) {
	const gib = float64(1 << 30)
	for _, tc := range []struct {
		name                    string
		target, peak, room, gpu float64
		want                    float64
	}{
		{"a little above half, peak leaves room: half", 42 * gib, 37 * gib, 2 * gib, 80 * gib, 40 * gib},
		{"peak too close to half: unchanged", 44 * gib, 38.5 * gib, 2 * gib, 80 * gib, 44 * gib},
		{"a little above a third of 141Gi: a third in whole MiB", 50 * gib, 44 * gib, 2 * gib, 141 * gib, math.Floor(141*1024/3) * (1 << 20)},
		{"already a share or less: unchanged", 40 * gib, 30 * gib, 2 * gib, 80 * gib, 40 * gib},
		{"between a quarter and a third: a quarter", 25 * gib, 17 * gib, 2 * gib, 80 * gib, 20 * gib},
		{"disabled", 42 * gib, 30 * gib, -1, 80 * gib, 42 * gib},
		{"whole GPU or more: unchanged", 80 * gib, 70 * gib, 2 * gib, 80 * gib, 80 * gib},
	} {
		if got := FitShare(tc.target, tc.peak, tc.room, tc.gpu); got != tc.want {
			t.Errorf("%s: FitShare = %.0f MiB, want %.0f MiB", tc.name, got/(1<<20), tc.want/(1<<20))
		}
	}
}
