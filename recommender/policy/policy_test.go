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
		// The CRD's rules and the validating webhook reject a minimum above its maximum;
		// an object stored without them still never gets less than its minimum.
		{name: "min above max: the minimum holds", e: est(20*gib, 0.3, 0.2, 0.3), cp: &gpufracv1.ContainerPolicy{ContainerName: "*",
			MinMemory: q("30Gi"), MaxMemory: q("16Gi"), MinCompute: q("500m"), MaxCompute: q("200m")},
			mem: "30Gi", cpu: "500m", uncappedMem: "20Gi", upperMem: "30Gi", upperCP: "500m"},
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

// TestApplyFloorYoungShare: a rollback floor at or under a young share (the memoryLimit
// at the upper bound, what pods are written at) leaves the target at the need and the
// share written; a floor above the share raises the target as for any recommendation.
func TestApplyFloorYoungShare(t *testing.T) {
	for _, tc := range []struct {
		floor, wantTarget string
		wantLimit         bool
	}{
		{"40Gi", "30Gi", true},
		{"36Gi", "30Gi", true},
		{"48Gi", "48Gi", false},
	} {
		rec := gpufracv1.ContainerRecommendation{YoungMarginPercent: 50,
			Target:      gpufracv1.GPUResources{Memory: q("30Gi")},
			LowerBound:  gpufracv1.GPUResources{Memory: q("20Gi")},
			UpperBound:  gpufracv1.GPUResources{Memory: q("40Gi")},
			MemoryLimit: q("40Gi")}
		ApplyFloor(&rec, gpufracv1.ContainerAllocation{ContainerName: "main", Memory: q(tc.floor)})
		if rec.Target.Memory.String() != tc.wantTarget || (rec.MemoryLimit != nil) != tc.wantLimit {
			t.Errorf("floor %s: target %v, memoryLimit %v; want %s, limit kept: %v", tc.floor, rec.Target.Memory, rec.MemoryLimit, tc.wantTarget, tc.wantLimit)
		}
	}
}

// TestYoungShareUnderGuardrail: a young target the latency guardrail holds at the
// previous one (above the share of today's target) gets the share of the held target
// as its upper bound and memoryLimit, so new pods are not written below the running ones.
func TestYoungShareUnderGuardrail(t *testing.T) {
	e := est(18*gib/1.15/1.5, 0.2, 0.05, 0.3)
	e.Target.MemoryBytes = 18 * gib
	e.RecentPeakBytes, e.YoungMargin, e.Confidence = 10*gib, 0.5, 0.5
	prev := &gpufracv1.ContainerRecommendation{Target: gpufracv1.GPUResources{Memory: q("25Gi"), Compute: q("200m")}}
	c := Config{GPUMemoryBytes: 80 * gib, YoungLimitAtShare: true, FitMemoryHeadroomBytes: -1}
	third := int64(math.Floor(80.0*1024/3)) << 20
	for _, g := range []gpufracv1.Guardrail{gpufracv1.GuardrailBreached, gpufracv1.GuardrailHold} {
		r := c.Recommend("main", e, nil, prev, g)
		if r.Target.Memory.Value() != 25<<30 || r.UpperBound.Memory.Value() != third || r.MemoryLimit == nil || r.MemoryLimit.Value() != third {
			t.Errorf("guardrail %d: target %v upper %v memoryLimit %v; want 25Gi held, the third (%d MiB) as upper bound and limit", g, r.Target.Memory, r.UpperBound.Memory, r.MemoryLimit, third>>20)
		}
	}
}

func TestFitShare(t *testing.T) {
	const gib = float64(1 << 30)
	for _, tc := range []struct {
		name                    string
		target, peak, room, gpu float64
		near                    float64 // FitNearLimit; 0: off
		want                    float64
	}{
		{"a little above half, peak leaves room: half", 42 * gib, 37 * gib, 2 * gib, 80 * gib, 0, 40 * gib},
		{"peak too close to half: unchanged", 44 * gib, 38.5 * gib, 2 * gib, 80 * gib, 0, 44 * gib},
		{"a little above a third of 141Gi: a third in whole MiB", 50 * gib, 44 * gib, 2 * gib, 141 * gib, 0, math.Floor(141*1024/3) * (1 << 20)},
		{"already a share or less: unchanged", 40 * gib, 30 * gib, 2 * gib, 80 * gib, 0, 40 * gib},
		{"between a quarter and a third: a quarter", 25 * gib, 17 * gib, 2 * gib, 80 * gib, 0, 20 * gib},
		{"disabled", 42 * gib, 30 * gib, -1, 80 * gib, 0, 42 * gib},
		{"whole GPU or more: unchanged", 80 * gib, 70 * gib, 2 * gib, 80 * gib, 0, 80 * gib},
		{"near limit 0.9, peak fills 92.5 % of half: unchanged", 42 * gib, 37 * gib, 2 * gib, 80 * gib, 0.9, 42 * gib},
		{"near limit 0.9, peak fills 87.5 % of half: half", 42 * gib, 35 * gib, 2 * gib, 80 * gib, 0.9, 40 * gib},
		{"near limit 0.9, peak 2 GiB under a third of 141Gi (96 %): unchanged", 50 * gib, 45 * gib, 2 * gib, 141 * gib, 0.9, 50 * gib},
		{"near limit 1: off", 42 * gib, 37 * gib, 2 * gib, 80 * gib, 1, 40 * gib},
	} {
		if got := FitShare(tc.target, tc.peak, tc.room, tc.near, tc.gpu); got != tc.want {
			t.Errorf("%s: FitShare = %.0f MiB, want %.0f MiB", tc.name, got/(1<<20), tc.want/(1<<20))
		}
	}
}

func TestShareCeil(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bytes, gpu float64
		want       float64
	}{
		{"a little above a third of 80Gi: half", 27 * gib, 80 * gib, 40 * gib},
		{"exactly half: half", 40 * gib, 80 * gib, 40 * gib},
		{"a third of 141Gi, rounded up to a whole MiB", 45 * gib, 141 * gib, math.Ceil(141*1024/3) * (1 << 20)},
		{"above half: the whole GPU", 41 * gib, 80 * gib, 80 * gib},
		// 80 GiB ÷ 3 = 27306.67 MiB: 27306 MiB holds 26 GiB and three fit one GPU.
		{"a third of 80Gi, rounded down to a whole MiB", 26 * gib, 80 * gib, math.Floor(80*1024/3) * (1 << 20)},
		{"the third rounded down holds itself", math.Floor(80*1024/3) * (1 << 20), 80 * gib, math.Floor(80*1024/3) * (1 << 20)},
		{"above the third rounded down: rounded up", (math.Floor(80.0*1024/3) + 0.5) * (1 << 20), 80 * gib, math.Ceil(80.0*1024/3) * (1 << 20)},
		{"more than the GPU: unchanged", 90 * gib, 80 * gib, 90 * gib},
		{"nothing: unchanged", 0, 80 * gib, 0},
	} {
		if got := ShareCeil(tc.bytes, tc.gpu); got != tc.want {
			t.Errorf("%s: ShareCeil = %.0f MiB, want %.0f MiB", tc.name, got/(1<<20), tc.want/(1<<20))
		}
	}
}

// TestYoungRecommendation checks what the policy makes of a young estimate: the share it
// rounds down to must hold the peak with the young margin, the upper bound is the share
// the target falls in (a young pod is replaced only to move to a smaller share), and the
// margin is written as youngMarginPercent.
func TestYoungRecommendation(t *testing.T) {
	c := Config{GPUMemoryBytes: 80 * gib}
	young := func(peak, margin float64) estimate.Estimate {
		e := est(peak*1.15*(1+margin), 0.2, 0.05, 0.3)
		e.RecentPeakBytes, e.YoungMargin, e.Confidence = peak, margin, 0.5
		e.UpperBound.MemoryBytes = peak * 1.15 * (1 + 2*margin)
		return e
	}
	for _, tc := range []struct {
		name               string
		e                  estimate.Estimate
		target, upper      float64
		youngMarginPercent int32
	}{
		// 30Gi × 1.15 × 1.1 = 37.95Gi: under half, upper bound half.
		{"n=10, under half", young(30*gib, 0.1), 30 * 1.15 * 1.1 * gib, 40 * gib, 10},
		// 16Gi × 1.15 × 1.5 = 27.6Gi, a little above a third (26.67Gi): the peak with the
		// margin (24Gi) + 2Gi fits a third, so a third; upper bound the same third (whole
		// MiB rounded down: three fit one GPU).
		{"n=2, rounded down to a third", young(16*gib, 0.5), math.Floor(80.0*1024/3) * (1 << 20), math.Floor(80.0*1024/3) * (1 << 20), 50},
		// 18Gi × 1.15 × 1.5 = 31Gi: the peak with the margin (27Gi) does not fit a third.
		{"n=2, margin keeps it above a third", young(18*gib, 0.5), 18 * 1.15 * 1.5 * gib, 40 * gib, 50},
		// Not young: the upper bound is the estimator's.
		{"mature", est(30*gib, 0.2, 0.05, 0.3), 30 * gib, 60 * gib, 0},
	} {
		r := c.Recommend("main", tc.e, nil, nil, gpufracv1.GuardrailNone)
		mib := func(v float64) int64 { return int64(math.Ceil(v / (1 << 20))) }
		if got := r.Target.Memory.Value() >> 20; got != mib(tc.target) {
			t.Errorf("%s: target %d MiB, want %d MiB", tc.name, got, mib(tc.target))
		}
		if got := r.UpperBound.Memory.Value() >> 20; got != mib(tc.upper) {
			t.Errorf("%s: upper bound %d MiB, want %d MiB", tc.name, got, mib(tc.upper))
		}
		if r.YoungMarginPercent != tc.youngMarginPercent {
			t.Errorf("%s: youngMarginPercent %d, want %d", tc.name, r.YoungMarginPercent, tc.youngMarginPercent)
		}
	}
}

// TestComputeRequestOnlyForTimeSlicing: a TimeSlicing recommendation carries the
// estimate's compute request (within the policy's compute bounds), which placement
// reserves without a limit; Exclusive and MPS, whose target.compute is reserved and
// enforced, and containers whose compute gpufrac does not control carry none.
func TestComputeRequestOnlyForTimeSlicing(t *testing.T) {
	c := Config{GPUMemoryBytes: 80 * gib}
	bursty := est(20*gib, 0.4, 0.01, 0.35) // TimeSlicing
	bursty.ComputeRequest = 0.123
	steady := est(20*gib, 0.4, 0.3, 0.4) // MPS
	steady.ComputeRequest = 0.3
	busy := est(20*gib, 0.9, 0.8, 0.9) // Exclusive
	busy.ComputeRequest = 0.85
	memOnly := &gpufracv1.ContainerPolicy{ContainerName: "*", ControlledResources: []gpufracv1.GPUResourceName{gpufracv1.ResourceMemory}}
	for _, tc := range []struct {
		name string
		e    estimate.Estimate
		cp   *gpufracv1.ContainerPolicy
		mode gpufracv1.SharingMode
		want string // "" = absent
	}{
		{name: "time-slicing", e: bursty, mode: gpufracv1.SharingModeTimeSlicing, want: "123m"},
		{name: "time-slicing under a compute maximum", e: bursty, cp: &gpufracv1.ContainerPolicy{ContainerName: "*", MaxCompute: q("100m")}, mode: gpufracv1.SharingModeTimeSlicing, want: "100m"},
		{name: "time-slicing above a compute minimum", e: bursty, cp: &gpufracv1.ContainerPolicy{ContainerName: "*", MinCompute: q("200m")}, mode: gpufracv1.SharingModeTimeSlicing, want: "200m"},
		{name: "MPS", e: steady, mode: gpufracv1.SharingModeMPS},
		{name: "exclusive", e: busy, mode: gpufracv1.SharingModeExclusive},
		{name: "compute not controlled", e: bursty, cp: memOnly, mode: gpufracv1.SharingModeTimeSlicing},
	} {
		rec := c.Recommend("main", tc.e, tc.cp, nil, gpufracv1.GuardrailNone)
		if rec.SharingMode != tc.mode {
			t.Fatalf("%s: mode %s, want %s", tc.name, rec.SharingMode, tc.mode)
		}
		got := ""
		if rec.ComputeRequest != nil {
			got = rec.ComputeRequest.String()
		}
		if got != tc.want {
			t.Errorf("%s: computeRequest %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestFitWithMemorySpread: packing-aware sizing rounds the target down to a share of
// the GPU when the recent peak fits it with --fit-memory-headroom to spare, and the
// memory limit (estimate.Estimate.MemoryLimitBytes) only when the peak plus its spread
// still does: a spiky workload's limit is not rounded down to the edge of its next
// spike. The limit is written only above the target.
func TestFitWithMemorySpread(t *testing.T) {
	c := Config{GPUMemoryBytes: 80 * gib}
	for _, tc := range []struct {
		spread, limitIn, limit float64 // limitIn: the estimate's limit; limit: memoryLimit, bytes (0: none)
	}{
		{0, 0, 0},                 // no spread: no limit
		{0.05, 44 * gib, 0},       // 37.8Gi + 2Gi fits half: the limit rounds to the target
		{0.1, 46 * gib, 46 * gib}, // 39.6Gi + 2Gi does not: the limit stays above the half
		{0.3, 60 * gib, 60 * gib}, // a wider spread, a wider limit
		{0.3, 90 * gib, 80 * gib}, // at most one GPU
	} {
		e := est(42*gib, 0.2, 0.05, 0.3)
		e.RecentPeakBytes, e.MemorySpread, e.MemoryLimitBytes = 36*gib, tc.spread, tc.limitIn
		r := c.Recommend("main", e, nil, nil, gpufracv1.GuardrailNone)
		if got := r.Target.Memory.Value() >> 20; got != 40<<10 {
			t.Errorf("spread %v: target %d MiB, want %d MiB (half of 80Gi)", tc.spread, got, 40<<10)
		}
		var got int64
		if r.MemoryLimit != nil {
			got = r.MemoryLimit.Value() >> 20
		}
		if want := int64(tc.limit) >> 20; got != want {
			t.Errorf("spread %v: memoryLimit %d MiB, want %d MiB", tc.spread, got, want)
		}
	}
}

// TestWithinPolicy: a written recommendation is moved into the policy's explicit bounds,
// memory limit and compute request included, and reports whether anything moved.
func TestWithinPolicy(t *testing.T) {
	written := func() gpufracv1.ContainerRecommendation {
		return gpufracv1.ContainerRecommendation{
			Target:         gpufracv1.GPUResources{Memory: q("10Gi"), Compute: q("200m")},
			LowerBound:     gpufracv1.GPUResources{Memory: q("8Gi"), Compute: q("100m")},
			UpperBound:     gpufracv1.GPUResources{Memory: q("12Gi"), Compute: q("300m")},
			MemoryLimit:    q("11Gi"),
			ComputeRequest: q("150m"),
		}
	}
	for _, tc := range []struct {
		name                           string
		cp                             *gpufracv1.ContainerPolicy
		target, lower, upper, limit    string // memory; limit "" is none
		compute, request, upperCompute string
		moved                          bool
	}{
		{"no policy", nil, "10Gi", "8Gi", "12Gi", "11Gi", "200m", "150m", "300m", false},
		{"bounds around it", &gpufracv1.ContainerPolicy{MinMemory: q("1Gi"), MaxMemory: q("40Gi"), MinCompute: q("50m"), MaxCompute: q("1")}, "10Gi", "8Gi", "12Gi", "11Gi", "200m", "150m", "300m", false},
		{"minMemory above the lower bound", &gpufracv1.ContainerPolicy{MinMemory: q("9Gi")}, "10Gi", "9Gi", "12Gi", "11Gi", "200m", "150m", "300m", true},
		{"minMemory above the limit", &gpufracv1.ContainerPolicy{MinMemory: q("11Gi")}, "11Gi", "11Gi", "12Gi", "", "200m", "150m", "300m", true},
		{"minMemory above all", &gpufracv1.ContainerPolicy{MinMemory: q("20Gi")}, "20Gi", "20Gi", "20Gi", "", "200m", "150m", "300m", true},
		{"maxMemory below all", &gpufracv1.ContainerPolicy{MaxMemory: q("6Gi")}, "6Gi", "6Gi", "6Gi", "", "200m", "150m", "300m", true},
		{"maxMemory between the target and the limit", &gpufracv1.ContainerPolicy{MaxMemory: q("10Gi") /* limit 11Gi */}, "10Gi", "8Gi", "10Gi", "", "200m", "150m", "300m", true},
		{"minCompute above the request", &gpufracv1.ContainerPolicy{MinCompute: q("250m")}, "10Gi", "8Gi", "12Gi", "11Gi", "250m", "250m", "300m", true},
		{"maxCompute below the target", &gpufracv1.ContainerPolicy{MaxCompute: q("120m")}, "10Gi", "8Gi", "12Gi", "11Gi", "120m", "120m", "120m", true},
		{"min equals max", &gpufracv1.ContainerPolicy{MinMemory: q("16Gi"), MaxMemory: q("16Gi")}, "16Gi", "16Gi", "16Gi", "", "200m", "150m", "300m", true},
	} {
		rec := written()
		moved := WithinPolicy(&rec, tc.cp)
		limit := ""
		if rec.MemoryLimit != nil {
			limit = rec.MemoryLimit.String()
		}
		got := []string{rec.Target.Memory.String(), rec.LowerBound.Memory.String(), rec.UpperBound.Memory.String(), limit,
			rec.Target.Compute.String(), rec.ComputeRequest.String(), rec.UpperBound.Compute.String()}
		want := []string{tc.target, tc.lower, tc.upper, tc.limit, tc.compute, tc.request, tc.upperCompute}
		if strings.Join(got, " ") != strings.Join(want, " ") || moved != tc.moved {
			t.Errorf("%s: %v moved %v; want %v moved %v", tc.name, got, moved, want, tc.moved)
		}
	}
}

// TestYoungLimitAtShare: for backends that place pods by their observed peak
// (Config.YoungLimitAtShare), a young workload's memoryLimit is at least its upper bound,
// the whole share of one GPU its target falls in (at most the policy's maxMemory; a spread
// limit above it stays), while the target stays the need of TestYoungRecommendation; a
// mature one, or the option off, gets no limit from it.
func TestYoungLimitAtShare(t *testing.T) {
	young := func(peak, margin, limit float64) estimate.Estimate {
		e := est(peak*1.15*(1+margin), 0.2, 0.05, 0.3)
		e.RecentPeakBytes, e.YoungMargin, e.Confidence = peak, margin, 0.5
		e.UpperBound.MemoryBytes = peak * 1.15 * (1 + 2*margin)
		e.MemoryLimitBytes = limit
		return e
	}
	spread := func(e estimate.Estimate) estimate.Estimate { e.MemorySpread = 0.5; return e }
	third := math.Floor(80.0*1024/3) * (1 << 20)
	for _, tc := range []struct {
		name          string
		on            bool
		e             estimate.Estimate
		cp            *gpufracv1.ContainerPolicy
		target, limit float64 // limit 0: none written
	}{
		{"n=10, under half: half", true, young(30*gib, 0.1, 0), nil, 30 * 1.15 * 1.1 * gib, 40 * gib},
		// Rounded down to a third: the target is the share, no limit above it.
		{"n=2, a third", true, young(16*gib, 0.5, 0), nil, third, 0},
		{"n=2, above a third: half", true, young(18*gib, 0.5, 0), nil, 18 * 1.15 * 1.5 * gib, 40 * gib},
		{"above half: the whole GPU", true, young(40*gib, 0.1, 0), nil, 40 * 1.15 * 1.1 * gib, 80 * gib},
		{"a limit under the share: the share", true, young(30*gib, 0.1, 39*gib), nil, 30 * 1.15 * 1.1 * gib, 40 * gib},
		{"a spread limit over the share stays", true, spread(young(30*gib, 0.1, 60*gib)), nil, 30 * 1.15 * 1.1 * gib, 60 * gib},
		{"at most maxMemory", true, young(30*gib, 0.1, 0), &gpufracv1.ContainerPolicy{ContainerName: "*", MaxMemory: q("38Gi")}, 30 * 1.15 * 1.1 * gib, 38 * gib},
		{"off: no limit", false, young(30*gib, 0.1, 0), nil, 30 * 1.15 * 1.1 * gib, 0},
		{"mature: no limit", true, est(30*gib, 0.2, 0.05, 0.3), nil, 30 * gib, 0},
	} {
		c := Config{GPUMemoryBytes: 80 * gib, YoungLimitAtShare: tc.on}
		r := c.Recommend("main", tc.e, tc.cp, nil, gpufracv1.GuardrailNone)
		mib := func(v float64) int64 { return int64(math.Ceil(v / (1 << 20))) }
		if got := r.Target.Memory.Value() >> 20; got != mib(tc.target) {
			t.Errorf("%s: target %d MiB, want the need %d MiB", tc.name, got, mib(tc.target))
		}
		var limit int64
		if r.MemoryLimit != nil {
			limit = r.MemoryLimit.Value() >> 20
		}
		if limit != mib(tc.limit) {
			t.Errorf("%s: memoryLimit %d MiB, want %d MiB", tc.name, limit, mib(tc.limit))
		}
		if tc.on && tc.e.YoungMargin > 0 && r.MemoryLimit != nil && r.MemoryLimit.Cmp(*r.UpperBound.Memory) < 0 {
			t.Errorf("%s: memoryLimit %s under the upper bound %s", tc.name, r.MemoryLimit, r.UpperBound.Memory)
		}
	}
}
