package updater

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/workload"
)

// Devices: where a pod's fraction is placed is known for HAMi (the devices its
// scheduler allocated, hami.io/vgpu-devices-allocated) and KAI (the GPU group label).
// Replacements from one device are limited in flight, so pods moving off a device never
// ask more of the devices than they hold while they move.

// The PlacementHeld condition (status.updater.conditions) and its event.
const (
	// ConditionPlacementHeld is True while out-of-date pods are kept because their
	// replacements could not be placed (reason NoCapacity: no node with the GPU resource
	// free, no shared GPU with the memory free) or another replacement from the same
	// device is in flight (reason DeviceReplacementInFlight); the message says which. It
	// is False (reason Placeable) once no pod is kept for either, and absent before any
	// ever was.
	ConditionPlacementHeld = "PlacementHeld"
	// ReasonNoCapacity: PlacementHeld True, skip reason no-capacity.
	ReasonNoCapacity = "NoCapacity"
	// ReasonDeviceInFlight: PlacementHeld True, skip reason device-in-flight.
	ReasonDeviceInFlight = "DeviceReplacementInFlight"
	// ReasonPlaceable: PlacementHeld False.
	ReasonPlaceable = "Placeable"
	// EventDeviceInFlight (Normal, autoscaler): pods wait because a replacement from
	// their device is in flight (once per message).
	EventDeviceInFlight = "DeviceReplacementInFlight"
)

// podDevices returns the devices a bound pod's fraction is on, as "node/device": the
// HAMi devices allocated to it, or its KAI GPU group. Nil when unknown.
func podDevices(pod *corev1.Pod) []string {
	node := pod.Spec.NodeName
	if node == "" {
		return nil
	}
	gpus, _ := workload.AllocatedGPUs(pod)
	var out []string
	for _, id := range gpus {
		out = append(out, node+"/"+id)
	}
	if g := pod.Labels[LabelKAIGPUGroup]; g != "" && out == nil {
		out = []string{node + "/" + g}
	}
	return out
}

// DeviceAllows reports whether a pod may be replaced from a device (a HAMi GPU, a KAI GPU
// group) with inFlight replacements of its pods in flight, under limit
// (Config.MaxInFlightPerDevice: the most at once; negative: no limit; 0: the default,
// DefaultMaxInFlightPerDevice). It is the one rule the updater's deviceGate and gpufrac
// simulate (--max-in-flight-per-device) run.
func DeviceAllows(inFlight, limit int) bool {
	if limit == 0 {
		limit = DefaultMaxInFlightPerDevice
	}
	return limit < 0 || inFlight < limit
}

// deviceGate: a replacement of a pod from the same device (HAMi GPU, KAI GPU group) is
// still in flight, and Config.MaxInFlightPerDevice of them at once is the most (negative:
// no limit; DeviceAllows). The note goes to the autoscaler once per message.
func (u *Updater) deviceGate(c *candidate) (string, string) {
	limit := u.Config.MaxInFlightPerDevice
	if limit < 0 {
		return "", ""
	}
	for _, d := range podDevices(c.pod) {
		var from []string
		for _, exps := range u.expect {
			for _, e := range exps {
				if !e.missing && slices.Contains(e.devices, d) {
					from = append(from, e.pod)
				}
			}
		}
		if DeviceAllows(len(from), limit) {
			continue
		}
		sort.Strings(from)
		msg := fmt.Sprintf("the replacement of pod %s from GPU %s is in flight; at most %d per device at once (--max-in-flight-per-device), so pods moving off a GPU never ask more of it than it holds", strings.Join(from, ", "), d, limit)
		u.eventOnce(c.p.gfa, "device", corev1.EventTypeNormal, EventDeviceInFlight, "Evict", "replacements wait: "+msg)
		return SkipDeviceInFlight, msg
	}
	return "", ""
}

// reservePending takes from the cycle's capacity what the replacements this updater
// awaits need while no node shows them yet (not bound): the next eviction must not count
// on the GPUs or memory they are about to take. A replacement is a pod of the workload
// created after its oldest awaited eviction.
func (u *Updater) reservePending(ctx context.Context, cy *cycle) {
	refs := make([]workload.Ref, 0, len(u.expect))
	for ref, exps := range u.expect {
		if len(exps) > 0 {
			refs = append(refs, ref)
		}
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	for _, ref := range refs {
		oldest := u.expect[ref][0]
		pods := cy.podsByNS[ref.Namespace]
		for i := range pods {
			pod := &pods[i]
			if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || oldest.before[pod.UID] ||
				workload.Ended(pod) {
				continue
			}
			if r, ok := u.owners.TopController(ctx, pod); !ok || r != ref {
				continue
			}
			need := podNeed(pod, u.Config.Backend)
			nodes, index := runnable(cy.capacity, pod) // only where the scheduler may bind it
			if at, _ := Placeable(need, nodes); at >= 0 {
				reserve(cy.capacity, index[at], need)
			}
		}
	}
}

// podNeed is what a pod not yet bound will take on a node: its request of the GPU
// resource and, for HAMi, its largest container's memory resource (MiB; any container,
// init containers and native sidecars included), or, for a KAI
// fraction (its scheduler, or its gpu-memory or gpu-fraction annotation), that memory
// of one GPU.
func podNeed(pod *corev1.Pod, cfg backend.Config) Replacement {
	r := Replacement{GPUs: podRequest(pod, cfg.GPUResource)}
	for _, c := range workload.Containers(pod) { // native sidecars and init containers too
		if q, ok := c.Container.Resources.Limits[cfg.HAMi.MemoryResource]; ok {
			r.SharedMemory = max(r.SharedMemory, q.Value()*backend.MiB)
		}
	}
	if r.SharedMemory > 0 {
		return r
	}
	if m := kaiPodMemory(pod, cfg, cfg.ForPod(pod).GPUMemoryBytes); m > 0 || pod.Spec.SchedulerName == cfg.KAI.SchedulerName {
		r.SharedMemory, r.OpensDevice = m, true
	}
	return r
}

// placementHeld sets PlacementHeld from the cycle's pending updates: True while some
// pod is kept for capacity (no-capacity, which wins) or a device's replacement in flight
// (device-in-flight), False once none is. The DeviceReplacementInFlight note is
// forgotten once no pod waits for a device.
func (u *Updater) placementHeld(p *plan, pending []*candidate) {
	var noCap, device []*candidate
	for _, c := range pending {
		switch c.upd.SkipReason {
		case SkipNoCapacity:
			noCap = append(noCap, c)
		case SkipDeviceInFlight:
			device = append(device, c)
		}
	}
	st, gfa := p.st, p.gfa
	if len(device) == 0 {
		u.forget(gfa, "device")
	}
	cond := metav1.Condition{Type: ConditionPlacementHeld, Status: metav1.ConditionTrue, ObservedGeneration: gfa.Generation}
	switch {
	case len(noCap) > 0:
		cond.Reason = ReasonNoCapacity
		cond.Message = strconv.Itoa(len(noCap)) + " out-of-date pod(s) kept: " + noCap[0].upd.SkipMessage
	case len(device) > 0:
		cond.Reason = ReasonDeviceInFlight
		cond.Message = strconv.Itoa(len(device)) + " out-of-date pod(s) wait: " + device[0].upd.SkipMessage
	case meta.FindStatusCondition(st.Conditions, ConditionPlacementHeld) == nil:
		return
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonPlaceable, "no out-of-date pod is kept for want of capacity or for a device's replacement in flight"
	}
	cond.Message = truncate(cond.Message, 1000)
	meta.SetStatusCondition(&st.Conditions, cond)
}
