package policy

import (
	"fmt"
	"math"

	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/mig"
)

// MIG relates a container recommendation to NVIDIA MIG profiles: its target expressed
// against the profile its samples were measured on (measured, dcgm-exporter's
// GPU_I_PROFILE; "" off MIG), and the smallest profile of the GPU that holds its memory
// and compute target, as an alternative to time-slicing. The GPU is the one that lists
// the measured profile, else the one whose memory is GPUMemoryBytes (mig.GPUFor). It
// returns nil when the recommendation has no target. Advice only: nothing reconfigures
// MIG.
func (c Config) MIG(rec gpufracv1.ContainerRecommendation, measured string) *gpufracv1.MIGRecommendation {
	c = c.WithDefaults()
	if rec.Target.Memory == nil && rec.Target.Compute == nil {
		return nil
	}
	mem, cpu := -1.0, -1.0 // not compared when absent
	if rec.Target.Memory != nil {
		mem = rec.Target.Memory.AsApproximateFloat64()
	}
	if rec.Target.Compute != nil {
		cpu = rec.Target.Compute.AsApproximateFloat64()
	}
	out := &gpufracv1.MIGRecommendation{MeasuredProfile: measured}
	var note string
	if measured != "" {
		note = againstProfile(out, measured, mem, cpu)
	}
	g, ok := mig.GPUFor(measured, c.GPUMemoryBytes)
	if !ok {
		out.Reason = fmt.Sprintf("no MIG-capable GPU in NVIDIA's tables has %s of memory (--gpu-memory): no profile named", MemoryQuantity(c.GPUMemoryBytes))
		return withNote(out, note)
	}
	out.GPU = g.Name
	p, ok := g.Smallest(mem, cpu)
	if !ok {
		out.Reason = fmt.Sprintf("no %s MIG profile holds %s: the target needs more than the largest instance", g.Name, targetText(mem, cpu))
		return withNote(out, note)
	}
	out.SmallestProfile = p.Name
	share, _ := p.ComputeShare()
	if p.Slices >= p.GPUSlices {
		// The whole GPU as one instance: no partition to share it by.
		out.Reason = fmt.Sprintf("only %s, the whole %s as one instance, holds %s: MIG has no smaller instance for it, so it is no alternative to sharing the GPU by time; advice only, gpufrac does not reconfigure MIG",
			p.Name, g.Name, targetText(mem, cpu))
		return withNote(out, note)
	}
	out.Reason = fmt.Sprintf("%s is the smallest %s MIG profile that holds %s (it has %.1f GB and %d/%d of the GPU's compute, %.0fm): an alternative to time-slicing with its own memory and SMs; advice only, gpufrac does not reconfigure MIG",
		p.Name, g.Name, targetText(mem, cpu), p.MemoryBytes()/1e9, p.Slices, p.GPUSlices, math.Floor(share*1000))
	return withNote(out, note)
}

// againstProfile fills the target expressed against the measured profile (memory as a
// percentage of its memory, compute as a share of its compute) and returns a note when
// the profile cannot be read, else "".
func againstProfile(out *gpufracv1.MIGRecommendation, measured string, mem, cpu float64) string {
	p, err := mig.Parse(measured)
	if err != nil {
		return fmt.Sprintf("measured on %q, which is not a MIG profile name: the target is not expressed against it", measured)
	}
	if mem >= 0 {
		out.MemoryPercentOfProfile = ptr.To(int32(math.Round(mem / p.MemoryBytes() * 100)))
	}
	share, ok := p.ComputeShare()
	if !ok {
		return fmt.Sprintf("profile %s is in none of NVIDIA's tables, so its share of the GPU is unknown: its activity was read as a share of the whole GPU (an upper bound)", measured)
	}
	if cpu >= 0 {
		out.ComputeOfProfile = ComputeQuantity(cpu / share)
	}
	return ""
}

// withNote appends note to the reason.
func withNote(out *gpufracv1.MIGRecommendation, note string) *gpufracv1.MIGRecommendation {
	if note != "" {
		out.Reason += "; " + note
	}
	return out
}

// targetText renders a memory (bytes) and compute (share of the GPU) target; a negative
// value is absent.
func targetText(mem, cpu float64) string {
	switch {
	case mem >= 0 && cpu >= 0:
		return fmt.Sprintf("the target of %s and %s of the GPU", MemoryQuantity(mem), ComputeQuantity(cpu))
	case mem >= 0:
		return fmt.Sprintf("the memory target of %s", MemoryQuantity(mem))
	}
	return fmt.Sprintf("the compute target of %s of the GPU", ComputeQuantity(cpu))
}
