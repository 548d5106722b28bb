package updater

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

// HAMi's annotations (Project-HAMi/HAMi, pkg/device/nvidia): the node's devices as the
// device plugin registered them, and each pod's devices as the scheduler allocated them.
const (
	// AnnotationHAMiNodeRegister lists a node's GPUs: a JSON array of {id, count, devmem
	// (MiB), …} (HAMi ≥ 2.5), or "id,count,devmem,devcore,type,numa,health:" entries.
	AnnotationHAMiNodeRegister = "hami.io/node-nvidia-register"
	// AnnotationHAMiAllocated lists a pod's devices: "uuid,type,usedmem(MiB),usedcores:"
	// per device, ";" after each container.
	AnnotationHAMiAllocated = "hami.io/vgpu-devices-allocated"
)

// SharedGPU is one GPU of a node that pods share (HAMi), with what is left of it.
type SharedGPU struct {
	// ID is the device's UUID.
	ID string
	// FreeMemory is the device's memory minus the memory allocated to pods on it, bytes.
	FreeMemory int64
	// FreeSlots is how many more pods the device takes (HAMi's split count minus its
	// allocations).
	FreeSlots int64
}

// NodeGPUs is what one node has left for a replacement pod.
type NodeGPUs struct {
	// Name is the node's name.
	Name string
	// FreeGPUs is the node's allocatable GPU resource (Config.Backend.GPUResource:
	// whole GPUs, or the device plugin's shares) minus what the non-terminal pods bound
	// to it request, the pod to be replaced included.
	FreeGPUs int64
	// Shared are the node's shared GPUs; nil when the node does not say (no HAMi
	// registration).
	Shared []SharedGPU
}

// Replacement is what a replacement pod needs on one node.
type Replacement struct {
	// GPUs is how much of the GPU resource it requests (0: none, e.g. KAI fractions).
	GPUs int64
	// SharedMemory is the memory it needs on one shared GPU, bytes (0: the backend
	// writes no shared-GPU size). Only HAMi's gpumem is such a size.
	SharedMemory int64
}

// Placeable returns the index of the first node of nodes that can hold a replacement
// needing r, or -1 and why none can: the node must have r.GPUs of the GPU resource free
// and, where r.SharedMemory is set and the node lists its shared GPUs, one shared GPU
// with that much memory and a slot free. A replacement that needs nothing is placeable
// anywhere (index 0, or -1 with no message when nodes is empty). It is a necessary
// condition, not the scheduler: node selectors, affinities and taints are not checked.
func Placeable(r Replacement, nodes []NodeGPUs) (int, string) {
	if r.GPUs <= 0 && r.SharedMemory <= 0 {
		if len(nodes) == 0 {
			return -1, ""
		}
		return 0, ""
	}
	var bestFree int64 = -1
	bestGPU := ""
	gpusFree := false
	for i, n := range nodes {
		if r.GPUs > 0 && n.FreeGPUs < r.GPUs {
			continue
		}
		gpusFree = true
		if r.SharedMemory <= 0 || n.Shared == nil {
			return i, ""
		}
		for _, d := range n.Shared {
			if d.FreeSlots < 1 {
				continue
			}
			if d.FreeMemory >= r.SharedMemory {
				return i, ""
			}
			if d.FreeMemory > bestFree {
				bestFree, bestGPU = d.FreeMemory, n.Name+"/"+d.ID
			}
		}
	}
	if !gpusFree {
		return -1, fmt.Sprintf("no node has %d of the GPU resource free (allocatable minus the requests of the pods bound to it)", r.GPUs)
	}
	if bestGPU == "" {
		return -1, fmt.Sprintf("no shared GPU has a free slot for %s", fmtBytes(r.SharedMemory))
	}
	return -1, fmt.Sprintf("no shared GPU has %s free (most: %s on %s)", fmtBytes(r.SharedMemory), fmtBytes(bestFree), bestGPU)
}

// placementGate checks, before c's pod is evicted, that its replacement can be placed
// (Placeable) on the cycle's free capacity (nodeCapacity, read once per cycle): the
// ReplicaSet creates the replacement while the pod still holds its GPU, and a
// replacement left Pending serves nothing. It returns the node index and the need to
// reserve after the eviction, and false when the pod is kept (SkipNoCapacity on c, a
// ReplacementUnplaceable event once per autoscaler while the cause stays the same).
// With Config.NoPlacementCheck, or when the capacity is unknown, every pod passes.
func (u *Updater) placementGate(ctx context.Context, cy *cycle, c *candidate) (int, Replacement, bool) {
	if u.Config.NoPlacementCheck {
		return -1, Replacement{}, true
	}
	if !cy.capacityRead {
		var r client.Reader = u.Client
		if u.APIReader != nil {
			r = u.APIReader
		}
		cy.capacity, cy.capacityRead = nodeCapacity(ctx, r, u.Config.Backend), true
	}
	if cy.capacity == nil {
		return -1, Replacement{}, true
	}
	p := c.p
	repl := replacementNeed(c.pod, c.alloc, p.targets, p.backend, u.Config.Backend, p.overhead)
	at, why := Placeable(repl, cy.capacity)
	if at >= 0 || why == "" {
		return at, repl, true
	}
	c.skip(SkipNoCapacity, fmt.Sprintf("the replacement of pod %s could not be placed: %s; the pod is kept", c.pod.Name, why))
	p.unplaceable = true
	// One note per autoscaler while the cause stays the same, whichever pod.
	u.eventOnce(p.gfa, "unplaceable", corev1.EventTypeWarning, EventReplacementUnplaceable, "Evict",
		"replacements could not be placed: "+why+"; out-of-date pods are kept until there is room")
	klog.FromContext(ctx).Info("Replacement cannot be placed; pod kept", "autoscaler", klog.KObj(p.gfa), "pod", klog.KObj(c.pod), "reason", why)
	return -1, repl, false
}

// reserve takes what r needs from node i of nodes (after an eviction, so that the next
// check in the same cycle sees it gone).
func reserve(nodes []NodeGPUs, i int, r Replacement) {
	if i < 0 || i >= len(nodes) {
		return
	}
	n := &nodes[i]
	n.FreeGPUs -= r.GPUs
	if r.SharedMemory <= 0 {
		return
	}
	for j := range n.Shared {
		if d := &n.Shared[j]; d.FreeSlots >= 1 && d.FreeMemory >= r.SharedMemory {
			d.FreeSlots--
			d.FreeMemory -= r.SharedMemory
			return
		}
	}
}

// podRequest is a pod's effective request of res: the larger of its regular containers'
// (and native sidecars') sum and its largest init container, as the scheduler counts it.
// For extended resources a limit without a request is the request.
func podRequest(pod *corev1.Pod, res corev1.ResourceName) int64 {
	get := func(c *corev1.Container) int64 {
		if q, ok := c.Resources.Requests[res]; ok {
			return q.Value()
		}
		if q, ok := c.Resources.Limits[res]; ok {
			return q.Value()
		}
		return 0
	}
	var sum, initMax int64
	for i := range pod.Spec.Containers {
		sum += get(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sum += get(c)
		} else {
			initMax = max(initMax, get(c))
		}
	}
	return max(sum, initMax)
}

// replacementNeed is what the replacement of pod (allocation alloc) needs: the pod's own
// request of the GPU resource (the replacement comes from the same template and the
// webhook keeps or removes it alike) and, for HAMi, the largest memory one of its
// containers will get on a shared GPU (the target plus overhead where memory is
// controlled, else what it has now).
func replacementNeed(pod *corev1.Pod, alloc PodAllocation, targets map[string]Target, bt gpufracv1.BackendType, cfg backend.Config, overhead int64) Replacement {
	r := Replacement{GPUs: podRequest(pod, cfg.GPUResource)}
	if bt != gpufracv1.BackendHAMi {
		return r
	}
	for name, a := range alloc.Containers {
		if a.Source == SourceWholeGPU {
			continue
		}
		m := a.Memory
		if t, ok := targets[name]; ok && t.ControlsMemory && t.Memory > 0 {
			m = min(t.Memory+overhead, cfg.GPUMemoryBytes)
		}
		r.SharedMemory = max(r.SharedMemory, m)
	}
	return r
}

// nodeCapacity reads every node's GPU resource and HAMi devices and subtracts what the
// non-terminal pods bound to each request. It returns nil when no node advertises the GPU
// resource (the capacity is unknown: nothing is held then) or when nodes or pods cannot
// be listed (the error is logged).
func nodeCapacity(ctx context.Context, r client.Reader, cfg backend.Config) []NodeGPUs {
	log := klog.FromContext(ctx)
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		log.Error(err, "Listing nodes for the placement check; evicting without it this cycle")
		return nil
	}
	byName := map[string]*NodeGPUs{}
	devIndex := map[string]map[string]int{} // node -> device ID -> index in Shared
	var out []*NodeGPUs
	for i := range nodes.Items {
		n := &nodes.Items[i]
		q, ok := n.Status.Allocatable[cfg.GPUResource]
		if !ok || q.Value() <= 0 || n.Spec.Unschedulable || !nodeReady(n) {
			continue
		}
		ng := &NodeGPUs{Name: n.Name, FreeGPUs: q.Value(), Shared: parseHAMiNode(n.Annotations[AnnotationHAMiNodeRegister])}
		if ng.Shared != nil {
			devIndex[n.Name] = map[string]int{}
			for j, d := range ng.Shared {
				devIndex[n.Name][d.ID] = j
			}
		}
		byName[n.Name] = ng
		out = append(out, ng)
	}
	if len(out) == 0 {
		return nil
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods); err != nil {
		log.Error(err, "Listing pods for the placement check; evicting without it this cycle")
		return nil
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		ng := byName[p.Spec.NodeName]
		if ng == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ng.FreeGPUs -= podRequest(p, cfg.GPUResource)
		idx := devIndex[ng.Name]
		if idx == nil {
			continue
		}
		for _, a := range parseHAMiAllocated(p.Annotations[AnnotationHAMiAllocated]) {
			if j, ok := idx[a.id]; ok {
				ng.Shared[j].FreeMemory -= a.memory
				ng.Shared[j].FreeSlots--
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	res := make([]NodeGPUs, len(out))
	for i, n := range out {
		res[i] = *n
	}
	return res
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return true // no Ready condition reported (yet): not known to be down
}

// parseHAMiNode reads HAMi's node registration: the JSON form of HAMi ≥ 2.5 or the
// legacy "id,count,devmem,devcore,type,numa,health:" list. Nil when absent or unreadable.
func parseHAMiNode(s string) []SharedGPU {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	var out []SharedGPU
	if strings.HasPrefix(s, "[") {
		var devs []struct {
			ID     string `json:"id"`
			Count  int64  `json:"count"`
			Devmem int64  `json:"devmem"`
			Health *bool  `json:"health"`
		}
		if json.Unmarshal([]byte(s), &devs) != nil {
			return nil
		}
		for _, d := range devs {
			if d.ID == "" || (d.Health != nil && !*d.Health) {
				continue
			}
			out = append(out, SharedGPU{ID: d.ID, FreeMemory: d.Devmem * backend.MiB, FreeSlots: d.Count})
		}
		return out
	}
	for entry := range strings.SplitSeq(s, ":") {
		f := strings.Split(strings.TrimSpace(entry), ",")
		if len(f) < 3 || f[0] == "" {
			continue
		}
		count, err1 := strconv.ParseInt(f[1], 10, 64)
		mem, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if len(f) >= 7 && f[6] == "false" {
			continue
		}
		out = append(out, SharedGPU{ID: f[0], FreeMemory: mem * backend.MiB, FreeSlots: count})
	}
	if out == nil {
		return nil
	}
	return out
}

type hamiAllocation struct {
	id     string
	memory int64 // bytes
}

// parseHAMiAllocated reads a pod's "uuid,type,usedmem,usedcores:" devices ("MiB").
func parseHAMiAllocated(s string) []hamiAllocation {
	var out []hamiAllocation
	for ctr := range strings.SplitSeq(s, ";") {
		for dev := range strings.SplitSeq(ctr, ":") {
			f := strings.Split(strings.TrimSpace(dev), ",")
			if len(f) < 3 || f[0] == "" {
				continue
			}
			mem, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				continue
			}
			out = append(out, hamiAllocation{id: f[0], memory: mem * backend.MiB})
		}
	}
	return out
}
