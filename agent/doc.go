// Package agent is gpufrac's node agent: it reads per-process GPU memory and SM
// utilisation from NVML (through go-nvml's nvml.Interface, so a fake can stand in),
// maps each process to its Kubernetes container through /proc/<pid>/cgroup and a pod
// informer, and exports per-pod metrics for Prometheus.
//
// The pieces: Sampler reads NVML every Config.Interval, attributes processes with an
// Attributor (ProcAttributor: cgroup path, ParseCgroup, then PodLookup, implemented
// by PodIndex) and publishes a Snapshot; it is also the prometheus.Collector that
// exports the latest Snapshot. Package agent/fakenvml provides a fake NVML driven
// by a trace, and an Attributor that maps fake processes to live pods.
//
// Units: memory in bytes, utilisation as a ratio 0–1, times in seconds.
package agent
