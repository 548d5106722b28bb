package packing

import "sort"

// Consolidation: pods never move once placed, so as pods come, go and shrink, GPUs are
// left holding a few small tenants that would fit on other GPUs in use. Replacing those
// tenants (their replacements placed best fit by a binpacking scheduler) empties the
// GPU. On GenTD26 the GPUs held by gpufrac's allocations were 9 % above what packing the
// same allocations afresh at each minute needs (80 GiB, after 12 h of history;
// docs/benchmarks/savings.md, "Consolidation"). The updater and the what-if simulator
// both choose the GPU to empty with Consolidation.

// DefaultConsolidationComputeMilli is the most compute, thousandths of one GPU, that the
// tenants of a GPU may hold together after tenants moved onto it
// (ConsolidationOptions.MaxComputeMilli): consolidation trades memory fragmentation
// only, and leaves compute slack where time-sliced tenants would otherwise collide.
// Measured on the synthetic hold-out (docs/benchmarks/savings.md, "Consolidation"): at
// 700 the runs over 1.5 % compute contention at 141 GiB rose from 3 to 5 of 40, at 1000
// to 11; at 500 they stayed at 3, and GenTD26's savings were kept.
const DefaultConsolidationComputeMilli = 500

// Tenant is one pod on a device, as consolidation sees it.
type Tenant struct {
	// Alloc is what the pod holds on the device now (memory bytes, compute milli-GPU).
	Alloc Alloc
	// Next is what its replacement would hold: the current recommendation as the
	// backend writes it (Alloc where it would be unchanged).
	Next Alloc
	// Movable is false for a pod that must not be replaced now (too young, not managed,
	// its workload without a disruption budget or a resize window); a device with one
	// such tenant is never emptied.
	Movable bool
	// Allowed, when not nil, reports whether the pod's replacement may run on device i
	// of the devices passed to Consolidation (its node selector, affinity and taints);
	// nil: on any.
	Allowed func(i int) bool
}

// Device is one GPU in use: its memory and its tenants.
type Device struct {
	// MemoryBytes is the device's memory, bytes.
	MemoryBytes int64
	// MaxTenants is the most pods the device holds (HAMi's split count; 0: no limit).
	MaxTenants int
	// Tenants are the pods placed on it.
	Tenants []Tenant
}

// ConsolidationOptions are the limits of Consolidation.
type ConsolidationOptions struct {
	// MaxComputeMilli is the most compute, milli-GPU, a device may hold after tenants
	// moved onto it (0: DefaultConsolidationComputeMilli; at most 1000).
	MaxComputeMilli int64
}

// Consolidation returns the device to empty and, for each of its tenants in order, the
// index of the device its replacement lands on; ok is false when no device can be
// emptied. Candidates are the devices with tenants that are all Movable, least memory
// held first (then lowest index). A candidate is emptied when every tenant's Next fits,
// largest memory first, best fit by memory (as Packer.Place) on the other devices with
// tenants that the tenant is Allowed on, counting the tenants already moved there:
// within each device's memory and MaxTenants and, where the tenant holds compute,
// within MaxComputeMilli of compute. A device never
// receives tenants beyond its memory, so an emptied device frees a GPU and fills no
// other past what it holds.
func Consolidation(devs []Device, o ConsolidationOptions) (drain int, dest []int, ok bool) {
	maxCompute := o.MaxComputeMilli
	if maxCompute <= 0 {
		maxCompute = DefaultConsolidationComputeMilli
	}
	maxCompute = min(maxCompute, 1000)
	held := make([]Alloc, len(devs))
	var order []int
	for i, d := range devs {
		if len(d.Tenants) == 0 {
			continue
		}
		movable := true
		for _, t := range d.Tenants {
			held[i].MemoryBytes += t.Alloc.MemoryBytes
			held[i].ComputeMilli += t.Alloc.ComputeMilli
			movable = movable && t.Movable
		}
		if movable {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return held[order[a]].MemoryBytes < held[order[b]].MemoryBytes })
	for _, i := range order {
		if dest, ok := fitElsewhere(devs, held, i, maxCompute); ok {
			return i, dest, true
		}
	}
	return -1, nil, false
}

// fitElsewhere places device i's tenants on the other devices with tenants (held: what
// each holds), largest first, best fit by memory; it returns each tenant's device, in
// the tenants' order.
func fitElsewhere(devs []Device, held []Alloc, i int, maxCompute int64) ([]int, bool) {
	ts := devs[i].Tenants
	byMemory := make([]int, len(ts))
	for j := range byMemory {
		byMemory[j] = j
	}
	sort.SliceStable(byMemory, func(a, b int) bool { return ts[byMemory[a]].Next.MemoryBytes > ts[byMemory[b]].Next.MemoryBytes })
	added := map[int]Alloc{}
	moved := map[int]int{}
	dest := make([]int, len(ts))
	for _, j := range byMemory {
		next := ts[j].Next
		best, bestLeft := -1, int64(0)
		for g, d := range devs {
			if g == i || len(d.Tenants) == 0 || (ts[j].Allowed != nil && !ts[j].Allowed(g)) {
				continue
			}
			mem := held[g].MemoryBytes + added[g].MemoryBytes + next.MemoryBytes
			compute := held[g].ComputeMilli + added[g].ComputeMilli + next.ComputeMilli
			if mem > d.MemoryBytes || (next.ComputeMilli > 0 && compute > maxCompute) ||
				(d.MaxTenants > 0 && len(d.Tenants)+moved[g] >= d.MaxTenants) {
				continue
			}
			if left := d.MemoryBytes - mem; best < 0 || left < bestLeft {
				best, bestLeft = g, left
			}
		}
		if best < 0 {
			return nil, false
		}
		a := added[best]
		a.MemoryBytes += next.MemoryBytes
		a.ComputeMilli += next.ComputeMilli
		added[best] = a
		moved[best]++
		dest[j] = best
	}
	return dest, true
}
