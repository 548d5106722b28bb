package updater

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/workload"
)

// SharedGPU is one GPU of a node that pods share (a HAMi device, or a KAI GPU group),
// with what is left of it.
type SharedGPU struct {
	// ID is the device's UUID (HAMi) or the GPU group (KAI's runai-gpu-group label).
	ID string
	// FreeMemory is the device's memory minus the memory allocated to pods on it, bytes.
	FreeMemory int64
	// FreeSlots is how many more pods the device takes (HAMi's split count minus its
	// allocations; KAI limits a shared GPU by memory only: unlimitedSlots).
	FreeSlots int64
	// MemoryBytes is the device's memory, bytes (HAMi's registered devmem; for KAI the
	// node's GPU memory).
	MemoryBytes int64
	// Tenants are the pods bound to the device with the memory each takes of it
	// (nodeCapacity; consolidation reads them).
	Tenants []DeviceTenant
}

// DeviceTenant is one pod on a shared GPU.
type DeviceTenant struct {
	// UID is the pod's UID.
	UID types.UID
	// MemoryBytes is the memory of the device allocated to the pod, bytes (all its
	// containers on the device).
	MemoryBytes int64
	// ComputeMilli is the compute of the device allocated to the pod, milli-GPU (HAMi's
	// usedcores × 10, all its containers on the device; 0 where not partitioned).
	ComputeMilli int64
	// Created is the pod's creation time.
	Created time.Time
}

// unlimitedSlots are the FreeSlots of a device that limits its pods by memory only.
const unlimitedSlots = math.MaxInt32

// NodeGPUs is what one node has left for a replacement pod.
type NodeGPUs struct {
	// Name is the node's name.
	Name string
	// FreeGPUs is the node's allocatable GPU resource (Config.Backend.GPUResource:
	// whole GPUs, or the device plugin's shares) minus what the non-terminal pods bound
	// to it request, the pod to be replaced included.
	FreeGPUs int64
	// Shared are the node's shared GPUs: HAMi's registered devices, or the GPU groups of
	// the KAI fractions bound to the node; nil when the node does not say.
	Shared []SharedGPU
	// GPUMemory is the memory of one of the node's GPUs, bytes: NVIDIA GPU feature
	// discovery's nvidia.com/gpu.memory label (MiB), else the webhook's --gpu-memory. A
	// replacement that opens a new shared GPU must fit it.
	GPUMemory int64
	// node is the node itself (nodeCapacity; nil when built otherwise): consolidation
	// checks a pod's node selector, affinity and taints against it (runsOn).
	node *corev1.Node
}

// Replacement is what a replacement pod needs on one node.
type Replacement struct {
	// GPUs is how much of the GPU resource it requests (0: none, e.g. KAI fractions).
	GPUs int64
	// SharedMemory is the memory it needs on one shared GPU, bytes (0: the backend
	// writes no shared-GPU size). HAMi's gpumem and KAI's gpu-memory or gpu-fraction are
	// such sizes.
	SharedMemory int64
	// OpensDevice is true when a free GPU of the resource can also take the replacement
	// as a new shared GPU (KAI puts a fraction on a whole GPU no fraction uses yet); a
	// node then needs a shared GPU with SharedMemory free or one GPU free with at least
	// GPUMemory. Otherwise (HAMi) a replacement needing SharedMemory goes only to a
	// registered device, and to nodes that list none only when no node lists any.
	OpensDevice bool
}

// Placeable returns the index of the first node of nodes that can hold a replacement
// needing r, or -1 and why none can: the node must have r.GPUs of the GPU resource free
// and, where r.SharedMemory is set, one shared GPU with that much memory and a slot free
// (Replacement.OpensDevice: or a free GPU that large). Where no node lists shared GPUs
// (no HAMi registration, no KAI fraction) the GPU resource alone decides for HAMi. A
// replacement that needs nothing is placeable anywhere (index 0, or -1 with no message
// when nodes is empty). It is a necessary condition, not the scheduler: the caller
// passes only the nodes the pod may run on (placementGate: runnable), and preferences,
// pod affinity and topology spread are not checked.
func Placeable(r Replacement, nodes []NodeGPUs) (int, string) {
	if r.GPUs <= 0 && r.SharedMemory <= 0 {
		if len(nodes) == 0 {
			return -1, ""
		}
		return 0, ""
	}
	listed := slices.ContainsFunc(nodes, func(n NodeGPUs) bool { return n.Shared != nil })
	var most mostFree
	gpusFree := false
	for i, n := range nodes {
		if r.GPUs > 0 && n.FreeGPUs < r.GPUs {
			continue
		}
		gpusFree = true
		if r.fits(n, listed, &most) {
			return i, ""
		}
	}
	switch {
	case !gpusFree:
		return -1, fmt.Sprintf("no node has %d of the GPU resource free (allocatable minus the requests of the pods bound to it)", r.GPUs)
	case r.OpensDevice:
		return -1, fmt.Sprintf("no shared GPU has %s free (%s) and no node has a free GPU that large to share", fmtBytes(r.SharedMemory), most)
	case most.gpu == "":
		return -1, fmt.Sprintf("no shared GPU has a free slot for %s", fmtBytes(r.SharedMemory))
	}
	return -1, fmt.Sprintf("no shared GPU has %s free (%s)", fmtBytes(r.SharedMemory), most)
}

// mostFree is the shared GPU with the most memory free among those with a slot.
type mostFree struct {
	memory int64
	gpu    string // "node/ID"; "" none
}

// String renders "most: 2Gi on node/GPU-1" (or "none with a free slot").
func (m mostFree) String() string {
	if m.gpu == "" {
		return "none with a free slot"
	}
	return "most: " + fmtBytes(m.memory) + " on " + m.gpu
}

// fits reports whether node n, whose GPU resource was checked, can hold r; listed says
// whether any node lists shared GPUs. It notes n's emptiest shared GPU in most.
func (r Replacement) fits(n NodeGPUs, listed bool, most *mostFree) bool {
	if r.SharedMemory <= 0 || (n.Shared == nil && !listed && !r.OpensDevice) {
		return true
	}
	if fittingDevice(n.Shared, r.SharedMemory) >= 0 {
		return true
	}
	if r.OpensDevice && n.FreeGPUs >= 1 && n.GPUMemory >= r.SharedMemory {
		return true
	}
	for _, d := range n.Shared {
		if d.FreeSlots >= 1 && (most.gpu == "" || d.FreeMemory > most.memory) {
			most.memory, most.gpu = d.FreeMemory, n.Name+"/"+d.ID
		}
	}
	return false
}

// fittingDevice returns the index of the first shared GPU with a slot and memory bytes
// free, or -1.
func fittingDevice(shared []SharedGPU, memory int64) int {
	for j, d := range shared {
		if d.FreeSlots >= 1 && d.FreeMemory >= memory {
			return j
		}
	}
	return -1
}

// readCapacity reads the cluster's free GPU capacity once per cycle (nodeCapacity), less
// the replacements awaited that are not bound yet (reservePending).
func (cy *cycle) readCapacity(ctx context.Context, u *Updater) {
	if cy.capacityRead {
		return
	}
	cy.capacity, cy.capacityRead = nodeCapacity(ctx, u.apiReader(), u.Config.Backend), true
	if cy.capacity != nil {
		u.reservePending(ctx, cy)
	}
}

// placementGate checks, before c's pod is evicted, that its replacement can be placed
// (Placeable) on the cycle's free capacity (nodeCapacity, read once per cycle, less the
// replacements awaited that are not bound yet: reservePending): the
// ReplicaSet creates the replacement while the pod still holds its GPU, and a
// replacement left Pending serves nothing. It returns the node index and the need to
// reserve after the eviction, and false when the pod is kept (SkipNoCapacity on c, a
// ReplacementUnplaceable event once per autoscaler while the cause stays the same).
// With Config.NoPlacementCheck, or when the capacity is unknown, every pod passes.
func (u *Updater) placementGate(ctx context.Context, cy *cycle, c *candidate) (int, Replacement, bool) {
	if u.Config.NoPlacementCheck {
		return -1, Replacement{}, true
	}
	cy.readCapacity(ctx, u)
	if cy.capacity == nil {
		return -1, Replacement{}, true
	}
	p := c.p
	repl := replacementNeed(c.pod, c.alloc, p.gfa, p.targets, p.backend, u.Config.Backend, p.overhead, cy.now)
	// Only the nodes the replacement may run on (its node selector, affinity and taints),
	// and for consolidation not the GPU it leaves.
	nodes, index := runnable(cy.capacity, c.pod)
	if c.need.Consolidate {
		nodes = without(nodes, c.drain)
	}
	if ownNodeOnly(c.pod) {
		// A DaemonSet's replacement runs on the pod's node, never elsewhere.
		var on []int
		nodes, on = onNode(nodes, c.pod.Spec.NodeName)
		for i, j := range on {
			on[i] = index[j]
		}
		index = on
	}
	if c.releases = u.replacedOnceGone(ctx, c.pod); c.releases {
		// The replacement comes once the pod is gone: what the pod holds is free for it.
		nodes = released(nodes, c.pod, u.Config.Backend)
	}
	at, why := Placeable(repl, nodes)
	if at >= 0 {
		at = index[at]
	}
	if at >= 0 || why == "" {
		return at, repl, true
	}
	if ownNodeOnly(c.pod) {
		why = fmt.Sprintf("its DaemonSet runs it on node %s only: %s", c.pod.Spec.NodeName, why)
	}
	c.skip(SkipNoCapacity, fmt.Sprintf("the replacement of pod %s could not be placed: %s; the pod is kept", c.pod.Name, why))
	p.unplaceable = true
	// One note per autoscaler while the cause stays the same, whichever pod.
	u.eventOnce(p.gfa, "unplaceable", corev1.EventTypeWarning, EventReplacementUnplaceable, "Evict",
		"replacements could not be placed: "+why+"; out-of-date pods are kept until there is room")
	klog.FromContext(ctx).Info("Replacement cannot be placed; pod kept", "autoscaler", klog.KObj(p.gfa), "pod", klog.KObj(c.pod), "reason", why)
	return -1, repl, false
}

// without returns nodes without the shared GPU d (a copy where d is on one of them).
func without(nodes []NodeGPUs, d drainOf) []NodeGPUs {
	out := slices.Clone(nodes)
	for i := range out {
		if out[i].Name == d.node {
			out[i].Shared = slices.DeleteFunc(slices.Clone(out[i].Shared), func(g SharedGPU) bool { return g.ID == d.gpu })
		}
	}
	return out
}

// runnable returns the nodes of nodes that pod's replacement may run on (runsOn: node
// selector, required node affinity, taints) and, for each, its index in nodes.
func runnable(nodes []NodeGPUs, pod *corev1.Pod) ([]NodeGPUs, []int) {
	out, index := make([]NodeGPUs, 0, len(nodes)), make([]int, 0, len(nodes))
	for i := range nodes {
		if runsOn(pod, nodes[i].node) {
			out, index = append(out, nodes[i]), append(index, i)
		}
	}
	return out, index
}

// reserve takes what r needs from node i of nodes (after an eviction, so that the next
// check in the same cycle sees it gone), as Placeable placed it: a shared GPU with room,
// else (OpensDevice) a free GPU that becomes a shared one.
func reserve(nodes []NodeGPUs, i int, r Replacement) {
	if i < 0 || i >= len(nodes) {
		return
	}
	n := &nodes[i]
	n.FreeGPUs -= r.GPUs
	if r.SharedMemory <= 0 {
		return
	}
	if j := fittingDevice(n.Shared, r.SharedMemory); j >= 0 {
		n.Shared[j].FreeSlots--
		n.Shared[j].FreeMemory -= r.SharedMemory
		return
	}
	if r.OpensDevice && n.FreeGPUs >= 1 {
		n.FreeGPUs--
		n.Shared = append(n.Shared, SharedGPU{ID: "new", FreeMemory: n.GPUMemory - r.SharedMemory, FreeSlots: unlimitedSlots, MemoryBytes: n.GPUMemory})
	}
}

// podRequest is a pod's effective request of res as the scheduler counts it
// (gpufracv1.PodNeed): the larger of its regular containers' and native sidecars' sum
// and its largest init container plus the sidecars started before it. For extended
// resources a limit without a request is the request.
func podRequest(pod *corev1.Pod, res corev1.ResourceName) int64 {
	var need gpufracv1.PodNeed
	for _, c := range workload.Containers(pod) {
		q, ok := c.Container.Resources.Requests[res]
		if !ok {
			q = c.Container.Resources.Limits[res]
		}
		need.Add(c.Type, q.Value())
	}
	total, _ := need.Total()
	return total
}

// replacementNeed is what the replacement of pod (allocation alloc) needs at now: the
// pod's own request of the GPU resource (the replacement comes from the same template and
// the webhook keeps or removes it alike) and, for HAMi and KAI, the largest memory one of
// its containers will get on a shared GPU: where memory is controlled, what the webhook
// writes for targets under gfa's rollback floor in force (contract.WrittenOf: the
// target, at least the floor and minMemory, plus overhead, or the memoryLimit; for
// kai-nvfractions the request backend.NVFractionsConfig.RequestLimit makes of it, for
// KAI as the fraction), else what the container has now.
func replacementNeed(pod *corev1.Pod, alloc PodAllocation, gfa *gpufracv1.GPUFractionAutoscaler, targets map[string]contract.Target, bt gpufracv1.BackendType, cfg backend.Config, overhead int64, now time.Time) Replacement {
	kai := bt == gpufracv1.BackendKAI || bt == gpufracv1.BackendKAINVFractions
	r := Replacement{GPUs: podRequest(pod, cfg.GPUResource), OpensDevice: kai}
	if bt != gpufracv1.BackendHAMi && !kai {
		return r
	}
	for name, a := range alloc.Containers {
		if a.Source == SourceWholeGPU {
			continue
		}
		m := a.Memory
		if t, ok := targets[name]; ok && t.ControlsMemory && t.Memory > 0 {
			w := contract.WrittenOf(gfa, t, now, overhead, cfg.GPUMemoryBytes)
			m = w.MemoryBytes
			if bt == gpufracv1.BackendKAINVFractions {
				req, _ := cfg.NVFractions.RequestLimit(w.MemoryBytes, w.UpperMemoryBytes, w.PeakMemoryBytes, cfg.GPUMemoryBytes)
				m = req * backend.MiB
			}
		}
		if bt == gpufracv1.BackendKAI {
			m = kaiShare(m, cfg.ForPod(pod))
		}
		r.SharedMemory = max(r.SharedMemory, m)
	}
	return r
}

// kaiShare is the memory of one GPU, bytes, that a KAI fraction for memory bytes takes:
// whole MiB (gpu-memory), or the hundredths of usable memory the webhook writes
// (gpu-fraction) times the GPU's memory, as KAI reserves it. cfg is the webhook's for
// the pod (backend.Config.ForPod: the GPU its node constraints pin it to). An unpinned
// gpu-fraction pod that lands on a GPU larger than --gpu-memory takes more than this.
func kaiShare(memory int64, cfg backend.Config) int64 {
	if cfg.KAI.Mode == backend.KAIModeFraction {
		if usable := cfg.UsableGPUMemoryBytes(); usable > 0 {
			return (memory*100 + usable - 1) / usable * cfg.GPUMemoryBytes / 100
		}
	}
	return (memory + backend.MiB - 1) / backend.MiB * backend.MiB
}
