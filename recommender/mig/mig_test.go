package mig

import (
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in                       string
		name                     string
		slices, memGB, gpuSlices int
		share                    float64
		known                    bool
	}{
		{"1g.10gb", "1g.10gb", 1, 10, 7, 1.0 / 7, true},
		{"nvidia.com/mig-3g.40gb", "3g.40gb", 3, 40, 7, 3.0 / 7, true},
		{"MIG 1g.18gb+me", "1g.18gb+me", 1, 18, 7, 1.0 / 7, true},
		{"2g.12gb", "2g.12gb", 2, 12, 4, 0.5, true}, // A30: 4 slices
		{"7g.141gb", "7g.141gb", 7, 141, 7, 1, true},
		{"5g.50gb", "5g.50gb", 5, 50, 0, 0, false}, // in no table: share unknown
	} {
		p, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if p.Name != c.name || p.Slices != c.slices || p.MemoryGB != c.memGB || p.GPUSlices != c.gpuSlices {
			t.Errorf("Parse(%q) = %+v, want %s %d slices %d GB of a %d-slice GPU", c.in, p, c.name, c.slices, c.memGB, c.gpuSlices)
		}
		if share, ok := p.ComputeShare(); ok != c.known || share != c.share {
			t.Errorf("%s: share %v %v, want %v %v", c.in, share, ok, c.share, c.known)
		}
	}
	for _, bad := range []string{"", "gpu", "0g.10gb", "1g.10", "1g.10gb.x", "1g.-5gb", "10gb"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

func TestGPUFor(t *testing.T) {
	const gi = 1 << 30
	for _, c := range []struct {
		measured string
		gpuBytes float64
		want     string
	}{
		{"", 80 * gi, "A100/H100 80GB"},        // the recommender's default --gpu-memory
		{"", 141 * gi, "H200 141GB"},           // 151 GB: within 15 %
		{"", 143771 * (1 << 20), "H200 141GB"}, // what nvidia-smi reports
		{"", 40 * gi, "A100 40GB"},
		{"1g.18gb", 80 * gi, "H200 141GB"}, // the measured profile decides
		{"1g.10gb", 40 * gi, "A100 40GB"},  // listed by both A100s: the nearest memory
		{"1g.10gb", 80 * gi, "A100/H100 80GB"},
		{"9g.99gb", 80 * gi, "A100/H100 80GB"}, // unknown profile: the configured GPU
	} {
		g, ok := GPUFor(c.measured, c.gpuBytes)
		if !ok || g.Name != c.want {
			t.Errorf("GPUFor(%q, %.0f) = %q %v, want %q", c.measured, c.gpuBytes, g.Name, ok, c.want)
		}
	}
	if g, ok := GPUFor("", 16*gi); ok {
		t.Errorf("GPUFor 16Gi = %q: no MIG-capable GPU has 16 GB", g.Name)
	}
}

func TestSmallest(t *testing.T) {
	const gi = 1 << 30
	h200, _ := GPUFor("", 141*gi)
	h100, _ := GPUFor("", 80*gi)
	for _, c := range []struct {
		gpu      GPU
		mem, cpu float64
		want     string
	}{
		{h200, 15 * gi, 0.1, "1g.18gb"},    // 16.1 GB ≤ 17.1 GB
		{h200, 17 * gi, 0.1, "1g.35gb"},    // 18.3 GB: over 1g.18gb
		{h200, 10 * gi, 0.2, "2g.35gb"},    // more than 1/7 of the GPU
		{h200, 100 * gi, 0.2, "7g.141gb"},  // 107 GB: over 4g.71gb
		{h100, 8 * gi, 1.0 / 7, "1g.10gb"}, // exactly one slice; 8.6 GB ≤ 9.5 GB
		{h100, 9 * gi, 0.5, "4g.40gb"},
		{h100, -1, 0.3, "3g.40gb"},     // compute only
		{h100, 30 * gi, -1, "3g.40gb"}, // memory only: 32 GB
	} {
		p, ok := c.gpu.Smallest(c.mem, c.cpu)
		if !ok || p.Name != c.want {
			t.Errorf("%s.Smallest(%.0f, %.3f) = %q %v, want %q", c.gpu.Name, c.mem, c.cpu, p.Name, ok, c.want)
		}
	}
	if p, ok := h100.Smallest(90*gi, 0.1); ok {
		t.Errorf("90Gi fits %s on an 80 GB GPU", p.Name)
	}
}
