package metrics

import (
	"time"
)

// dcgm-exporter field names (dcgm-exporter's default counters CSV).
const (
	// DCGMFBUsed is framebuffer memory used, MiB.
	DCGMFBUsed = "DCGM_FI_DEV_FB_USED"
	// DCGMGPUUtil is GPU utilisation, percent 0–100 ("a kernel was running").
	DCGMGPUUtil = "DCGM_FI_DEV_GPU_UTIL"
	// DCGMSMActive is the ratio 0–1 of cycles an SM had a warp resident (profiling field).
	DCGMSMActive = "DCGM_FI_PROF_SM_ACTIVE"
	// DCGMGREngineActive is the ratio 0–1 of time the graphics engine was active.
	DCGMGREngineActive = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
)

// MiB is bytes per mebibyte; DCGM reports framebuffer fields in MiB.
const MiB = 1 << 20

// DCGM reads dcgm-exporter's metrics. Compute comes from DCGM_FI_PROF_SM_ACTIVE when
// present, else DCGM_FI_PROF_GR_ENGINE_ACTIVE, else DCGM_FI_DEV_GPU_UTIL/100; the chosen
// field is reported per container through SourceLabel. Several series of one container
// (several GPUs, or one GPU seen by two exporter instances) are merged with max, never
// summed, because dcgm-exporter copies device-wide values to every pod of a shared GPU.
type DCGM struct{}

// Name returns "dcgm".
func (DCGM) Name() string { return "dcgm" }

// MemoryMetric returns DCGM_FI_DEV_FB_USED.
func (DCGM) MemoryMetric() string { return DCGMFBUsed }

// DeviceLabels are UUID and, on MIG, GPU_I_ID and GPU_I_PROFILE: a MIG instance is keyed
// by the first two; its profile says what share of the GPU it is.
func (DCGM) DeviceLabels() []string { return dcgm.device }

// MIG labels of dcgm-exporter (and of gpufrac's agent device series).
const (
	// MIGInstanceLabel is the MIG GPU instance ID label.
	MIGInstanceLabel = "GPU_I_ID"
	// MIGProfileLabel is the MIG GPU instance profile label, e.g. "1g.10gb".
	MIGProfileLabel = "GPU_I_PROFILE"
)

// dcgm are dcgm-exporter's fields with their published units.
var dcgm = gauges{
	name:   "dcgm",
	memory: []Field{{Metric: DCGMFBUsed, Unit: UnitMiB}},
	// The profiling fields are ratios of the GPU instance on MIG (NVIDIA/DCGM#138: a
	// saturated 1g.10gb reads 1); GPU_UTIL is not supported there (DropMIGUnsupported).
	compute: []Field{
		{Metric: DCGMSMActive, Unit: UnitRatio, InstanceRelative: true},
		{Metric: DCGMGREngineActive, Unit: UnitRatio, InstanceRelative: true},
		{Metric: DCGMGPUUtil, Unit: UnitPercent, LowFidelity: true},
	},
	device: []string{"UUID", MIGInstanceLabel, MIGProfileLabel},
}

// Fields returns FB_USED (MiB) for memory; SM_ACTIVE (ratio), GR_ENGINE_ACTIVE (ratio)
// and GPU_UTIL (percent) for compute.
func (DCGM) Fields(signal Signal) []Field { return dcgm.Fields(signal) }

// MemoryPeakQuery returns the peak of DCGM_FI_DEV_FB_USED over the window, in bytes.
func (DCGM) MemoryPeakQuery(sel Selector, window time.Duration) string {
	return dcgm.MemoryPeakQuery(sel, window)
}

// ComputeQuery returns the mean activity over the window as a ratio 0–1, from the
// highest-fidelity field that exists for each container.
func (DCGM) ComputeQuery(sel Selector, window time.Duration) string {
	return dcgm.ComputeQuery(sel, window)
}
