package sharingplan

import (
	"errors"
	"strings"
	"testing"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

const gib = 1 << 30

func TestCompute(t *testing.T) {
	ts, mps, excl := gpufracv1.SharingModeTimeSlicing, gpufracv1.SharingModeMPS, gpufracv1.SharingModeExclusive
	tests := []struct {
		name       string
		in         Input
		mode       gpufracv1.SharingMode
		n, memN    int
		cpuN       int
		reason     string
		pinned     int64
		threads    int
		needed     int
		freed      int
		pods, held int
	}{{
		name: "memory limits: 4 × 18Gi fit 80Gi, compute would allow 10",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, Workloads: []Workload{
			{Name: "a/small", MemoryBytes: 10 * gib, ComputeMilli: 50, Mode: ts, Pods: 3},
			{Name: "a/big", MemoryBytes: 18 * gib, ComputeMilli: 100, Mode: ts, Pods: 6},
		}},
		mode: ts, n: 4, memN: 4, cpuN: 10, reason: "memory: 4 × 18432MiB (a/big)", needed: 3, freed: 6, pods: 9, held: 9,
	}, {
		name: "compute limits after memory: 3 × 300m fit the 1000m budget",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 18 * gib, ComputeMilli: 300, Mode: ts, Pods: 6},
		}},
		mode: ts, n: 3, memN: 4, cpuN: 3, reason: "compute: 3 × 300m (a/x) fit the 1000m budget", needed: 2, freed: 4, pods: 6, held: 6,
	}, {
		name: "time-slicing may overcommit compute with a larger budget",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1500, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 10 * gib, ComputeMilli: 300, Mode: ts, Pods: 5},
		}},
		mode: ts, n: 5, memN: 8, cpuN: 5, reason: "compute: 5 × 300m", needed: 1, freed: 4, pods: 5, held: 5,
	}, {
		name: "MPS caps the budget at one GPU and gives equal per-client limits",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1500, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 10 * gib, ComputeMilli: 300, Mode: mps, Pods: 4},
			{Name: "a/y", MemoryBytes: 5 * gib, ComputeMilli: 100, Mode: ts, Pods: 2},
		}},
		mode: mps, n: 3, memN: 8, cpuN: 3, reason: "fit the 1000m budget", pinned: 80 * gib / 3 / MiB * MiB, threads: 33, needed: 2, freed: 4, pods: 6, held: 6,
	}, {
		name: "maxReplicas bounds N",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 2, ComputeBudgetMilli: 1000, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 1 * gib, ComputeMilli: 10, Mode: ts, Pods: 5},
		}},
		mode: ts, n: 2, memN: 80, cpuN: 100, reason: "maxReplicas 2", needed: 3, freed: 2, pods: 5, held: 5,
	}, {
		name: "no two copies fit memory: exclusive, nothing freed",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 50 * gib, ComputeMilli: 100, Mode: ts, Pods: 2},
		}},
		mode: excl, n: 1, memN: 1, cpuN: 10, reason: "no sharing: memory: 1 × 51200MiB", needed: 2, freed: 0, pods: 2, held: 2,
	}, {
		name: "compute target above the budget: exclusive",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 8 * gib, ComputeMilli: 1000, Mode: mps, Pods: 2},
			{Name: "a/y", MemoryBytes: 8 * gib, ComputeMilli: 1200, Mode: mps, Pods: 1},
		}},
		mode: excl, n: 1, memN: 10, cpuN: 0, reason: "no sharing: compute: 1200m (a/y) exceeds the 1000m budget", needed: 3, freed: 0, pods: 3, held: 3,
	}, {
		name: "no compute target is not zero compute: memory bounds N and the reason says so",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 20 * gib, ComputeMilli: -1, Mode: ts, Pods: 4},
		}},
		mode: ts, n: 4, memN: 4, cpuN: 0, reason: "1 workload(s) without a compute target", needed: 1, freed: 3, pods: 4, held: 4,
	}, {
		name: "a workload under the minimum confidence bounds N to 1: its need is not known yet",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, MinConfidencePercent: 50, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 10 * gib, ComputeMilli: 100, Mode: ts, Pods: 4, ConfidencePercent: 80},
			{Name: "a/young", MemoryBytes: 512 * MiB, ComputeMilli: 10, Mode: ts, Pods: 1, ConfidencePercent: 3},
			{Name: "a/none", MemoryBytes: 1 * gib, ComputeMilli: 10, Mode: ts, Pods: 1, ConfidencePercent: -1},
		}},
		mode: excl, n: 1, memN: 8, cpuN: 10, reason: "no sharing: 2 workload(s) under the minimum confidence 50% (a/young 3%, a/none no confidence)", needed: 6, freed: 0, pods: 6, held: 6,
	}, {
		name: "every workload at the minimum confidence: it does not bound N",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, MinConfidencePercent: 50, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 10 * gib, ComputeMilli: 100, Mode: ts, Pods: 4, ConfidencePercent: 50},
		}},
		mode: ts, n: 8, memN: 8, cpuN: 10, reason: "memory: 8 × 10240MiB", needed: 1, freed: 3, pods: 4, held: 4,
	}, {
		name: "forced time-slicing over an MPS recommendation",
		in: Input{GPUMemoryBytes: 40 * gib, Mode: ts, MaxReplicas: 8, ComputeBudgetMilli: 1000, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 10 * gib, ComputeMilli: 200, Mode: mps, Pods: 0},
		}},
		mode: ts, n: 4, memN: 4, cpuN: 5, reason: "memory", needed: 0, freed: 0,
	}, {
		name: "a pod of a workload no longer planned, admitted at 3 per GPU, holds N at 3",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 10 * gib, ComputeMilli: 100, Mode: ts, Pods: 4},
		}, Held: []Held{{Name: "pod b/old-1 (autoscaler b/old)", Replicas: 4}, {Name: "pod b/old-2 (autoscaler b/old)", Replicas: 3}, {Name: "pod b/old-3 (autoscaler b/old)", Replicas: 3}, {Name: "bad", Replicas: 0}}},
		mode: ts, n: 3, memN: 8, cpuN: 10, reason: "held at 3: pod b/old-2 (autoscaler b/old) runs on the pool at 3 per GPU and its workload is no longer planned (its need is not known), with 2 more such pod(s)", needed: 2, freed: 2, pods: 4, held: 4,
	}, {
		name: "a held pod at more replicas than the plan does not raise N",
		in: Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, Workloads: []Workload{
			{Name: "a/x", MemoryBytes: 20 * gib, ComputeMilli: 100, Mode: ts, Pods: 4},
		}, Held: []Held{{Name: "pod b/old-1", Replicas: 8}}},
		mode: ts, n: 4, memN: 4, cpuN: 10, reason: "memory: 4 × 20480MiB", needed: 1, freed: 3, pods: 4, held: 4,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Compute(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if p.Mode != tc.mode || p.Replicas != tc.n || p.MemoryReplicas != tc.memN || p.ComputeReplicas != tc.cpuN {
				t.Errorf("mode %s N %d (memory %d, compute %d), want %s %d (%d, %d)", p.Mode, p.Replicas, p.MemoryReplicas, p.ComputeReplicas, tc.mode, tc.n, tc.memN, tc.cpuN)
			}
			if !strings.Contains(p.Reason, tc.reason) {
				t.Errorf("reason %q does not contain %q", p.Reason, tc.reason)
			}
			if p.PinnedMemoryBytes != tc.pinned || p.ActiveThreadPercentage != tc.threads {
				t.Errorf("MPS limits %d bytes %d%%, want %d %d%%", p.PinnedMemoryBytes, p.ActiveThreadPercentage, tc.pinned, tc.threads)
			}
			if p.Pods != tc.pods || p.GPUsHeld != tc.held || p.GPUsNeeded != tc.needed || p.GPUsFreed != tc.freed {
				t.Errorf("pods %d held %d needed %d freed %d, want %d %d %d %d", p.Pods, p.GPUsHeld, p.GPUsNeeded, p.GPUsFreed, tc.pods, tc.held, tc.needed, tc.freed)
			}
		})
	}
}

func TestComputeRejectsBadInput(t *testing.T) {
	ok := Input{GPUMemoryBytes: 80 * gib, MaxReplicas: 8, ComputeBudgetMilli: 1000, Workloads: []Workload{{Name: "a/x", MemoryBytes: gib, ComputeMilli: 100}}}
	for name, tc := range map[string]struct {
		edit func(*Input)
		want error
	}{
		"no workloads":       {func(in *Input) { in.Workloads = nil }, ErrNoWorkloads},
		"no GPU memory":      {func(in *Input) { in.GPUMemoryBytes = 0 }, ErrInvalidInput},
		"zero maxReplicas":   {func(in *Input) { in.MaxReplicas = 0 }, ErrInvalidInput},
		"zero budget":        {func(in *Input) { in.ComputeBudgetMilli = 0 }, ErrInvalidInput},
		"exclusive forced":   {func(in *Input) { in.Mode = gpufracv1.SharingModeExclusive }, ErrInvalidInput},
		"zero memory target": {func(in *Input) { in.Workloads = []Workload{{Name: "a/y", MemoryBytes: 0}} }, ErrInvalidInput},
	} {
		in := ok
		tc.edit(&in)
		if _, err := Compute(in); !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", name, err, tc.want)
		}
	}
}

func TestDevicePluginConfigRoundTrip(t *testing.T) {
	for _, p := range []Plan{
		{Mode: gpufracv1.SharingModeTimeSlicing, Replicas: 4},
		{Mode: gpufracv1.SharingModeMPS, Replicas: 3},
		{Mode: gpufracv1.SharingModeExclusive, Replicas: 1},
	} {
		s, err := DevicePluginConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		n, mode, err := Replicas(s)
		if err != nil || n != p.Replicas || mode != p.Mode {
			t.Errorf("%s ×%d: read back %s ×%d (%v) from\n%s", p.Mode, p.Replicas, mode, n, err, s)
		}
	}
	s, _ := DevicePluginConfig(Plan{Mode: gpufracv1.SharingModeTimeSlicing, Replicas: 4})
	want := "sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\nversion: v1\n"
	if s != want {
		t.Errorf("time-slicing config\n%s\nwant\n%s", s, want)
	}
	if _, _, err := Replicas("sharing: [1"); err == nil {
		t.Error("Replicas accepted invalid YAML")
	}
}

// One replica's share is GPU memory / N rounded down to whole MiB (the MPS pinned limit,
// the backends' record), so N is the most replicas whose share still holds the largest
// target, not floor(GPU memory / largest) alone: with a GPU or a target that is no whole
// number of MiB (spec.gpuMemory 75G, a minMemory of 37.5G) that quotient gives a share up
// to a MiB below the target. Before, 75G and a 37.5G target planned 2 replicas of
// 35762MiB (37,499,174,912 bytes < 37.5G), the MPS client pinned under its need.
func TestReplicaShareHoldsTheLargestTarget(t *testing.T) {
	for _, tc := range []struct {
		gpu, largest int64
		want         int
	}{
		{75_000_000_000, 37_500_000_000, 1},
		{75_000_000_000, 37_499_000_000, 2},
		{81559 * MiB, 40779*MiB + MiB/2, 1},
		{81559 * MiB, 40779 * MiB, 2},
		{80 * gib, 20 * gib, 4},
		{80 * gib, 81 * gib, 0},
	} {
		p, err := Compute(Input{GPUMemoryBytes: tc.gpu, MaxReplicas: 48, ComputeBudgetMilli: 1000, Workloads: []Workload{{Name: "a/x", MemoryBytes: tc.largest, ComputeMilli: -1, Pods: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if p.MemoryReplicas != tc.want {
			t.Errorf("GPU %d, largest %d: memoryReplicas %d, want %d", tc.gpu, tc.largest, p.MemoryReplicas, tc.want)
		}
		if p.Replicas > 1 && ReplicaMemoryBytes(tc.gpu, p.Replicas) < tc.largest {
			t.Errorf("GPU %d, largest %d: %d replicas of %d bytes hold less than the target", tc.gpu, tc.largest, p.Replicas, ReplicaMemoryBytes(tc.gpu, p.Replicas))
		}
	}
}
