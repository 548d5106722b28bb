package metrics

import (
	"fmt"
	"strings"
	"time"
)

// AgentDeviceMemory is the agent's per-device series (agent.MetricGPUMemoryUsed: memory
// in use on a GPU by any process, bytes), exported every sampling cycle for each GPU the
// agent watches; labels UUID, gpu, GPU_I_ID (set on MIG instances).
const AgentDeviceMemory = "gpufrac_gpu_memory_used_bytes"

// AgentCoverage is the span at the start and at the end of a window in which the agent
// must have reported a GPU for it to have watched the GPU through the window: 5 minutes,
// Prometheus' default lookback delta (a series not scraped for that long is stale).
const AgentCoverage = 5 * time.Minute

// ContradictedQuery returns PromQL whose result, per (namespace, pod, container, device)
// in the selector's names, is 1 where the source's memory series of the window is
// contradicted by the gpufrac agent: the agent watched the series' GPU through the window
// (reported it, as a whole GPU, within AgentCoverage of the window's start and of its
// end) and reported no process of that pod on it (no memory nor utilisation series of the
// pod on that UUID) within the window. A per-container value of an exporter that
// outlives its process (HAMi's hami_vgpu_memory_used_bytes stays at its last value) is
// then stale (issue 13 kind 8). MIG instances are never contradicted: NVML's per-process
// memory on MIG needs privileges the agent may not have, so its silence there proves
// nothing. It returns "" for the agent itself and for a source without a device label.
func ContradictedQuery(src Source, sel Selector, window time.Duration) string {
	if src.Name() == Agent.Name() || len(sel.Device) == 0 {
		return ""
	}
	uuid := sel.Device[0]
	ns, pod := sel.Labels.Namespace, sel.Labels.Pod
	// The agent's pods on each GPU, read like any of its series (exported_* labels too).
	asel := sel
	asel.Device = Agent.DeviceLabels()
	var seen []string
	for _, sig := range []Signal{SignalMemory, SignalCompute} {
		for _, f := range Agent.Fields(sig) {
			seen = append(seen, fmt.Sprintf("max by (%s, %s, UUID) (%s)", ns, pod, f.query(asel, "count_over_time", window)))
		}
	}
	// GPUs the agent watched at the window's start and at its end.
	cover := min(window, AgentCoverage)
	dev := fmt.Sprintf(`%s{GPU_I_ID=""}`, AgentDeviceMemory)
	watched := fmt.Sprintf("max by (UUID) (present_over_time(%s[%s]))", dev, promDuration(cover))
	if window > cover {
		watched += fmt.Sprintf(" and on (UUID) max by (UUID) (present_over_time(%s[%s] offset %s))", dev, promDuration(cover), promDuration(window-cover))
	}
	var parts []string
	for _, f := range src.Fields(SignalMemory) {
		q := f.query(sel, "max_over_time", window)
		if uuid != "UUID" {
			q = fmt.Sprintf(`label_replace(%s, "UUID", "$1", %q, "(.+)")`, q, uuid)
		}
		parts = append(parts, fmt.Sprintf("(%s) * 0 + 1", q))
	}
	keys := strings.Join(sel.keys(), ", ")
	return fmt.Sprintf("max by (%s) (((%s) unless on (%s, %s, UUID) (%s)) and on (UUID) (%s))",
		keys, strings.Join(parts, " or on ("+keys+") "), ns, pod, strings.Join(seen, " or "), watched)
}
