package updater

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/workload"
)

// Target resolution: which workload each autoscaler targets, which autoscaler is in
// charge of it, its pods, its recommendation and what the pods hold.

// resolveTargets resolves every autoscaler's target first: of several autoscalers on one
// workload the oldest is in charge (contract.Precedes, as in the recommender and the
// webhook). Autoscalers being deleted are left out.
func (cy *cycle) resolveTargets(ctx context.Context, u *Updater, gfas []gpufracv1.GPUFractionAutoscaler) {
	for i := range gfas {
		gfa := &gfas[i]
		if gfa.DeletionTimestamp != nil {
			continue
		}
		ref, err := workload.Resolve(ctx, u.Client, u.Scale, gfa.Namespace, gfa.Spec.TargetRef)
		cy.targets[gfa.UID] = resolved{ref: ref, err: err}
		if err != nil {
			continue
		}
		if cur := cy.inCharge[ref]; cur == nil || contract.Precedes(gfa, cur) {
			cy.inCharge[ref] = gfa
		}
	}
}

// takeTarget records the autoscaler's resolved target and workload state in p. It
// returns false, with the autoscaler blocked, when the target did not resolve
// (SkipTargetUnresolved, except in Off mode) or another autoscaler is in charge of the
// workload (SkipDuplicateTarget): nothing of this one is applied or reported as pending
// then, whatever its recommendation says.
func (p *plan) takeTarget(t resolved, winner *gpufracv1.GPUFractionAutoscaler, wl *workloadCycle) bool {
	p.ref = t.ref
	if t.err != nil {
		if p.mode != gpufracv1.UpdateModeOff {
			p.blockR, p.blockMsg = SkipTargetUnresolved, t.err.Error()
		}
		return false
	}
	p.wl = wl
	if winner != nil && winner.UID != p.gfa.UID {
		p.blockR, p.blockMsg = SkipDuplicateTarget, contract.DuplicateMessage(p.gfa, winner, p.gfa.Spec.TargetRef.Kind, p.gfa.Spec.TargetRef.Name)
		return false
	}
	return true
}

// mirrorInCharge copies the workload's safety state — its rollback floor and the shrink
// under verification — from the status of the autoscaler in charge of each workload to
// the others of the workload (status.updater.floor and verification; the round is
// recordRound's). They are the workload's, not the autoscaler's: when the one in charge
// is deleted, the next takes charge with them (newPlan carries them over), so the pods
// are not shrunk back below the floor the guardrail set, the webhook writes the floor
// of the new one into replacements, and a restart after the shrink still rolls back.
func (cy *cycle) mirrorInCharge() {
	byUID := make(map[types.UID]*plan, len(cy.plans))
	for _, p := range cy.plans {
		byUID[p.gfa.UID] = p
	}
	for _, p := range cy.plans {
		if p.blockR != SkipDuplicateTarget {
			continue
		}
		w := cy.inCharge[p.ref]
		if w == nil || byUID[w.UID] == nil {
			continue
		}
		wst := byUID[w.UID].st
		p.st.Floor, p.st.Verification = wst.Floor.DeepCopy(), wst.Verification.DeepCopy()
	}
}

// podsOf returns the workload's pods that are not Succeeded or Failed, from the cache,
// listing each namespace once per cycle.
func (u *Updater) podsOf(ctx context.Context, ref workload.Ref, byNS map[string][]corev1.Pod) ([]*corev1.Pod, error) {
	pods, ok := byNS[ref.Namespace]
	if !ok {
		var list corev1.PodList
		if err := u.Client.List(ctx, &list, client.InNamespace(ref.Namespace)); err != nil {
			return nil, fmt.Errorf("listing pods in %s: %w", ref.Namespace, err)
		}
		pods = list.Items
		byNS[ref.Namespace] = pods
	}
	var out []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if workload.Ended(p) {
			continue
		}
		if r, ok := u.owners.TopController(ctx, p); ok && r == ref {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].CreationTimestamp.Time, out[j].CreationTimestamp.Time
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// failedPodsOf returns the workload's pods that ended Failed (from the namespace's pod
// list of this cycle, which podsOf read).
func (u *Updater) failedPodsOf(ctx context.Context, ref workload.Ref, byNS map[string][]corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	pods := byNS[ref.Namespace]
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase != corev1.PodFailed {
			continue
		}
		if r, ok := u.owners.TopController(ctx, p); ok && r == ref {
			out = append(out, p)
		}
	}
	return out
}

// recommendation reads the autoscaler's GPUFractionRecommendation from the cache and
// says whether the webhook would apply it (contract.Applies); when not, it returns a skip
// reason and message.
func (u *Updater) recommendation(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler) (*gpufracv1.GPUFractionRecommendation, string, string) {
	gfr := &gpufracv1.GPUFractionRecommendation{}
	if err := u.Client.Get(ctx, types.NamespacedName{Namespace: gfa.Namespace, Name: gfa.Name}, gfr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, SkipNoRecommendation, "no GPUFractionRecommendation yet"
		}
		return nil, SkipNoRecommendation, fmt.Sprintf("reading the recommendation: %v", err)
	}
	// The webhook's gates (contract.Applies): a replacement would not get a
	// recommendation the webhook does not apply.
	switch reason, msg := contract.Applies(gfa, gfr, contract.MinConfidence(u.Config.MinConfidence)); reason {
	case "":
	case contract.ReasonStale:
		return nil, SkipNoRecommendation, msg
	case contract.ReasonLowConfidence:
		return gfr, SkipLowConfidence, msg + ": a replacement would not get the recommendation (it would come back with the whole GPU, so only protective growth goes ahead)"
	default:
		return gfr, SkipNoRecommendation, msg
	}
	return gfr, "", ""
}

// unwritable returns SkipNoRecommendation and why when the autoscaler's
// spec.backend.memoryOverhead is negative (the webhook then admits every pod
// unchanged), or when a target of a container of the workload's pods is one the
// webhook writes no fraction for (contract.Target's
// UnwritableMemory and UnwritableCompute: a memory target not positive or above one GPU
// of gpuMemoryBytes, a compute target outside 0–1 GPU; the webhook then admits the pod
// unchanged) and a replacement would come back as the pod is, so none is made. It
// happens where the recommender and the webhook are given different GPU sizes
// (--gpu-memory) or a recommendation was edited; otherwise it returns "", "". A memory
// target that, with the webhook's overhead, is more than the backend writes as a
// fraction (largestFraction: KAI's usable memory, of the GPU a pod is pinned to where
// smaller; NVFractions' one GPU) counts as above one GPU: the webhook admits that pod
// unchanged too.
//
// A memory target above one GPU is not a skip while a pod of the container holds a
// fraction below one GPU (read by readAllocations), or holds memory gpufrac wrote, one
// GPU included, and exited out of memory (oomAtWrittenGPU): its replacement comes back
// unchanged, that is with the whole GPU it asks for, which is as close to the target as
// a pod gets, and on a GPU larger than --gpu-memory more than the fraction.
// The container's target and bounds are then capped at one GPU (wholeGPU), so those
// pods grow by the usual rules (protective growth included) and a pod already holding a
// whole GPU is in date.
func (p *plan) unwritable(cfg backend.Config) (string, string) {
	if b := p.gfa.Spec.Backend; b != nil && b.MemoryOverhead != nil && b.MemoryOverhead.Sign() < 0 {
		// The webhook admits every pod of such an autoscaler unchanged (the validating
		// webhook rejects it, but one created while it was down gets here).
		return SkipNoRecommendation, fmt.Sprintf("the admission webhook would not write this recommendation (spec.backend.memoryOverhead %s is negative): a replacement would come back unchanged", b.MemoryOverhead)
	}
	gpuMemoryBytes := cfg.GPUMemoryBytes
	names := map[string]bool{}
	for _, pod := range p.pods {
		for _, pc := range workload.Containers(pod) {
			names[pc.Container.Name] = pc.Type != gpufracv1.ContainerTypeInit // never written (the webhook's targets)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.targets)) {
		t := p.targets[name]
		if !names[name] {
			continue
		}
		msg, tooLarge := t.UnwritableMemory(gpuMemoryBytes)
		if lim := p.largestFraction(cfg); msg == "" && lim < gpuMemoryBytes && t.ControlsMemory && t.Memory > 0 && t.Memory+p.overhead > lim {
			// KAI's fractions stop below the GPU's usable memory, NVFractions' below one
			// GPU: the webhook admits such a pod unchanged, with its whole GPU.
			msg, tooLarge = fmt.Sprintf("memory target %s of container %s plus overhead %s is more than the %s backend writes as a fraction (%s): the pod keeps its whole GPU",
				fmtBytes(t.Memory), name, fmtBytes(p.overhead), p.backend, fmtBytes(lim)), true
		}
		if msg == "" || tooLarge {
			if c := t.UnwritableCompute(); c != "" {
				msg, tooLarge = c, false
			}
		}
		if tooLarge && (p.holdsFraction(name, gpuMemoryBytes) || p.oomAtWrittenGPU(name)) {
			p.targets[name] = wholeGPU(t, gpuMemoryBytes)
			p.unchanged[name] = t.ControlsMemory
			continue
		}
		if msg != "" {
			return SkipNoRecommendation, "the admission webhook would not write this recommendation (" + msg + "): a replacement would come back unchanged"
		}
	}
	return "", ""
}

// largestFraction is the most memory, bytes, the webhook writes as a fraction for the
// plan's pods (backend.LargestFraction): for KAI, the least over the pods of that of the
// GPU each pod's node constraints pin it to (backend.Config.ForPod), where smaller than
// --gpu-memory's: the webhook sizes a KAI fraction by that GPU, and admits a pod that
// needs all of it unchanged.
func (p *plan) largestFraction(cfg backend.Config) int64 {
	lim := backend.LargestFraction(p.backend, cfg)
	if p.backend != gpufracv1.BackendKAI {
		return lim
	}
	for _, pod := range p.pods {
		lim = min(lim, backend.LargestFraction(p.backend, cfg.ForPod(pod)))
	}
	return lim
}

// oomAtWrittenGPU reports whether a pod of the plan holds memory gpufrac wrote for the
// container (its applied record, SourceAppliedRecord), however much (one GPU of --gpu-memory included), and
// exited out of memory: its replacement, admitted unchanged, gets the whole GPU it lands
// on, more than --gpu-memory where that GPU is larger (Rules.Unchanged).
func (p *plan) oomAtWrittenGPU(container string) bool {
	for _, pod := range p.pods {
		a, ok := p.allocs[pod.UID].Containers[container]
		if !ok || a.Source != SourceAppliedRecord || a.Memory < 0 {
			continue
		}
		for _, t := range Terminations(pod) {
			if t.OOM && t.Container == container {
				return true
			}
		}
	}
	return false
}

// holdsFraction reports whether a pod of the plan holds less than one GPU of memory
// (gpuMemoryBytes) for the container, by its allocation (readAllocations).
func (p *plan) holdsFraction(container string, gpuMemoryBytes int64) bool {
	for _, pod := range p.pods {
		if a, ok := p.allocs[pod.UID].Containers[container]; ok && a.Memory >= 0 && a.Memory < gpuMemoryBytes {
			return true
		}
	}
	return false
}

// wholeGPU returns t with its memory target, bounds and limit capped at one GPU
// (gpuMemoryBytes, bytes): what a pod the webhook admits unchanged holds.
func wholeGPU(t contract.Target, gpuMemoryBytes int64) contract.Target {
	for _, v := range []*int64{&t.Memory, &t.LowerMemory, &t.UpperMemory, &t.MemoryLimit} {
		*v = min(*v, gpuMemoryBytes)
	}
	return t
}

// AdmittedUnchanged returns targets as what a replacement gets while the webhook
// admits pods unchanged (a recommendation below its --min-confidence; the simulator's
// low-confidence decisions read it too): the whole GPU,
// gpuMemoryBytes bytes of memory and 1000 milli-GPU of compute, for each resource
// gpufrac controls, with the observed peaks kept. A pod holding a fraction then reads as
// below its target: its replacement is growth, which recommendationGate lets through
// only where it is protective (LowConfidenceAdmits) (an out-of-memory exit, a peak near the limit, a breached
// latency objective, a rollback floor), so a pod out of memory at its fraction is not
// left there for as long as the confidence stays low, and no other pod is replaced for
// the confidence alone.
func AdmittedUnchanged(targets map[string]contract.Target, gpuMemoryBytes int64) map[string]contract.Target {
	out := make(map[string]contract.Target, len(targets))
	for name, t := range targets {
		if t.ControlsMemory && gpuMemoryBytes > 0 {
			t.Memory, t.LowerMemory, t.UpperMemory, t.MemoryLimit = gpuMemoryBytes, gpuMemoryBytes, gpuMemoryBytes, gpuMemoryBytes
		}
		if t.ControlsCompute {
			t.Compute, t.LowerCompute, t.UpperCompute = 1000, 1000, 1000
		}
		t.ComputeRequest, t.TimeSlicesCompute = -1, false
		out[name] = t
	}
	return out
}

// readAllocations reads the applied fraction of each of the plan's pods (ReadAllocation).
func (p *plan) readAllocations(cfg backend.Config) {
	p.allocs = make(map[types.UID]PodAllocation, len(p.pods))
	for _, pod := range p.pods {
		p.allocs[pod.UID] = ReadAllocation(pod, p.backend, cfg, p.overhead)
	}
}

// rules returns the settings of the per-pod decision for the plan: the configuration,
// the autoscaler's urgentGrowth, the compute hold, the guardrail and the floor in force.
func (p *plan) rules(cfg Config, computeHeld bool) Rules {
	r := Rules{
		Threshold: cfg.Threshold, MinPodAge: cfg.MinPodAge, NearLimit: cfg.NearLimit, ComputeRequestGrowth: cfg.ComputeRequestGrowth,
		UrgentGrowth: urgentGrowth(p.gfa), ComputeShrinkHeld: computeHeld, Guardrail: p.guard,
		IncompleteData: contract.IncompleteData(p.gfr),
	}
	r.Floor = FloorRules(p.st.Floor, cfg.Backend.GPUMemoryBytes)
	return r
}

// FloorRules is the rollback floor f (status.updater.floor; nil: none) as Rules.Floor
// holds it, per container, each as the webhook writes it into a pod (writableFloor:
// memory at most gpuMemoryBytes, bytes; compute at most one GPU); nil for no floor.
func FloorRules(f *gpufracv1.UpdaterFloor, gpuMemoryBytes int64) map[string]Alloc {
	if f == nil {
		return nil
	}
	out := map[string]Alloc{}
	for _, c := range f.Containers {
		out[c.ContainerName] = writableFloor(Alloc{Memory: contract.BytesOf(c.Memory), Compute: contract.MilliOf(c.Compute)}, gpuMemoryBytes)
	}
	return out
}

// writableFloor is a rollback floor as the webhook writes it into a pod: memory at most
// one GPU (gpuMemoryBytes; 0: unknown) and compute at most one GPU (1000m). An
// out-of-memory exit at a whole GPU raises the floor above one GPU (VPA's bump), which no
// pod can get: compared uncapped, every pod at one GPU would stay below it and be
// replaced urgently, cycle after cycle, by a pod at one GPU again.
func writableFloor(f Alloc, gpuMemoryBytes int64) Alloc {
	if gpuMemoryBytes > 0 && f.Memory > gpuMemoryBytes {
		f.Memory = gpuMemoryBytes
	}
	f.Compute = min(f.Compute, 1000)
	return f
}
