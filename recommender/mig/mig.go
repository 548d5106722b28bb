// Package mig knows NVIDIA's Multi-Instance GPU (MIG) GPU instance profiles: the share of
// a GPU's compute and memory a profile name such as "1g.10gb" stands for, and the
// smallest profile of a GPU that holds an allocation.
//
// Source of the tables: NVIDIA Multi-Instance GPU User Guide (r580), "Supported MIG
// Profiles" (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html),
// which gives each profile's fraction of the GPU's SMs (its compute slices over the
// GPU's: 1/7 … 7/7, 1/4 … 4/4 on A30) and of its memory. A profile is named Ng.MMgb: N
// compute slices and MM GB of memory, as NVIDIA rounds it.
package mig

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Profile is one MIG GPU instance profile.
type Profile struct {
	// Name is the profile as NVIDIA names it, e.g. "1g.10gb" or "1g.18gb+me".
	Name string
	// Slices is the number of compute slices, the N of "Ng".
	Slices int
	// MemoryGB is the memory in the name, the MM of "MMgb", GB as NVIDIA rounds it.
	MemoryGB int
	// GPUSlices is the number of compute slices of the whole GPU the profile belongs to
	// (7 on A100, H100, H200 and B200; 4 on A30), from NVIDIA's tables (GPUs); 0 when the
	// name is in none of them, so that its share of the GPU is unknown.
	GPUSlices int
}

// UsableMemoryFraction is the part of the GB in a profile's name that gpufrac counts as
// the instance's memory (Profile.MemoryBytes): 0.95, the lowest ratio in published
// `nvidia-smi mig -lgip` listings (H200's 1g.18gb reports 16.00 GiB, 0.954 × 18 GB;
// A100 80GB's 1g.10gb 9.50 GiB, 1.02 × 10 GB), so a target said to fit a profile fits.
const UsableMemoryFraction = 0.95

// MaxOvershoot is how far above 1 a MIG instance's activity ratio can read and still be
// a saturated instance: 7, the most compute slices of one GPU over the fewest (7g/1g).
// DCGM normalises a GPU instance's profiling fields by its own size, but on GPUs split
// into instances of different sizes it mixes them up, so a saturated small instance can
// read above 1 (NVIDIA/DCGM#152: DCGM_FI_PROF_SM_ACTIVE above 100 % on MIG) and a large
// one below it (NVIDIA/DCGM#138, #248). Larger values are blank sentinels, not activity.
const MaxOvershoot = 7

// profileRE matches Ng.MMgb with NVIDIA's optional suffixes (+me, +me.all, +gfx, -me).
var profileRE = regexp.MustCompile(`^([1-9][0-9]?)g\.([1-9][0-9]{0,3})gb(\+me\.all|\+me|\+gfx|-me)?$`)

// Parse reads a profile name: "1g.10gb", with or without NVIDIA's suffixes (+me, -me,
// +gfx) and the prefixes of its resource and device names ("nvidia.com/mig-1g.10gb",
// "mig-1g.10gb", "MIG 1g.10gb"). GPUSlices comes from the tables (GPUs), 0 for a name in
// none of them. It returns an error naming the expected form when the name is not one.
func Parse(name string) (Profile, error) {
	s := strings.TrimSpace(name)
	for _, prefix := range []string{"nvidia.com/", "mig-", "MIG ", "mig "} {
		s = strings.TrimPrefix(s, prefix)
	}
	m := profileRE.FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return Profile{}, fmt.Errorf("MIG profile %q: want Ng.MMgb, e.g. 1g.10gb", name)
	}
	slices, _ := strconv.Atoi(m[1])
	mem, _ := strconv.Atoi(m[2])
	p := Profile{Name: m[0], Slices: slices, MemoryGB: mem}
	base := fmt.Sprintf("%dg.%dgb", slices, mem)
	for _, g := range GPUs {
		if g.has(base) {
			p.GPUSlices = g.Slices
			break
		}
	}
	return p, nil
}

// ComputeShare is the profile's share of the whole GPU's compute, Slices/GPUSlices
// (1/7 for 1g.10gb), and false when the GPU's slice count is unknown.
func (p Profile) ComputeShare() (float64, bool) {
	if p.GPUSlices <= 0 || p.Slices <= 0 {
		return 0, false
	}
	return float64(p.Slices) / float64(p.GPUSlices), true
}

// MemoryBytes is the memory an instance of the profile holds, bytes: MemoryGB × 10⁹ ×
// UsableMemoryFraction.
func (p Profile) MemoryBytes() float64 {
	return float64(p.MemoryGB) * 1e9 * UsableMemoryFraction
}

// GPU is one GPU product's MIG profiles.
type GPU struct {
	// Name names the products, e.g. "A100/H100 80GB".
	Name string
	// MemoryGB is the whole GPU's memory as sold, GB.
	MemoryGB int
	// Slices is the GPU's compute slices (7, or 4 on A30).
	Slices int
	// Profiles are its profiles from smallest to largest: fewest compute slices, then
	// least memory. The +me variants (the same size with media engines) are left out.
	Profiles []string
}

// GPUs are the GPUs NVIDIA's MIG user guide lists profiles for, from its "Supported MIG
// Profiles" tables (A30, A100, H100, H200, B200; H800 and A800 share the 80GB names).
var GPUs = []GPU{
	{Name: "A30 24GB", MemoryGB: 24, Slices: 4, Profiles: []string{"1g.6gb", "2g.12gb", "4g.24gb"}},
	{Name: "A100 40GB", MemoryGB: 40, Slices: 7, Profiles: []string{"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
	{Name: "A100/H100 80GB", MemoryGB: 80, Slices: 7, Profiles: []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
	{Name: "H100 94GB", MemoryGB: 94, Slices: 7, Profiles: []string{"1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"}},
	{Name: "H100 96GB (GH200), H20", MemoryGB: 96, Slices: 7, Profiles: []string{"1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"}},
	{Name: "H200 141GB", MemoryGB: 141, Slices: 7, Profiles: []string{"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
	{Name: "B200 180GB", MemoryGB: 180, Slices: 7, Profiles: []string{"1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"}},
}

func (g GPU) has(name string) bool {
	for _, p := range g.Profiles {
		if p == name {
			return true
		}
	}
	return false
}

// MemoryTolerance is how far (relative) a configured GPU memory may be from a GPU's
// memory as sold for GPUFor to pick it: 0.15 covers 80Gi (85.9 GB) for the 80 GB GPUs
// and 141Gi or the 143771 MiB that nvidia-smi reports for H200.
const MemoryTolerance = 0.15

// GPUFor returns the GPU whose profiles apply: among the GPUs that list the measured
// profile (its name without suffix; all GPUs when it is "" or listed by none), the one
// whose memory is nearest gpuBytes, the memory of one GPU in bytes (the recommender's
// --gpu-memory). Without a measured profile the nearest must be within
// MemoryTolerance; it returns false when no GPU fits.
func GPUFor(measured string, gpuBytes float64) (GPU, bool) {
	var candidates []GPU
	if p, err := Parse(measured); err == nil {
		base := fmt.Sprintf("%dg.%dgb", p.Slices, p.MemoryGB)
		for _, g := range GPUs {
			if g.has(base) {
				candidates = append(candidates, g)
			}
		}
	}
	tolerance := -1.0
	if len(candidates) == 0 {
		candidates, tolerance = GPUs, MemoryTolerance
	}
	best, bestDist := GPU{}, -1.0
	for _, g := range candidates {
		d := gpuBytes/(float64(g.MemoryGB)*1e9) - 1
		if d < 0 {
			d = -d
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = g, d
		}
	}
	if bestDist < 0 || (tolerance >= 0 && bestDist > tolerance) {
		return GPU{}, false
	}
	return best, true
}

// Smallest returns the smallest profile of the GPU (in Profiles' order) whose memory
// (Profile.MemoryBytes) is at least memoryBytes and whose share of the GPU's compute
// (Profile.ComputeShare) is at least compute, a share of the whole GPU (0–1); a negative
// value is not compared. It returns false when no profile holds both.
func (g GPU) Smallest(memoryBytes, compute float64) (Profile, bool) {
	for _, name := range g.Profiles {
		p, err := Parse(name)
		if err != nil {
			continue
		}
		p.GPUSlices = g.Slices
		share, _ := p.ComputeShare()
		if (memoryBytes < 0 || p.MemoryBytes() >= memoryBytes) && (compute < 0 || share >= compute-1e-9) {
			return p, true
		}
	}
	return Profile{}, false
}
