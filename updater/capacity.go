package updater

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/workload"
)

// The cluster's free GPU capacity for the placement check: every node's GPU resource,
// and the shared GPUs that HAMi registers or KAI's fractions use, less what the pods
// bound to them take.

// AnnotationHAMiNodeRegister lists a node's GPUs as HAMi's device plugin registered
// them (Project-HAMi/HAMi, pkg/device/nvidia): a JSON array of {id, count, devmem (MiB),
// …} (HAMi ≥ 2.5), or "id,count,devmem,devcore,type,numa,health:" entries. Each pod's
// devices, as the scheduler allocated them, are workload.HAMiDevices.
const AnnotationHAMiNodeRegister = "hami.io/node-nvidia-register"

// Labels the capacity is read from besides HAMi's annotations.
const (
	// LabelKAIGPUGroup is the label KAI's scheduler puts on a pod with a GPU fraction
	// (and on the reservation pod that holds the GPU): the shared GPU it is on, one group
	// per device (kai-scheduler, pkg/common/constants GPUGroup).
	LabelKAIGPUGroup = "runai-gpu-group"
	// LabelGPUMemory is NVIDIA GPU feature discovery's label of a node: the memory of
	// one of its GPUs, MiB.
	LabelGPUMemory = backend.LabelGPUMemory
)

// capacity indexes the nodes being read by nodeCapacity.
type capacity struct {
	cfg    backend.Config
	nodes  []*NodeGPUs
	byName map[string]*NodeGPUs
	// hami maps a HAMi node's device IDs to their index in Shared; kai maps a node's KAI
	// GPU groups likewise.
	hami, kai map[string]map[string]int
}

// nodeCapacity reads every node's GPU resource, HAMi devices and KAI GPU groups, and
// subtracts what the non-terminal pods bound to each take. It returns nil when no node
// advertises the GPU resource (the capacity is unknown: nothing is held then) or when
// nodes or pods cannot be listed (the error is logged).
func nodeCapacity(ctx context.Context, r client.Reader, cfg backend.Config) []NodeGPUs {
	log := klog.FromContext(ctx)
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		log.Error(err, "Listing nodes for the placement check; evicting without it this cycle")
		return nil
	}
	c := &capacity{cfg: cfg, byName: map[string]*NodeGPUs{}, hami: map[string]map[string]int{}, kai: map[string]map[string]int{}}
	for i := range nodes.Items {
		c.addNode(&nodes.Items[i])
	}
	if len(c.nodes) == 0 {
		return nil
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods); err != nil {
		log.Error(err, "Listing pods for the placement check; evicting without it this cycle")
		return nil
	}
	for i := range pods.Items {
		c.take(&pods.Items[i])
	}
	sort.SliceStable(c.nodes, func(i, j int) bool { return c.nodes[i].Name < c.nodes[j].Name })
	res := make([]NodeGPUs, len(c.nodes))
	for i, n := range c.nodes {
		res[i] = *n
	}
	return res
}

// addNode adds a Ready node that advertises the GPU resource. A cordoned node
// (spec.unschedulable) is added too: only a pod that tolerates the
// node.kubernetes.io/unschedulable taint runs there (runsOn), as a DaemonSet's pod does
// — its DaemonSet recreates it on its cordoned node — while a cluster whose GPU nodes
// are all cordoned has a known capacity of none for every other pod.
func (c *capacity) addNode(n *corev1.Node) {
	q, ok := n.Status.Allocatable[c.cfg.GPUResource]
	if !ok || q.Value() <= 0 || !nodeReady(n) {
		return
	}
	ng := &NodeGPUs{Name: n.Name, FreeGPUs: q.Value(), Shared: parseHAMiNode(n.Annotations[AnnotationHAMiNodeRegister]), GPUMemory: c.cfg.GPUMemoryBytes, node: n}
	if mib, err := strconv.ParseInt(n.Labels[LabelGPUMemory], 10, 64); err == nil && mib > 0 {
		ng.GPUMemory = mib * backend.MiB
	}
	if ng.Shared != nil {
		c.hami[n.Name] = map[string]int{}
		for j, d := range ng.Shared {
			c.hami[n.Name][d.ID] = j
		}
	}
	c.byName[n.Name] = ng
	c.nodes = append(c.nodes, ng)
}

// take subtracts what a pod bound to one of the nodes takes: its request of the GPU
// resource, and its memory and a slot of the HAMi devices it was allocated, or its
// memory of the KAI GPU group it is on.
func (c *capacity) take(p *corev1.Pod) {
	ng := c.byName[p.Spec.NodeName]
	if ng == nil || workload.Ended(p) {
		return
	}
	ng.FreeGPUs -= podRequest(p, c.cfg.GPUResource)
	if idx := c.hami[ng.Name]; idx != nil {
		for _, a := range workload.HAMiDevices(p) {
			if j, ok := idx[a.UUID]; ok && a.MemoryMiB >= 0 {
				ng.Shared[j].FreeMemory -= a.MemoryMiB * backend.MiB
				ng.Shared[j].FreeSlots--
				ng.Shared[j].addTenant(p, a.MemoryMiB*backend.MiB, max(a.CoresPercent, 0)*10)
			}
		}
		return
	}
	if g := p.Labels[LabelKAIGPUGroup]; g != "" {
		if c.kai[ng.Name] == nil {
			c.kai[ng.Name] = map[string]int{}
		}
		j, ok := c.kai[ng.Name][g]
		if !ok {
			j = len(ng.Shared)
			c.kai[ng.Name][g] = j
			ng.Shared = append(ng.Shared, SharedGPU{ID: g, FreeMemory: ng.GPUMemory, FreeSlots: unlimitedSlots, MemoryBytes: ng.GPUMemory})
		}
		m := kaiPodMemory(p, c.cfg, ng.GPUMemory)
		ng.Shared[j].FreeMemory -= m
		if m > 0 { // not KAI's reservation pod, which holds the GPU for the group
			ng.Shared[j].addTenant(p, m, 0)
		}
	}
}

// released returns a copy of nodes with what pod takes (take: its GPU resource, HAMi
// device memory and slots, KAI group memory) given back on its node: the capacity its
// replacement finds when the controller creates it only once the pod is gone
// (replacedOnceGone). nodes itself is not changed.
func released(nodes []NodeGPUs, pod *corev1.Pod, cfg backend.Config) []NodeGPUs {
	out := make([]NodeGPUs, len(nodes))
	copy(out, nodes)
	for i := range out {
		ng := &out[i]
		if ng.Name != pod.Spec.NodeName {
			continue
		}
		ng.Shared = slices.Clone(ng.Shared)
		ng.FreeGPUs += podRequest(pod, cfg.GPUResource)
		for _, a := range workload.HAMiDevices(pod) {
			if j := slices.IndexFunc(ng.Shared, func(d SharedGPU) bool { return d.ID == a.UUID }); j >= 0 && a.MemoryMiB >= 0 {
				ng.Shared[j].FreeMemory += a.MemoryMiB * backend.MiB
				ng.Shared[j].FreeSlots++
			}
		}
		if g := pod.Labels[LabelKAIGPUGroup]; g != "" {
			if j := slices.IndexFunc(ng.Shared, func(d SharedGPU) bool { return d.ID == g }); j >= 0 {
				ng.Shared[j].FreeMemory += kaiPodMemory(pod, cfg, ng.GPUMemory)
			}
		}
	}
	return out
}

// replacedOnceGone reports whether pod's controller creates its replacement only once
// the pod is gone: a StatefulSet recreates a pod of the same name (its identity) after
// the old one is deleted, and a DaemonSet without maxSurge creates none on a node while
// its pod there is terminating; a ReplicaSet or a Job creates one as soon as the pod is
// terminating, while it still holds its GPU, and so does a DaemonSet with maxSurge. A
// DaemonSet that cannot be read counts as one with maxSurge.
func (u *Updater) replacedOnceGone(ctx context.Context, pod *corev1.Pod) bool {
	c := metav1.GetControllerOf(pod)
	if c == nil || !strings.HasPrefix(c.APIVersion, "apps/") {
		return false
	}
	switch c.Kind {
	case "StatefulSet":
		return true
	case "DaemonSet":
		ds := &appsv1.DaemonSet{}
		if err := u.apiReader().Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: c.Name}, ds); err != nil {
			return false
		}
		ru := ds.Spec.UpdateStrategy.RollingUpdate
		if ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil {
			return true
		}
		surge, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, 100, true)
		return err == nil && surge == 0
	}
	return false
}

// ownNodeOnly reports whether pod's replacement can run only on the pod's node: a
// DaemonSet's pod (the DaemonSet pins each pod to its node).
func ownNodeOnly(pod *corev1.Pod) bool {
	c := metav1.GetControllerOf(pod)
	return c != nil && c.Kind == "DaemonSet" && strings.HasPrefix(c.APIVersion, "apps/") && pod.Spec.NodeName != ""
}

// onNode returns the entry of nodes named node (none when it is not among them: not
// Ready, one the pod may not run on, or without the GPU resource) and its index in nodes.
func onNode(nodes []NodeGPUs, node string) ([]NodeGPUs, []int) {
	for i := range nodes {
		if nodes[i].Name == node {
			return nodes[i : i+1 : i+1], []int{i}
		}
	}
	return []NodeGPUs{}, []int{}
}

// addTenant counts pod's memory (bytes) and compute (milli-GPU) on the device: one
// tenant per pod, whichever of its containers the entries are for.
func (g *SharedGPU) addTenant(pod *corev1.Pod, memory, compute int64) {
	if i := slices.IndexFunc(g.Tenants, func(t DeviceTenant) bool { return pod.UID != "" && t.UID == pod.UID }); i >= 0 {
		g.Tenants[i].MemoryBytes += memory
		g.Tenants[i].ComputeMilli += compute
		return
	}
	g.Tenants = append(g.Tenants, DeviceTenant{UID: pod.UID, MemoryBytes: memory, ComputeMilli: compute, Created: pod.CreationTimestamp.Time})
}

// kaiPodMemory is the memory of its GPU, bytes, that a KAI fraction pod takes: its
// gpu-memory annotation (MiB), else its gpu-fraction of gpuMemory, else the sum of its
// kai-nvfractions memory requests (at most gpuMemory); 0 for a pod with none (KAI's
// reservation pod).
func kaiPodMemory(p *corev1.Pod, cfg backend.Config, gpuMemory int64) int64 {
	if n, err := strconv.ParseInt(p.Annotations[cfg.KAI.MemoryAnnotation], 10, 64); err == nil && n > 0 {
		return n * backend.MiB
	}
	if f, err := strconv.ParseFloat(p.Annotations[cfg.KAI.FractionAnnotation], 64); err == nil && f > 0 && f <= 1 {
		return int64(f * float64(gpuMemory))
	}
	var req int64 // kai-nvfractions: the containers' requests, which KAI places the pod by
	for _, pc := range workload.Containers(p) {
		if v, ok := backend.NVFractionsRequest(p, cfg, pc.Container.Name); ok && v > 0 {
			req += v
		}
	}
	return min(req, gpuMemory)
}

// nodeReady reports whether a node is not known to be down.
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
			out = append(out, SharedGPU{ID: d.ID, FreeMemory: d.Devmem * backend.MiB, FreeSlots: d.Count, MemoryBytes: d.Devmem * backend.MiB})
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
		out = append(out, SharedGPU{ID: f[0], FreeMemory: mem * backend.MiB, FreeSlots: count, MemoryBytes: mem * backend.MiB})
	}
	if out == nil {
		return nil
	}
	return out
}
