package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names the agent exports. Per-pod metrics carry the labels namespace, pod,
// container, UUID, gpu and GPU_I_ID; device metrics UUID, gpu, GPU_I_ID, modelName
// and GPU_I_PROFILE. GPU_I_ID and GPU_I_PROFILE are empty (absent in Prometheus) for
// a whole GPU.
const (
	// MetricPodMemoryUsed is the GPU memory a container's processes use on one GPU
	// or MIG instance, bytes.
	MetricPodMemoryUsed = "gpufrac_pod_gpu_memory_used_bytes"
	// MetricPodSMUtilization is the share of the sampling interval the SMs of one
	// GPU ran a container's kernels, ratio 0–1; never exported for MIG instances.
	MetricPodSMUtilization = "gpufrac_pod_gpu_sm_utilization_ratio"
	// MetricGPUMemoryTotal is a GPU's (MIG instance's) framebuffer memory, bytes.
	MetricGPUMemoryTotal = "gpufrac_gpu_memory_total_bytes"
	// MetricGPUMemoryUsed is the framebuffer memory in use on a GPU (MIG instance) by
	// any process, attributed or not, bytes.
	MetricGPUMemoryUsed = "gpufrac_gpu_memory_used_bytes"
	// MetricUp is 1 when NVML is initialised and the last cycle, no older than
	// StaleAfter, enumerated the devices; else 0.
	MetricUp = "gpufrac_agent_up"
	// MetricUnattributed is the number of GPU processes of the last cycle that belong
	// to no known container, by reason.
	MetricUnattributed = "gpufrac_agent_unattributed_processes"
	// MetricUtilizationSupported is 1 when per-process SM utilisation is available
	// on a device, 0 where it is not (MIG instances): the utilisation series of its
	// pods are then absent, not 0.
	MetricUtilizationSupported = "gpufrac_agent_process_utilization_supported"
	// MetricLastSample is the Unix time of the last sampling cycle, seconds.
	MetricLastSample = "gpufrac_agent_last_sample_timestamp_seconds"
	// MetricInfo is 1, labelled with the agent's mode and the NVIDIA driver version.
	MetricInfo = "gpufrac_agent_info"
)

var (
	podLabels    = []string{"namespace", "pod", "container", "UUID", "gpu", "GPU_I_ID"}
	deviceLabels = []string{"UUID", "gpu", "GPU_I_ID", "modelName", "GPU_I_PROFILE"}

	descPodMemory = prometheus.NewDesc(MetricPodMemoryUsed,
		"GPU memory used by the container's processes on this GPU or MIG instance (NVML per-process usedGpuMemory, summed), bytes.", podLabels, nil)
	descPodSM = prometheus.NewDesc(MetricPodSMUtilization,
		"Share of the sampling interval the GPU's SMs ran the container's kernels (NVML per-process SmUtil / 100, summed, capped at 1), ratio 0-1. Absent for MIG instances.", podLabels, nil)
	descGPUMemTotal = prometheus.NewDesc(MetricGPUMemoryTotal,
		"Framebuffer memory of the GPU or MIG instance (nvmlDeviceGetMemoryInfo total), bytes.", deviceLabels, nil)
	descGPUMemUsed = prometheus.NewDesc(MetricGPUMemoryUsed,
		"Framebuffer memory in use on the GPU or MIG instance by any process (nvmlDeviceGetMemoryInfo used), bytes.", deviceLabels, nil)
	descUtilSupported = prometheus.NewDesc(MetricUtilizationSupported,
		"1 when NVML gives per-process SM utilisation on the device, 0 where it does not (MIG instances); then no utilisation series is exported for its pods.", []string{"UUID", "gpu", "GPU_I_ID"}, nil)
	descUp = prometheus.NewDesc(MetricUp,
		"1 when NVML is initialised and the last sampling cycle (not stale) enumerated the GPUs, else 0.", nil, nil)
	descUnattributed = prometheus.NewDesc(MetricUnattributed,
		"GPU processes of the last cycle that belong to no known Kubernetes container, by reason (host, unknown_pod, unknown_container, unreadable).", []string{"reason"}, nil)
	descLastSample = prometheus.NewDesc(MetricLastSample,
		"Unix time of the last sampling cycle, seconds.", nil, nil)
	descInfo = prometheus.NewDesc(MetricInfo,
		"Always 1: the agent's mode (nvml or simulate) and the NVIDIA driver version.", []string{"mode", "driver_version"}, nil)
)

// unattributedReasons are always exported (as 0 when none), so alerts need no absent().
var unattributedReasons = []string{ReasonHost, ReasonUnknownPod, ReasonUnknownContainer, ReasonUnreadable}

// Describe implements prometheus.Collector.
func (s *Sampler) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPodMemory, descPodSM, descGPUMemTotal, descGPUMemUsed, descUtilSupported, descUp, descUnattributed, descLastSample, descInfo} {
		ch <- d
	}
	s.nvmlErrors.Describe(ch)
	s.vanished.Describe(ch)
	s.duration.Describe(ch)
}

// Collect implements prometheus.Collector: it exports the latest snapshot (nothing
// of it when stale or failed) and the agent's health metrics.
func (s *Sampler) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	snap, initialized, driver := s.snap, s.initialized, s.driver
	s.mu.Unlock()
	fresh := snap.OK && s.cfg.Now().Sub(snap.Time) <= s.cfg.StaleAfter
	up := 0.0
	if initialized && fresh {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, s.cfg.Mode, driver)
	if !snap.Time.IsZero() {
		ch <- prometheus.MustNewConstMetric(descLastSample, prometheus.GaugeValue, float64(snap.Time.UnixNano())/1e9)
	}
	s.nvmlErrors.Collect(ch)
	s.vanished.Collect(ch)
	s.duration.Collect(ch)
	if !fresh {
		return
	}
	for _, r := range unattributedReasons {
		ch <- prometheus.MustNewConstMetric(descUnattributed, prometheus.GaugeValue, float64(snap.Unattributed[r]), r)
	}
	for r, n := range snap.Unattributed {
		if !isDefaultReason(r) {
			ch <- prometheus.MustNewConstMetric(descUnattributed, prometheus.GaugeValue, float64(n), r)
		}
	}
	for i := range snap.Devices {
		d := &snap.Devices[i]
		gpu, gi := strconv.Itoa(d.Index), d.GPUInstanceLabel()
		supported := 0.0
		if d.UtilizationSupported {
			supported = 1
		}
		ch <- prometheus.MustNewConstMetric(descUtilSupported, prometheus.GaugeValue, supported, d.UUID, gpu, gi)
		if d.MemoryKnown {
			ch <- prometheus.MustNewConstMetric(descGPUMemTotal, prometheus.GaugeValue, float64(d.MemoryTotalBytes), d.UUID, gpu, gi, d.Model, d.Profile)
			ch <- prometheus.MustNewConstMetric(descGPUMemUsed, prometheus.GaugeValue, float64(d.MemoryUsedBytes), d.UUID, gpu, gi, d.Model, d.Profile)
		}
	}
	for i := range snap.Usage {
		u := &snap.Usage[i]
		gpu, gi := strconv.Itoa(u.Device.Index), u.Device.GPUInstanceLabel()
		if u.MemoryKnown {
			ch <- prometheus.MustNewConstMetric(descPodMemory, prometheus.GaugeValue, float64(u.MemoryBytes), u.Namespace, u.Pod, u.Container, u.Device.UUID, gpu, gi)
		}
		if u.SMKnown {
			ch <- prometheus.MustNewConstMetric(descPodSM, prometheus.GaugeValue, u.SMRatio, u.Namespace, u.Pod, u.Container, u.Device.UUID, gpu, gi)
		}
	}
}

func isDefaultReason(r string) bool {
	for _, d := range unattributedReasons {
		if r == d {
			return true
		}
	}
	return false
}
