package policy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Issue 16 item 3: the smallest MIG profile that holds a recommendation, for the GPU of
// the measured profile or of --gpu-memory, with the target against the measured
// profile (issue 13 kind 5).
func TestMIGAdvice(t *testing.T) {
	const gi = 1 << 30
	rec := func(mem, cpu string) gpufracv1.ContainerRecommendation {
		var r gpufracv1.ContainerRecommendation
		if mem != "" {
			q := resource.MustParse(mem)
			r.Target.Memory = &q
		}
		if cpu != "" {
			q := resource.MustParse(cpu)
			r.Target.Compute = &q
		}
		return r
	}
	for _, c := range []struct {
		name      string
		gpuBytes  float64
		rec       gpufracv1.ContainerRecommendation
		measured  string
		gpu, want string
		ofProfile string // ComputeOfProfile, "" for none
		memPct    int32  // MemoryPercentOfProfile, 0 for none
		note      string // in the reason
	}{
		{"H200 by --gpu-memory", 141 * gi, rec("12Gi", "100m"), "", "H200 141GB", "1g.18gb", "", 0, "advice only"},
		{"80GB by default", 0, rec("12Gi", "100m"), "", "A100/H100 80GB", "1g.20gb", "", 0, "alternative to time-slicing"},
		{"compute over one slice", 0, rec("4Gi", "200m"), "", "A100/H100 80GB", "2g.20gb", "", 0, "2/7"},
		{"measured on 1g.10gb", 0, rec("8Gi", "129m"), "1g.10gb", "A100/H100 80GB", "1g.10gb", "903m", 90, ""},
		{"measured on H200 whatever --gpu-memory", 0, rec("20Gi", "300m"), "3g.71gb", "H200 141GB", "3g.71gb", "700m", 32, ""},
		{"unknown profile", 0, rec("8Gi", "100m"), "5g.50gb", "A100/H100 80GB", "1g.10gb", "", 18, "in none of NVIDIA's tables"},
		{"not a profile", 0, rec("8Gi", "100m"), "weird", "A100/H100 80GB", "1g.10gb", "", 0, "not a MIG profile name"},
		{"too big", 0, rec("79Gi", "900m"), "", "A100/H100 80GB", "", "", 0, "more than the largest instance"},
		{"the whole GPU only", 0, rec("46700Mi", "230m"), "", "A100/H100 80GB", "7g.80gb", "", 0, "no alternative to sharing the GPU by time"},
		{"no MIG GPU of that size", 16 * gi, rec("8Gi", "100m"), "", "", "", "", 0, "no MIG-capable GPU"},
	} {
		got := Config{GPUMemoryBytes: c.gpuBytes}.MIG(c.rec, c.measured)
		if got == nil {
			t.Errorf("%s: no MIG advice", c.name)
			continue
		}
		if got.GPU != c.gpu || got.SmallestProfile != c.want || got.MeasuredProfile != c.measured {
			t.Errorf("%s: %q of %q measured %q, want %q of %q", c.name, got.SmallestProfile, got.GPU, got.MeasuredProfile, c.want, c.gpu)
		}
		if (got.ComputeOfProfile == nil) != (c.ofProfile == "") || (got.ComputeOfProfile != nil && got.ComputeOfProfile.String() != c.ofProfile) {
			t.Errorf("%s: compute of profile %v, want %q", c.name, got.ComputeOfProfile, c.ofProfile)
		}
		if (got.MemoryPercentOfProfile == nil) != (c.memPct == 0) || (got.MemoryPercentOfProfile != nil && *got.MemoryPercentOfProfile != c.memPct) {
			t.Errorf("%s: memory %% of profile %v, want %d", c.name, got.MemoryPercentOfProfile, c.memPct)
		}
		if !strings.Contains(got.Reason, c.note) || (c.want != "" && !strings.Contains(got.Reason, c.want)) {
			t.Errorf("%s: reason %q, want it to say %q and name %q", c.name, got.Reason, c.note, c.want)
		}
	}
	if got := (Config{}).MIG(rec("", ""), "1g.10gb"); got != nil {
		t.Errorf("no target: MIG %+v, want none", got)
	}
}
