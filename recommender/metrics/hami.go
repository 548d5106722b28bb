package metrics

// HAMi metric names, both generations (HAMi's vGPU monitor, hami-device-plugin, port 9394).
const (
	// HAMiMemory is GPU memory used per container and device, bytes (HAMi ≥ 2.9), from
	// HAMi-core's own accounting, which includes the CUDA context.
	HAMiMemory = "hami_vgpu_memory_used_bytes"
	// HAMiUtilization is the container's utilisation of the device, percent 0–100 despite
	// its name (HAMi ≥ 2.9): the sum of per-process NVML SM utilisation; HAMi's
	// dashboards and alert examples (> 50) read it so.
	HAMiUtilization = "hami_container_device_utilization_ratio"
	// HAMiLegacyMemory is HAMiMemory's name in HAMi ≤ 2.8 (and ≥ 2.9 with
	// --legacy-metrics), bytes, labelled podnamespace, podname, ctrname, deviceuuid,
	// vdeviceid.
	HAMiLegacyMemory = "vGPU_device_memory_usage_in_bytes"
	// HAMiLegacyUtilization is HAMiUtilization's name in HAMi ≤ 2.8, percent 0–100, with
	// the legacy labels.
	HAMiLegacyUtilization = "Device_utilization_desc_of_container"
)

// HAMiLegacyLabels are HAMi ≤ 2.8's workload labels.
var HAMiLegacyLabels = Labels{Namespace: "podnamespace", Pod: "podname", Container: "ctrname"}

// HAMi reads HAMi's vGPU monitor, both generations: the hami_* names of HAMi ≥ 2.9
// (labels namespace, pod, container, device_uuid) and, where those are absent for a
// container, the legacy names of HAMi ≤ 2.8 (labels podnamespace, podname, ctrname,
// deviceuuid). Memory is in bytes, utilisation in percent (÷100 here). Devices are keyed
// by device_uuid.
var HAMi Source = gauges{
	name: "hami",
	memory: []Field{
		{Metric: HAMiMemory, Unit: UnitBytes, KeepsLastValue: true},
		{Metric: HAMiLegacyMemory, Unit: UnitBytes, Labels: &HAMiLegacyLabels, Device: []string{"deviceuuid"}, KeepsLastValue: true},
	},
	compute: []Field{
		{Metric: HAMiUtilization, Unit: UnitPercent},
		{Metric: HAMiLegacyUtilization, Unit: UnitPercent, Labels: &HAMiLegacyLabels, Device: []string{"deviceuuid"}},
	},
	device: []string{"device_uuid"},
}
