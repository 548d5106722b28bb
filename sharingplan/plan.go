// Package sharingplan sizes NVIDIA device-plugin GPU sharing for one node pool: the
// sharing mode (time-slicing or MPS) and the replica count N each GPU is advertised as,
// from the recommendations of the workloads that run there. It is a pure function of its
// input (Compute) plus the device-plugin config entry that carries the plan
// (DevicePluginConfig); the controller in sharingplan/controller reads the cluster and
// writes the result.
//
// The rules (docs/sharing-planner.md):
//   - memory first: N copies of the largest pod memory target fit one GPU,
//     N ≤ floor(GPU memory / largest memory), and one replica's share (GPU memory / N,
//     whole MiB down) holds the largest;
//   - then compute: N copies of the largest pod compute target fit the compute budget,
//     N ≤ floor(budget / largest compute); the budget is at most one GPU for MPS, which
//     partitions SMs, and may exceed it for time-slicing, which only adds contention;
//   - N ≤ the policy's maxReplicas, and N ≥ 1; N = 1 means no sharing (Exclusive);
//   - N = 1 while any workload's recommendation is under the minimum confidence (its need
//     is not known yet: no data is not zero);
//   - N ≤ the replicas a running pod of a workload no longer planned was admitted at
//     (Input.Held): its GPU is never shared more ways under it;
//   - MPS gives each client GPU memory / N (whole MiB) and 100 / N percent of the SMs,
//     as NVIDIA's device plugin does;
//   - the pods hold one GPU each now; at N per GPU they need ceil(pods / N).
package sharingplan

import (
	"errors"
	"fmt"
	"strings"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// MiB is one mebibyte, bytes.
const MiB = 1 << 20

// Workload is one opted-in workload's recommendation, per pod.
type Workload struct {
	// Name identifies the workload in messages (namespace/name).
	Name string
	// MemoryBytes is the pod's memory target, bytes; > 0.
	MemoryBytes int64
	// ComputeMilli is the pod's compute target, thousandths of one GPU; < 0 when the
	// recommendation has none (compute not controlled), which is not zero: the reason
	// then says that compute did not bound N.
	ComputeMilli int64
	// Mode is the recommended sharing mode.
	Mode gpufracv1.SharingMode
	// Pods is the number of the workload's pods that exist now.
	Pods int
	// ConfidencePercent is the recommendation's confidence, percent 0–100; < 0 when it
	// has none.
	ConfidencePercent int32
	// NotApplied is why the admission webhook does not apply the workload's
	// recommendation (a contract.Reason such as stale-recommendation), "" when it does.
	// Such a workload's pods are admitted as they ask, so its need is not known: like
	// one under the minimum confidence, it bounds N to 1, and the reason names it.
	NotApplied string
}

// Input is everything Compute reads.
type Input struct {
	// GPUMemoryBytes is the memory of one GPU of the pool, bytes; > 0.
	GPUMemoryBytes int64
	// Mode forces TimeSlicing or MPS; empty follows the recommendations (MPS when any
	// workload recommends it, else TimeSlicing).
	Mode gpufracv1.SharingMode
	// MaxReplicas is the largest N; ≥ 1.
	MaxReplicas int
	// ComputeBudgetMilli is the compute N replicas may ask for together, thousandths of
	// one GPU; > 0. MPS uses at most 1000.
	ComputeBudgetMilli int64
	// Workloads are the opted-in workloads; at least one.
	Workloads []Workload
	// MinConfidencePercent is the least confidence, percent 0–100, at which a workload's
	// recommendation sizes N; a workload below it bounds N to 1 (its need is not known
	// yet, and every pod of the pool gets a 1/N share). 0: every recommendation sizes N.
	MinConfidencePercent int32
	// Held are pods that run on the pool's GPUs at a share the planner can no longer
	// size: placed by an earlier plan at Replicas per GPU for a workload that is not in
	// Workloads now (its autoscaler opted out or was deleted while its pods kept
	// running). N is at most the least of their Replicas, so a GPU under such a pod is
	// never shared more ways than it was admitted to (its need is not known: no data is
	// not zero).
	Held []Held
}

// Held is one pod the plan may not share more ways (Input.Held).
type Held struct {
	// Name identifies the pod and its workload in messages.
	Name string
	// Replicas is the replicas per GPU the pod was admitted at, ≥ 1; less is ignored.
	Replicas int
}

// Plan is the sharing plan for the pool.
type Plan struct {
	// Mode is TimeSlicing, MPS, or Exclusive when Replicas is 1.
	Mode gpufracv1.SharingMode
	// Replicas is N, the replicas each GPU is advertised as (≥ 1).
	Replicas int
	// MemoryReplicas is the memory bound on N; ComputeReplicas the compute bound (0 when
	// no workload has a positive compute target, or when the largest exceeds the budget).
	MemoryReplicas, ComputeReplicas int
	// Reason says in one line what limits Replicas.
	Reason string
	// LargestMemoryBytes is the largest pod memory target, bytes; LargestComputeMilli
	// the largest pod compute target, thousandths of one GPU (-1: none).
	LargestMemoryBytes, LargestComputeMilli int64
	// PinnedMemoryBytes is each MPS client's memory limit, bytes (whole MiB); 0 unless
	// Mode is MPS.
	PinnedMemoryBytes int64
	// ActiveThreadPercentage is each MPS client's share of the SMs, percent; 0 unless
	// Mode is MPS.
	ActiveThreadPercentage int
	// Pods is the workloads' pods; GPUsHeld what they hold at one GPU each; GPUsNeeded
	// what they need at Replicas per GPU; GPUsFreed the difference.
	Pods, GPUsHeld, GPUsNeeded, GPUsFreed int
}

// Errors of Compute.
var (
	// ErrNoWorkloads: no workload to size from.
	ErrNoWorkloads = errors.New("no opted-in workload has a memory recommendation")
	// ErrInvalidInput: a size or bound is not positive.
	ErrInvalidInput = errors.New("invalid planner input")
)

// Compute returns the plan for in. It returns ErrNoWorkloads when in has no workload and
// an error wrapping ErrInvalidInput when GPUMemoryBytes, MaxReplicas, ComputeBudgetMilli
// or a workload's MemoryBytes is not positive, or Mode is Exclusive.
func Compute(in Input) (Plan, error) {
	if err := validate(in); err != nil {
		return Plan{}, err
	}
	p := Plan{Mode: mode(in), LargestComputeMilli: -1}
	var memName, cpuName string
	computeUnknown := 0
	for _, w := range in.Workloads {
		if w.MemoryBytes > p.LargestMemoryBytes {
			p.LargestMemoryBytes, memName = w.MemoryBytes, w.Name
		}
		if w.ComputeMilli < 0 {
			computeUnknown++
		} else if w.ComputeMilli > p.LargestComputeMilli {
			p.LargestComputeMilli, cpuName = w.ComputeMilli, w.Name
		}
		p.Pods += w.Pods
	}
	budget := in.ComputeBudgetMilli
	if p.Mode == gpufracv1.SharingModeMPS {
		budget = min(budget, 1000)
	}
	p.MemoryReplicas = memoryReplicas(in.GPUMemoryBytes, p.LargestMemoryBytes)
	if p.LargestComputeMilli > 0 {
		p.ComputeReplicas = int(budget / p.LargestComputeMilli)
	}
	p.Replicas, p.Reason = limit(p, in.MaxReplicas, memName, cpuName, budget)
	if h, ok := leastHeld(in.Held); ok && h.Replicas < p.Replicas {
		p.Replicas = h.Replicas
		p.Reason = fmt.Sprintf("held at %d: %s runs on the pool at %d per GPU and its workload is no longer planned (its need is not known)", h.Replicas, h.Name, h.Replicas)
		if n := countHeld(in.Held); n > 1 {
			p.Reason += fmt.Sprintf(", with %d more such pod(s)", n-1)
		}
		if h.Replicas == 1 {
			p.Reason = "no sharing: " + p.Reason
		}
	}
	if low := unconfident(in); len(low) > 0 {
		p.Replicas = 1
		what := fmt.Sprintf("under the minimum confidence %d%%", in.MinConfidencePercent)
		for _, w := range in.Workloads {
			if w.NotApplied != "" {
				what = fmt.Sprintf("whose recommendation the webhook does not apply or is under the minimum confidence %d%%", in.MinConfidencePercent)
				break
			}
		}
		p.Reason = fmt.Sprintf("no sharing: %d workload(s) %s (%s): their need is not known yet, and every pod of the pool would get a 1/N share",
			len(low), what, strings.Join(low, ", "))
	}
	if computeUnknown > 0 {
		p.Reason += fmt.Sprintf("; %d workload(s) without a compute target did not bound it", computeUnknown)
	}
	if p.Replicas == 1 {
		p.Mode = gpufracv1.SharingModeExclusive
	}
	if p.Mode == gpufracv1.SharingModeMPS {
		p.PinnedMemoryBytes = ReplicaMemoryBytes(in.GPUMemoryBytes, p.Replicas)
		p.ActiveThreadPercentage = ReplicaThreadPercentage(p.Replicas)
	}
	p.GPUsHeld = p.Pods
	p.GPUsNeeded = (p.Pods + p.Replicas - 1) / p.Replicas
	p.GPUsFreed = p.GPUsHeld - p.GPUsNeeded
	return p, nil
}

// leastHeld is the first held pod of the least Replicas (≥ 1); false when none.
func leastHeld(held []Held) (Held, bool) {
	var least Held
	for _, h := range held {
		if h.Replicas >= 1 && (least.Replicas == 0 || h.Replicas < least.Replicas) {
			least = h
		}
	}
	return least, least.Replicas > 0
}

// countHeld counts the held pods (Replicas ≥ 1).
func countHeld(held []Held) int {
	c := 0
	for _, h := range held {
		if h.Replicas >= 1 {
			c++
		}
	}
	return c
}

// unconfident names the workloads whose recommendation is not applied ("ns/name:
// stale-recommendation") or under in.MinConfidencePercent ("ns/name 3%", "ns/name no
// confidence"), at most three and a count of the rest, in input order.
func unconfident(in Input) []string {
	var out []string
	n := 0
	for _, w := range in.Workloads {
		if w.NotApplied == "" && (in.MinConfidencePercent <= 0 || (w.ConfidencePercent >= in.MinConfidencePercent)) {
			continue
		}
		if n++; n > 3 {
			continue
		}
		if w.NotApplied != "" {
			out = append(out, w.Name+": "+w.NotApplied)
		} else if w.ConfidencePercent < 0 {
			out = append(out, w.Name+" no confidence")
		} else {
			out = append(out, fmt.Sprintf("%s %d%%", w.Name, w.ConfidencePercent))
		}
	}
	if n > 3 {
		out = append(out, fmt.Sprintf("%d more", n-3))
	}
	return out
}

// memoryReplicas is the most replicas n of a GPU of gpuMemoryBytes whose share
// (ReplicaMemoryBytes, whole MiB down) still holds largestBytes (> 0); 0 when not even
// the whole GPU does. floor(gpuMemoryBytes / largestBytes) alone can give a share up to
// a MiB below the target when either is not a whole number of MiB (a spec.gpuMemory or
// minMemory in G: 75G / 2 is 35762MiB, under a 37.5G target).
func memoryReplicas(gpuMemoryBytes, largestBytes int64) int {
	n := int(gpuMemoryBytes / largestBytes)
	for n > 0 && ReplicaMemoryBytes(gpuMemoryBytes, n) < largestBytes {
		n--
	}
	return n
}

// ReplicaMemoryBytes is one replica's share of a GPU of gpuMemoryBytes shared by
// replicas (≥ 1): gpuMemoryBytes / replicas, rounded down to whole MiB, bytes. It is the
// per-client pinned memory limit NVIDIA's device plugin sets with MPS sharing, and the
// memory budget of one time-slicing replica.
func ReplicaMemoryBytes(gpuMemoryBytes int64, replicas int) int64 {
	return gpuMemoryBytes / int64(max(replicas, 1)) / MiB * MiB
}

// ReplicaThreadPercentage is one MPS client's share of the SMs when a GPU is shared by
// replicas (≥ 1): 100 / replicas, rounded down, percent (the device plugin's
// active-thread percentage).
func ReplicaThreadPercentage(replicas int) int { return 100 / max(replicas, 1) }

func validate(in Input) error {
	switch {
	case len(in.Workloads) == 0:
		return ErrNoWorkloads
	case in.GPUMemoryBytes <= 0:
		return fmt.Errorf("%w: GPU memory %d bytes", ErrInvalidInput, in.GPUMemoryBytes)
	case in.MaxReplicas < 1:
		return fmt.Errorf("%w: maxReplicas %d", ErrInvalidInput, in.MaxReplicas)
	case in.ComputeBudgetMilli <= 0:
		return fmt.Errorf("%w: compute budget %dm", ErrInvalidInput, in.ComputeBudgetMilli)
	case in.Mode == gpufracv1.SharingModeExclusive:
		return fmt.Errorf("%w: sharing mode Exclusive (want MPS, TimeSlicing or empty)", ErrInvalidInput)
	}
	for _, w := range in.Workloads {
		if w.MemoryBytes <= 0 {
			return fmt.Errorf("%w: workload %s memory target %d bytes", ErrInvalidInput, w.Name, w.MemoryBytes)
		}
	}
	return nil
}

// mode is the forced mode, else MPS when any workload recommends it, else TimeSlicing.
func mode(in Input) gpufracv1.SharingMode {
	if in.Mode != "" {
		return in.Mode
	}
	for _, w := range in.Workloads {
		if w.Mode == gpufracv1.SharingModeMPS {
			return gpufracv1.SharingModeMPS
		}
	}
	return gpufracv1.SharingModeTimeSlicing
}

// limit returns N, the smallest bound, at least 1, and the reason naming it.
func limit(p Plan, maxReplicas int, memName, cpuName string, budget int64) (int, string) {
	n := p.MemoryReplicas
	reason := fmt.Sprintf("memory: %d × %dMiB (%s) fit one GPU", n, p.LargestMemoryBytes/MiB, memName)
	if p.LargestComputeMilli > 0 && p.ComputeReplicas < n {
		n = p.ComputeReplicas
		reason = fmt.Sprintf("compute: %d × %dm (%s) fit the %dm budget", n, p.LargestComputeMilli, cpuName, budget)
		if n == 0 {
			reason = fmt.Sprintf("compute: %dm (%s) exceeds the %dm budget", p.LargestComputeMilli, cpuName, budget)
		}
	}
	if maxReplicas < n {
		n = maxReplicas
		reason = fmt.Sprintf("maxReplicas %d", maxReplicas)
	}
	if n < 1 {
		return 1, "no sharing: " + reason
	}
	if n == 1 {
		reason = "no sharing: " + reason
	}
	return n, reason
}
