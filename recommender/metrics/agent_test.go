package metrics

import (
	"testing"

	"github.com/gpufrac/gpufrac/agent"
)

// The agent source reads the names the agent exports (agent/collector.go).
func TestAgentNamesMatchTheAgent(t *testing.T) {
	if got := Agent.Fields(SignalMemory)[0].Metric; got != agent.MetricPodMemoryUsed {
		t.Errorf("memory field %s, the agent exports %s", got, agent.MetricPodMemoryUsed)
	}
	if got := Agent.Fields(SignalCompute)[0].Metric; got != agent.MetricPodSMUtilization {
		t.Errorf("compute field %s, the agent exports %s", got, agent.MetricPodSMUtilization)
	}
	if AgentDeviceMemory != agent.MetricGPUMemoryUsed {
		t.Errorf("AgentDeviceMemory %s, the agent exports %s", AgentDeviceMemory, agent.MetricGPUMemoryUsed)
	}
}
