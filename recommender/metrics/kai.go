package metrics

// KAI gpu-fractioning metrics daemon names.
const (
	// KAIMemory is GPU memory used per pod, bytes.
	KAIMemory = "gpu_fractioning_gpu_memory_used_bytes"
	// KAIUtilization is the pod's SM utilisation, percent 0–100.
	KAIUtilization = "gpu_fractioning_gpu_sm_utilization_percent"
)

// KAI reads the NVIDIA KAI scheduler's gpu-fractioning metrics daemon:
// gpu_fractioning_gpu_memory_used_bytes (bytes) and
// gpu_fractioning_gpu_sm_utilization_percent (percent 0–100, ÷100 here). Labels are
// namespace, pod, pod_uuid, gpu_uuid and gpu: there is no container label (one a scrape
// target adds is removed: Field.NoContainer), so series come back with an empty
// container and the recommender attributes them to the pod's GPU container
// (recommender.feed). Devices are keyed by gpu_uuid.
var KAI Source = gauges{
	name:    "kai",
	memory:  []Field{{Metric: KAIMemory, Unit: UnitBytes, KeepsLastValue: true, NoContainer: true}},
	compute: []Field{{Metric: KAIUtilization, Unit: UnitPercent, NoContainer: true}},
	device:  []string{"gpu_uuid"},
}
