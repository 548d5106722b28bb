package metrics

// Agent reads gpufrac's own node agent (cmd/agent, docs/agent.md), which attributes
// NVML per-process data to pods: gpufrac_pod_gpu_memory_used_bytes (bytes) and
// gpufrac_pod_gpu_sm_utilization_ratio (ratio 0–1, absent on MIG where NVML has no
// per-process utilisation), both per process: equal values of two pods on one GPU are
// never read as a copied device value. Devices are keyed by UUID and, on MIG, GPU_I_ID.
var Agent Source = gauges{
	name:    "agent",
	memory:  []Field{{Metric: "gpufrac_pod_gpu_memory_used_bytes", Unit: UnitBytes, PerProcess: true}},
	compute: []Field{{Metric: "gpufrac_pod_gpu_sm_utilization_ratio", Unit: UnitRatio, PerProcess: true}},
	device:  []string{"UUID", MIGInstanceLabel},
}
