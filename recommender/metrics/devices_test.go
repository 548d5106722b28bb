package metrics

import (
	"testing"

	"github.com/prometheus/common/model"
)

// The agent's word on a pod's GPUs stands over an annotation's, in either order; a
// series contradicts it when it names another GPU or another MIG instance of the GPU,
// never when it names no device or the authority does not say the instance.
func TestAllocationContradicts(t *testing.T) {
	a := Allocation{}
	a.Add("ml", "p", "hami.io/vgpu-devices-allocated", "GPU-x", "")
	a.Add("ml", "p", AllocatedByAgent, "GPU-b", "3")
	a.Add("ml", "p", "hami.io/vgpu-devices-allocated", "GPU-y", "")
	a.Add("ml", "q", "hami.io/vgpu-devices-allocated", "GPU-b", "")
	if got := a[[2]string{"ml", "p"}]; got.By != AllocatedByAgent || got.String() != "GPU-b/3" {
		t.Fatalf("p: %s by %q, want GPU-b/3 by the agent only", got, got.By)
	}
	id := func(pod string) ContainerID { return ContainerID{Namespace: "ml", Pod: pod, Container: "main"} }
	for _, c := range []struct {
		pod    string
		labels model.Metric
		bad    bool
	}{
		{"p", model.Metric{"UUID": "GPU-b", MIGInstanceLabel: "3"}, false},
		{"p", model.Metric{"UUID": "GPU-b", MIGInstanceLabel: "4"}, true}, // another instance
		{"p", model.Metric{"UUID": "GPU-a"}, true},
		{"p", model.Metric{"gpu_uuid": "GPU-a"}, true}, // any UUID spelling
		{"p", model.Metric{"gpu": "0"}, false},         // names no device
		{"q", model.Metric{"device_uuid": "GPU-b", MIGInstanceLabel: "5"}, false},
		{"q", model.Metric{"deviceuuid": "GPU-c"}, true},
		{"r", model.Metric{"UUID": "GPU-z"}, false}, // no authority for the pod
	} {
		if _, _, bad := a.contradicts(id(c.pod), c.labels); bad != c.bad {
			t.Errorf("%s %v: contradicts %v, want %v", c.pod, c.labels, bad, c.bad)
		}
	}
}
