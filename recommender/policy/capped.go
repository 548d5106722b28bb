package policy

import (
	"fmt"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Shortfall is how far the resource policy's maximums hold one container's target below
// its uncapped need. Zero fields: that resource is not capped below need.
type Shortfall struct {
	Container string
	// MemoryBytes is need − max(maxMemory, target), bytes; NeedMemoryBytes and
	// MaxMemoryBytes are the two sides.
	MemoryBytes, NeedMemoryBytes, MaxMemoryBytes int64
	// ComputeMilli is need − max(maxCompute, target), milli-GPU (1000 = one GPU);
	// NeedComputeMilli and MaxComputeMilli are the two sides.
	ComputeMilli, NeedComputeMilli, MaxComputeMilli int64
}

// Capped reports whether any resource is capped below need.
func (s Shortfall) Capped() bool { return s.MemoryBytes > 0 || s.ComputeMilli > 0 }

// String renders "main: memory capped below need by 1024 MiB (need 5120 MiB, maxMemory
// 4096 MiB)" and/or the compute part in milli-GPU. Memory is rounded up to whole MiB.
func (s Shortfall) String() string {
	var parts []string
	if s.MemoryBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory capped below need by %d MiB (need %d MiB, maxMemory %d MiB)",
			ceilMiB(s.MemoryBytes), ceilMiB(s.NeedMemoryBytes), ceilMiB(s.MaxMemoryBytes)))
	}
	if s.ComputeMilli > 0 {
		parts = append(parts, fmt.Sprintf("compute capped below need by %d milli-GPU (need %dm, maxCompute %dm)",
			s.ComputeMilli, s.NeedComputeMilli, s.MaxComputeMilli))
	}
	return s.Container + ": " + strings.Join(parts, ", ")
}

func ceilMiB(b int64) int64 { return int64(math.Ceil(float64(b) / (1 << 20))) }

// CappedBelowNeed compares a container recommendation's uncappedTarget (the need,
// before the policy's min/max) with the policy's maxMemory and maxCompute (cp may be
// nil). Only a policy maximum counts: a target below the need for another reason
// (packing-aware rounding to a whole share, FitShare) is not a shortfall, and a target
// raised above the cap (a rollback floor) reduces it.
func CappedBelowNeed(rec gpufracv1.ContainerRecommendation, cp *gpufracv1.ContainerPolicy) Shortfall {
	s := Shortfall{Container: rec.ContainerName}
	if cp == nil {
		return s
	}
	val := func(q *resource.Quantity) int64 { return q.Value() }
	milli := func(q *resource.Quantity) int64 { return q.MilliValue() }
	short := func(need, target, max *resource.Quantity, get func(*resource.Quantity) int64) (int64, int64, int64) {
		if need == nil || max == nil || target == nil {
			return 0, 0, 0
		}
		n, m := get(need), get(max)
		have := m
		if t := get(target); t > have {
			have = t
		}
		if n <= have {
			return 0, 0, 0
		}
		return n - have, n, m
	}
	s.MemoryBytes, s.NeedMemoryBytes, s.MaxMemoryBytes = short(rec.UncappedTarget.Memory, rec.Target.Memory, cp.MaxMemory, val)
	s.ComputeMilli, s.NeedComputeMilli, s.MaxComputeMilli = short(rec.UncappedTarget.Compute, rec.Target.Compute, cp.MaxCompute, milli)
	return s
}
