package metrics

// KAI reads the NVIDIA KAI scheduler's gpu-fractioning metrics:
// gpu_fractioning_gpu_memory_used_bytes (bytes per pod container) and
// gpu_fractioning_gpu_sm_utilization_percent (percent 0–100, divided by 100 here).
// Devices are keyed by UUID.
var KAI Source = gauges{
	name:         "kai",
	memory:       "gpu_fractioning_gpu_memory_used_bytes",
	compute:      "gpu_fractioning_gpu_sm_utilization_percent",
	computeScale: " / 100",
	memoryMax:    MaxMemoryBytes,
	computeMax:   100,
	device:       []string{"UUID"},
}
