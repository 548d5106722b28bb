package metrics

// HAMi reads HAMi's vGPU monitor (hami-device-plugin's vGPU monitor, port 9394):
// hami_vgpu_memory_used_bytes (bytes, per container and device, from HAMi-core's own
// accounting, which includes the CUDA context) and
// hami_container_device_utilization_ratio (ratio 0–1 of the device's cores the
// container used). Devices are keyed by device_uuid.
var HAMi Source = gauges{
	name:       "hami",
	memory:     "hami_vgpu_memory_used_bytes",
	compute:    "hami_container_device_utilization_ratio",
	memoryMax:  MaxMemoryBytes,
	computeMax: 1,
	device:     []string{"device_uuid"},
}
