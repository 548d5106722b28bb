package updater

import (
	"errors"

	corev1 "k8s.io/api/core/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/workload"
)

// shapeReasons are the backend.UnsafeError reasons that a pod's own structure gives,
// whatever the recommendation's values: a container asking for several GPUs, several
// containers for a one-container backend, whole GPUs beside a KAI fraction, another
// scheduler, a multi-device fraction, an annotation key of the configuration that is no
// valid key. The admission webhook refuses every pod of that shape unchanged, and a
// replacement from the same template has the same shape. (A node named at creation,
// UnsafeNodeBound, is the webhook's own check before Apply, and every running pod
// names its node: not judged here.)
var shapeReasons = map[string]bool{
	backend.UnsafeMultiGPU: true, backend.UnsafeMultiContainer: true, backend.UnsafeWholeGPUNeighbour: true,
	backend.UnsafeInitContainerGPU: true, backend.UnsafeSchedulerConflict: true, backend.UnsafeMultiDevice: true,
	backend.UnsafeAnnotationKey: true,
}

// nominalMemory and nominalCompute are the values shapeRefusal writes (1 GiB, 100
// milli-GPU): valid for every backend, so only the pod's shape can make Apply refuse.
const (
	nominalMemory  = 1 << 30
	nominalCompute = 100
)

// shapeRefusal returns why the admission webhook refuses pods of pod's shape for backend
// bt whatever the recommendation says (an UnsafeError of a shapeReasons reason), or "".
// It runs the backend's own Apply on a copy of pod, with nominal values for the
// containers targets covers, as the webhook would on a replacement; backends whose
// Apply writes other objects (dra) or depends on the autoscaler in charge
// (nvidia-timeslicing, nvidia-mps) are not run, and say "". A pod the webhook changed
// before is read as it is now: Apply on it again refuses only for its shape.
func shapeRefusal(bt gpufracv1.BackendType, cfg backend.Config, pod *corev1.Pod, targets map[string]contract.Target) string {
	codec := backend.New(cfg)[bt]
	if codec == nil {
		return ""
	}
	if _, ok := codec.(backend.DryRunner); ok {
		return ""
	}
	if _, ok := codec.(backend.AutoscalerScoped); ok {
		return ""
	}
	var ts []*backend.Target
	for _, pc := range workload.Containers(pod) {
		t, ok := targets[pc.Container.Name]
		if !ok || pc.Type == gpufracv1.ContainerTypeInit || !t.ControlsMemory && !t.ControlsCompute {
			continue
		}
		bt := &backend.Target{Container: pc.Container.Name, Init: pc.InitList(), Index: pc.Index, WrittenComputeMilli: -1,
			HasMemory: t.ControlsMemory, MemoryBytes: nominalMemory, HasCompute: t.ControlsCompute, ComputeMilli: nominalCompute}
		bt.SharingMode = t.SharingMode
		ts = append(ts, bt)
	}
	if len(ts) == 0 {
		return ""
	}
	_, err := codec.Apply(pod.DeepCopy(), ts)
	var unsafe *backend.UnsafeError
	if errors.As(err, &unsafe) && shapeReasons[unsafe.Reason] {
		return "the admission webhook refuses pods of this shape (" + unsafe.Reason + ": " + unsafe.Message + "), so a replacement would come back unchanged"
	}
	return ""
}

// shapeGate: a pod of a shape the admission webhook refuses whatever the recommendation
// says (shapeRefusal): replacing it would bring the same pod back, for any change,
// protective growth included (SkipReplacementUnchanged).
func (u *Updater) shapeGate(c *candidate) (string, string) {
	if msg := shapeRefusal(c.p.backend, u.Config.Backend, c.pod, c.p.targets); msg != "" {
		return SkipReplacementUnchanged, msg
	}
	return "", ""
}
