package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	sigsjson "sigs.k8s.io/json"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/workload"
)

// TargetIndexField is the cache field index of GPUFractionAutoscalers by target; its
// values are TargetIndexValue(kind, name). AddIndexes registers it.
const TargetIndexField = "gpufrac.spec.targetRef"

// TargetIndexValue is the TargetIndexField value of a target: "<Kind>/<name>".
func TargetIndexValue(kind, name string) string { return kind + "/" + name }

// IndexAutoscalerTarget extracts TargetIndexField values from a GPUFractionAutoscaler
// (nil for other objects or an autoscaler without a target).
func IndexAutoscalerTarget(obj client.Object) []string {
	gfa, ok := obj.(*gpufracv1.GPUFractionAutoscaler)
	if !ok || gfa.Spec.TargetRef.Kind == "" || gfa.Spec.TargetRef.Name == "" {
		return nil
	}
	return []string{TargetIndexValue(gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name)}
}

// AddIndexes registers TargetIndexField with a cache's field indexer (this also creates
// the GPUFractionAutoscaler informer). It returns the indexer's error.
func AddIndexes(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &gpufracv1.GPUFractionAutoscaler{}, TargetIndexField, IndexAutoscalerTarget)
}

// intermediateOwners are the owner kinds between a pod and its workload; a new pod's
// owner of these kinds may reach the cache a moment after the pod reaches the webhook.
var intermediateOwners = map[string]schema.GroupVersionKind{
	"ReplicaSet": {Group: "apps", Version: "v1", Kind: "ReplicaSet"},
	"Job":        {Group: "batch", Version: "v1", Kind: "Job"},
}

// Mutator is the mutating admission handler for pod CREATE: it finds the autoscaler
// whose target is the pod's top-most controller and writes its recommendation through
// the autoscaler's backend. All reads go to Reader, which must be an informer cache
// (with TargetIndexField) so no API request is made on the request path. A pod that
// cannot be patched safely, or any internal error, admits the pod unchanged.
type Mutator struct {
	// Reader reads GPUFractionAutoscalers (indexed by TargetIndexField),
	// GPUFractionRecommendations, and ReplicaSet/Job metadata. Required.
	Reader client.Reader
	// Config is the webhook configuration (with defaults applied by NewMutator).
	Config Config
	// Backends maps spec.backend.type to its backend (backend.New).
	Backends map[gpufracv1.BackendType]backend.Codec
	// Events records warnings on the autoscaler when a pod could not be patched; nil
	// records none. Events are never recorded for dry-run requests.
	Events events.EventRecorder
	// Now returns the current time (rollback floors expire); nil means time.Now.
	Now func() time.Time
	// Synced reports whether the informer caches have synced; until then pods are
	// admitted unchanged. Nil means always synced.
	Synced func() bool
}

// NewMutator returns a Mutator reading from r with the backends of cfg. Pods are
// decoded straight into corev1.Pod: the scheme argument is not used (it is kept so
// that callers building both handlers pass the same arguments as to NewValidator).
func NewMutator(r client.Reader, _ *runtime.Scheme, cfg Config) *Mutator {
	cfg = cfg.WithDefaults()
	return &Mutator{Reader: r, Config: cfg, Backends: backend.New(cfg.Config)}
}

func (m *Mutator) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// outcome is the result of one pod decision.
type outcome struct {
	skip     string // skip reason; empty when patched
	warnings []string
	ops      []jsonpatch.Operation
	backend  gpufracv1.BackendType
	gfa      *gpufracv1.GPUFractionAutoscaler // for events
	event    string                           // warning event note on gfa, if any
	// events are further warnings on autoscalers: DuplicateTarget on every autoscaler of
	// a workload that several target, MemoryCapped on the one in charge.
	events []autoscalerEvent
}

// autoscalerEvent is a warning event to record on an autoscaler.
type autoscalerEvent struct {
	gfa          *gpufracv1.GPUFractionAutoscaler
	reason, note string
}

// Event reasons the pod webhook records on autoscalers (events.k8s.io, Warning).
const (
	// EventFractionNotApplied: a pod of the workload was admitted unchanged; the note
	// says why.
	EventFractionNotApplied = "FractionNotApplied"
	// EventDuplicateTarget: several autoscalers target the pod's workload; on the one in
	// charge (the oldest) and on each ignored one.
	EventDuplicateTarget = "DuplicateTarget"
	// EventMemoryCapped: a pod was patched with less memory than recommended (the MPS
	// replica share, or one GPU after overheads); the note names the container and both
	// sizes in MiB.
	EventMemoryCapped = "MemoryCapped"
)

// Handle implements admission.Handler. It never denies a pod: every skip, internal
// error or panic admits the pod unchanged (the API server would otherwise reject the
// pod, whatever the webhook's failurePolicy says).
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return m.handle(ctx, req, nil)
}

// handle is Handle for a request whose pod ServeHTTP already decoded from the review
// (pod), or nil to decode it from req.Object.
func (m *Mutator) handle(ctx context.Context, req admission.Request, pod *corev1.Pod) (resp admission.Response) {
	defer func() {
		if r := recover(); r != nil {
			errorsTotal.WithLabelValues("panic").Inc()
			skippedTotal.WithLabelValues(SkipInternalError).Inc()
			klog.FromContext(ctx).Error(fmt.Errorf("%v", r), "Panic in the pod webhook; pod admitted unchanged", "namespace", req.Namespace)
			resp = admission.Allowed("").WithWarnings("gpufrac: internal error; pod admitted unchanged")
		}
	}()
	o := m.decide(ctx, req, pod)
	dryRun := req.DryRun != nil && *req.DryRun
	if m.Events != nil && !dryRun {
		if o.event != "" && o.gfa != nil {
			m.Events.Eventf(o.gfa, nil, corev1.EventTypeWarning, EventFractionNotApplied, "AdmitPod", "%s", o.event)
		}
		for _, e := range o.events {
			m.Events.Eventf(e.gfa, nil, corev1.EventTypeWarning, e.reason, "AdmitPod", "%s", e.note)
		}
	}
	// A dry run creates no pod: it counts as a request only, never as a pod given a
	// fraction or a GPU pod admitted unchanged.
	if o.skip != "" {
		if o.skip != SkipNotPodCreate && o.skip != SkipAlreadyApplied && !dryRun {
			skippedTotal.WithLabelValues(o.skip).Inc()
		}
		requestsTotal.WithLabelValues(WebhookMutatePods, "unchanged").Inc()
		if len(o.ops) > 0 {
			// No fraction written: only a record the webhook did not write removed
			// (dropForeignRecord).
			if !dryRun {
				recordsRemovedTotal.WithLabelValues(o.skip).Inc()
			}
			return admission.Patched("", o.ops...).WithWarnings(o.warnings...)
		}
		return admission.Allowed("").WithWarnings(o.warnings...)
	}
	if !dryRun {
		patchesTotal.WithLabelValues(string(o.backend)).Inc()
	}
	requestsTotal.WithLabelValues(WebhookMutatePods, "patched").Inc()
	return admission.Patched("", o.ops...).WithWarnings(o.warnings...)
}

// decide is the decision for one admission request: only a Pod CREATE that decodes,
// once the informer caches have synced, goes on to decidePod. pod is the request's pod
// when ServeHTTP already decoded it with the review, or nil to decode req.Object.
func (m *Mutator) decide(ctx context.Context, req admission.Request, pod *corev1.Pod) outcome {
	if req.Operation != admissionv1.Create || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return outcome{skip: SkipNotPodCreate}
	}
	notReady := m.Synced != nil && !m.Synced()
	if pod == nil {
		// Straight into the typed pod, case-sensitive as the API server's decoders: no
		// generic decoding through a scheme.
		pod = &corev1.Pod{}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, pod); err != nil {
			errorsTotal.WithLabelValues("decode").Inc()
			return outcome{skip: SkipInvalidRequestObj, warnings: []string{"gpufrac: pod not decodable; admitted unchanged"}}
		}
	}
	// At CREATE the pod may have no name yet (generateName) and no namespace (it comes
	// from the request path).
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	if notReady {
		return dropForeignRecord(ctx, pod, outcome{skip: SkipNotReady})
	}
	o := m.decidePod(ctx, pod, req.DryRun != nil && *req.DryRun)
	return dropForeignRecord(ctx, pod, o)
}

// dropForeignRecord adds to o, a pod admitted without a fraction written, the removal of
// the gpufrac.io/applied record the pod already carries, with a warning naming it. At
// CREATE such a record was not written for this pod: it came with the pod's template (a
// record copied from a live pod's YAML into a Deployment's template), and every reader
// (the updater, gpus_allocated, gpufrac status and report, the sharing planner) would
// take it as the fraction the pod holds while it holds what its fields ask for. The
// webhook's own record on a reinvocation (reinvocationPolicy IfNeeded) is the one it
// would write now, an empty diff (SkipAlreadyApplied), and is kept; a patched outcome
// overwrites the record anyway. The backend's other keys (limits, annotations) are what
// the pod holds and stay. The pod is still admitted: only the record goes.
func dropForeignRecord(ctx context.Context, pod *corev1.Pod, o outcome) outcome {
	if o.skip == "" || o.skip == SkipAlreadyApplied {
		return o
	}
	if _, ok := pod.Annotations[gpufracv1.AnnotationApplied]; !ok {
		return o
	}
	o.ops = append(o.ops, jsonpatch.Operation{Operation: "remove", Path: "/metadata/annotations/" + escapePointer(gpufracv1.AnnotationApplied)})
	o.warnings = append(o.warnings, fmt.Sprintf("gpufrac: removed the %s record the pod carried from its template (%s): this webhook wrote nothing into the pod", gpufracv1.AnnotationApplied, o.skip))
	klog.FromContext(ctx).V(2).Info("Removed an applied record the webhook did not write", "namespace", pod.Namespace, "pod", podName(pod), "skip", o.skip)
	return o
}

// decidePod is the decision for a decoded pod at CREATE: the autoscaler in charge of its
// workload decides (decideFor), and several autoscalers on the workload add a
// DuplicateTarget warning and events.
func (m *Mutator) decidePod(ctx context.Context, pod *corev1.Pod, dryRun bool) outcome {
	if pod.Annotations[gpufracv1.AnnotationExclude] == "true" {
		return outcome{skip: SkipExcluded}
	}
	if !m.requestsGPU(pod) {
		return outcome{skip: SkipNoGPU}
	}
	ref, all, skip := m.autoscalersOf(ctx, pod)
	if skip != nil {
		return *skip
	}
	// Several autoscalers (admitted while the validating webhook was down, or created
	// concurrently): the oldest is in charge, as in the recommender and the updater.
	gfa, losers := contract.InCharge(all)
	o := m.decideFor(ctx, pod, gfa, dryRun)
	if len(losers) > 0 {
		msg := "gpufrac: " + contract.WinnerMessage(gfa, losers, ref.Kind, ref.Name)
		o.warnings = append([]string{msg}, o.warnings...)
		o.events = append(o.events, autoscalerEvent{gfa: gfa, reason: EventDuplicateTarget, note: msg})
		for _, l := range losers {
			o.events = append(o.events, autoscalerEvent{gfa: l, reason: EventDuplicateTarget, note: "gpufrac: " + contract.DuplicateMessage(l, gfa, ref.Kind, ref.Name)})
		}
	}
	return o
}

// autoscalersOf returns pod's workload (its top-most controller, read from the cache
// once the pod's owner is there) and the autoscalers targeting it. When there is none,
// or the cache cannot answer, it returns the skip outcome instead.
func (m *Mutator) autoscalersOf(ctx context.Context, pod *corev1.Pod) (workload.Ref, []*gpufracv1.GPUFractionAutoscaler, *outcome) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return workload.Ref{}, nil, &outcome{skip: SkipNoController}
	}
	if ok, err := m.waitOwner(ctx, pod.Namespace, owner); err != nil {
		errorsTotal.WithLabelValues("cache").Inc()
		klog.FromContext(ctx).Error(err, "Reading a pod's owner from the cache", "namespace", pod.Namespace, "owner", owner.Kind+"/"+owner.Name)
		return workload.Ref{}, nil, &outcome{skip: SkipInternalError}
	} else if !ok {
		return workload.Ref{}, nil, &outcome{skip: SkipOwnerNotCached, warnings: []string{fmt.Sprintf("gpufrac: %s %s not in the cache after %v; pod admitted unchanged", owner.Kind, owner.Name, m.Config.OwnerWait)}}
	}
	owners := workload.Owners{Reader: m.Reader}
	ref, _ := owners.TopController(ctx, pod)

	var list gpufracv1.GPUFractionAutoscalerList
	if err := m.Reader.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingFields{TargetIndexField: TargetIndexValue(ref.Kind, ref.Name)}); err != nil {
		errorsTotal.WithLabelValues("cache").Inc()
		klog.FromContext(ctx).Error(err, "Listing autoscalers from the cache", "namespace", pod.Namespace)
		return ref, nil, &outcome{skip: SkipInternalError}
	}
	// The index matches kind and name only: an autoscaler whose targetRef names them in
	// another API group targets no such workload for the recommender and the updater
	// (workload.Resolve), and must not be put in charge here either.
	var all []*gpufracv1.GPUFractionAutoscaler
	for i := range list.Items {
		if workload.MayTarget(list.Items[i].Spec.TargetRef) {
			all = append(all, &list.Items[i])
		}
	}
	if len(all) == 0 {
		return ref, nil, &outcome{skip: SkipNoAutoscaler}
	}
	return ref, all, nil
}

// decideFor is the decision for a pod whose workload's autoscaler in charge is gfa;
// dryRun is set for dry-run requests (a backend's other writes are then dry runs too).
func (m *Mutator) decideFor(ctx context.Context, pod *corev1.Pod, gfa *gpufracv1.GPUFractionAutoscaler, dryRun bool) outcome {
	gfr, skip := m.recommendationFor(ctx, gfa)
	if skip != nil {
		return *skip
	}
	bt, specOverhead := gfa.Spec.EffectiveBackend(), int64(0)
	if b := gfa.Spec.Backend; b != nil && b.MemoryOverhead != nil {
		specOverhead = b.MemoryOverhead.Value()
	}
	codec := m.Backends[bt]
	if codec == nil {
		msg := fmt.Sprintf("gpufrac: backend %q of autoscaler %s is unknown; pod admitted unchanged", bt, gfa.Name)
		return outcome{skip: SkipUnknownBackend, warnings: []string{msg}, gfa: gfa, event: msg}
	}
	if s, ok := codec.(backend.AutoscalerScoped); ok {
		codec = s.ForAutoscaler(gfa)
	}
	if dr, ok := codec.(backend.DryRunner); ok && dryRun {
		codec = dr.DryRun()
	}
	if specOverhead < 0 {
		return unsafeOutcome(pod, gfa, backend.Unsafe(backend.UnsafeInvalidValue, "spec.backend.memoryOverhead of autoscaler %s is negative", gfa.Name))
	}
	targets, warnings, err := m.targets(pod, gfa, gfr, m.Config.MemoryOverhead[bt]+specOverhead)
	if err != nil {
		return unsafeOutcome(pod, gfa, err)
	}
	if len(targets) == 0 {
		return outcome{skip: SkipNoContainer}
	}
	if pod.Spec.NodeName != "" && backend.SchedulerPlaced(bt) {
		// Bound to its node at creation: no scheduler places it, so the fraction would
		// not hold (KAI's lose their nvidia.com/gpu and get no share; a plan's
		// nodeSelector is rejected by the kubelet off the pool). The GPU it asked for.
		return unsafeOutcome(pod, gfa, backend.Unsafe(backend.UnsafeNodeBound,
			"it names its node (spec.nodeName %s), so no scheduler places it, and the %s backend's fraction needs one; it keeps the GPU it asked for", pod.Spec.NodeName, bt))
	}

	mod := patchableCopy(pod)
	bw, err := codec.Apply(mod, targets)
	if err != nil {
		return unsafeOutcome(pod, gfa, err)
	}
	warnings = append(warnings, bw...)
	rec := appliedRecord(bt, gfa, gfr, targets)
	// A claim moved to a TimeSlicing template (dra) is a change with no limit written.
	if len(rec.Containers) == 0 && equality.Semantic.DeepEqual(pod.Spec.ResourceClaims, mod.Spec.ResourceClaims) {
		return outcome{skip: SkipNothingWritten, warnings: warnings}
	}
	return patchedOutcome(pod, mod, rec, gfa, targets, warnings)
}

// recommendationFor returns gfa's recommendation when gfa's update mode writes pods at
// creation and the recommendation applies (contract.Applies at the webhook's minimum
// confidence); otherwise, or when the cache cannot answer, it returns the skip outcome.
func (m *Mutator) recommendationFor(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler) (*gpufracv1.GPUFractionRecommendation, *outcome) {
	if mode := gfa.Spec.EffectiveUpdateMode(); mode == gpufracv1.UpdateModeOff || !slices.Contains([]gpufracv1.UpdateMode{gpufracv1.UpdateModeInitial, gpufracv1.UpdateModeRecreate, gpufracv1.UpdateModeInPlaceOrRecreate}, mode) {
		return nil, &outcome{skip: SkipModeOff}
	}
	gfr := &gpufracv1.GPUFractionRecommendation{}
	if err := m.Reader.Get(ctx, types.NamespacedName{Namespace: gfa.Namespace, Name: gfa.Name}, gfr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &outcome{skip: SkipNoRecommendation}
		}
		errorsTotal.WithLabelValues("cache").Inc()
		klog.FromContext(ctx).Error(err, "Reading a recommendation from the cache", "namespace", gfa.Namespace, "name", gfa.Name)
		return nil, &outcome{skip: SkipInternalError}
	}
	if reason, _ := contract.Applies(gfa, gfr, contract.MinConfidence(m.Config.MinConfidence)); reason != "" {
		return nil, &outcome{skip: string(reason)}
	}
	return gfr, nil
}

// unsafeOutcome is the outcome of a pod the backend of gfa cannot patch safely: the
// skip reason of a backend.UnsafeError (else an internal error), and a warning and a
// FractionNotApplied event that name the pod, the backend and err.
func unsafeOutcome(pod *corev1.Pod, gfa *gpufracv1.GPUFractionAutoscaler, err error) outcome {
	reason := SkipInternalError
	var ue *backend.UnsafeError
	if errors.As(err, &ue) {
		reason = ue.Reason
	}
	msg := fmt.Sprintf("gpufrac: pod %s not patched (%s backend): %v", podName(pod), gfa.Spec.EffectiveBackend(), err)
	return outcome{skip: reason, warnings: []string{msg}, gfa: gfa, event: msg}
}

// patchedOutcome is the outcome of patching pod into mod, which the backend wrote for
// gfa's targets: mod gets the applied record rec, and each memory cap becomes a
// MemoryCapped event on gfa besides its warning. A pod that already holds mod's values
// and record (a reinvocation) is SkipAlreadyApplied.
func patchedOutcome(pod, mod *corev1.Pod, rec gpufracv1.AppliedRecord, gfa *gpufracv1.GPUFractionAutoscaler, targets []*backend.Target, warnings []string) outcome {
	b, err := json.Marshal(rec)
	if err != nil {
		errorsTotal.WithLabelValues("encode").Inc()
		return outcome{skip: SkipInternalError}
	}
	backend.SetAnnotation(mod, gpufracv1.AnnotationApplied, string(b))
	if err := invalidAfterPatch(pod, mod); err != nil {
		return unsafeOutcome(pod, gfa, err)
	}
	ops := diffPod(pod, mod)
	if len(ops) == 0 {
		// The pod already holds all of it: a reinvocation (reinvocationPolicy IfNeeded)
		// of a pod this webhook patched. Not a second patched pod, no events again.
		return outcome{skip: SkipAlreadyApplied}
	}
	o := outcome{ops: ops, warnings: warnings, backend: rec.Backend}
	for _, t := range targets {
		// The pod's creator (a ReplicaSet controller) reads no warning: the autoscaler's
		// owner gets each cap as an event too.
		if t.CappedNote != "" {
			o.events = append(o.events, autoscalerEvent{gfa: gfa, reason: EventMemoryCapped, note: t.CappedNote})
		}
	}
	return o
}

// invalidAfterPatch returns an UnsafeError when mod, the pod as patched, fails the API
// server's validation of the metadata and scheduling fields the backends write where
// pod passed it: the annotations' total size (UnsafeAnnotationsSize: a pod near the
// limit already, a last-applied configuration or config hashes) and the labels' and
// nodeSelector's values (UnsafeInvalidLabel: a KAI queue, a sharing plan's config name
// that is no label value). The API server validates the pod after admission and would
// reject it whatever the webhook's failure policy; the pod goes unchanged instead.
func invalidAfterPatch(pod, mod *corev1.Pod) error {
	if err := apivalidation.ValidateAnnotationsSize(mod.Annotations); err != nil && apivalidation.ValidateAnnotationsSize(pod.Annotations) == nil {
		return backend.Unsafe(backend.UnsafeAnnotationsSize,
			"its annotations with those the backend and the applied record add (%d bytes) would exceed the API server's %d bytes", annotationsSize(mod.Annotations), apivalidation.TotalAnnotationSizeLimitB)
	}
	for _, f := range [...]struct {
		path     *field.Path
		was, now map[string]string
	}{
		{labelsPath, pod.Labels, mod.Labels},
		{nodeSelectorPath, pod.Spec.NodeSelector, mod.Spec.NodeSelector},
	} {
		if maps.Equal(f.was, f.now) {
			continue // most backends write neither: no regular expressions per request
		}
		if errs := metav1validation.ValidateLabels(f.now, f.path); len(errs) > 0 && len(metav1validation.ValidateLabels(f.was, f.path)) == 0 {
			return backend.Unsafe(backend.UnsafeInvalidLabel, "the patched pod would be rejected: %v", errs.ToAggregate())
		}
	}
	return nil
}

// The paths invalidAfterPatch names in its messages (read only).
var (
	labelsPath       = field.NewPath("metadata", "labels")
	nodeSelectorPath = field.NewPath("spec", "nodeSelector")
)

// annotationsSize is the size of annotations as the API server counts it (keys and
// values, bytes).
func annotationsSize(annotations map[string]string) int {
	n := 0
	for k, v := range annotations {
		n += len(k) + len(v)
	}
	return n
}

// appliedRecord is the gpufrac.io/applied record of what the backend bt wrote for
// targets from gfa's recommendation gfr; containers where nothing was written are left
// out.
func appliedRecord(bt gpufracv1.BackendType, gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation, targets []*backend.Target) gpufracv1.AppliedRecord {
	rec := gpufracv1.AppliedRecord{
		Backend:                       bt,
		Autoscaler:                    gfa.Name,
		RecommendationGeneration:      gfr.Generation,
		RecommendationResourceVersion: gfr.ResourceVersion,
		ObservedGeneration:            gfr.Status.ObservedGeneration,
		ConfidencePercent:             ptrOr(gfr.Status.ConfidencePercent, 0),
	}
	for _, t := range targets {
		if !t.Wrote() {
			continue
		}
		ac := gpufracv1.AppliedContainer{Name: t.Container}
		if t.WrittenMemoryBytes > 0 {
			ac.Memory = t.RecommendedMemory
			ac.WrittenMemory = resource.NewQuantity(t.WrittenMemoryBytes, resource.BinarySI)
			if t.WrittenMemoryRequestBytes > 0 {
				ac.WrittenMemoryRequest = resource.NewQuantity(t.WrittenMemoryRequestBytes, resource.BinarySI)
			}
		}
		if t.WrittenComputeMilli >= 0 {
			ac.Compute = t.RecommendedCompute
			ac.WrittenCompute = backend.MilliQuantity(t.WrittenComputeMilli)
		}
		if t.WrittenComputeRequestMilli > 0 {
			ac.WrittenComputeRequest = backend.MilliQuantity(t.WrittenComputeRequestMilli)
		}
		rec.Containers = append(rec.Containers, ac)
	}
	return rec
}

// targets builds one backend.Target per regular container and native sidecar of the pod
// that has a target (contract.TargetsOf) with a controlled resource or a compute request
// (a time-sliced container whose policy controls compute); init containers
// that run to completion are never written (where a container sits is read from the pod
// itself). Out-of-range recommendations make the pod unsafe; memory above one GPU after
// adding overhead is capped with a warning.
func (m *Mutator) targets(pod *corev1.Pod, gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation, overhead int64) ([]*backend.Target, []string, error) {
	// A compute rollback floor over a time-sliced recommendation partitions compute
	// (contract.WithFloor), as the updater compares pods.
	recs := contract.WithFloor(gfa, contract.WithPolicy(gfa, contract.TargetsOf(gfa, gfr), m.Config.GPUMemoryBytes), m.now())
	var targets []*backend.Target
	var warnings []string
	for _, pc := range workload.Containers(pod) {
		r, ok := recs[pc.Container.Name]
		if !ok || pc.Type == gpufracv1.ContainerTypeInit {
			continue
		}
		t := &backend.Target{Container: r.Container, Init: pc.InitList(), Index: pc.Index, WrittenComputeMilli: -1, SharingMode: r.SharingMode}
		mw, err := m.memoryTarget(t, r, gfa, overhead)
		if err != nil {
			return nil, nil, err
		}
		cw, err := m.computeTarget(t, r, gfa)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(append(warnings, mw...), cw...)
		// A time-sliced container's compute request is a target of its own: under a
		// policy that controls compute only, it is all there is to write.
		if t.HasMemory || t.HasCompute || t.ComputeRequestMilli > 0 {
			targets = append(targets, t)
		}
	}
	return targets, warnings, nil
}

// memoryTarget sets t's memory from r when memory is recommended and controlled: the
// recommendation within the container policy's maxMemory and minMemory (a
// recommendation that predates them: contract.WithPolicy), at least the rollback floor
// in force (contract.Floor, which wins over maxMemory), plus overhead,
// at most one GPU (with a warning and t.CappedNote), or the recommendation's memoryLimit
// plus overhead where larger (at most one GPU); the upper bound likewise, at least that. A target
// that is not positive or above one GPU is unsafe.
func (m *Mutator) memoryTarget(t *backend.Target, r contract.Target, gfa *gpufracv1.GPUFractionAutoscaler, overhead int64) ([]string, error) {
	q := r.Recommendation.Target.Memory
	if q == nil || !r.ControlsMemory {
		return nil, nil
	}
	gpuMem := resource.NewQuantity(m.Config.GPUMemoryBytes, resource.BinarySI)
	if msg, tooLarge := r.UnwritableMemory(m.Config.GPUMemoryBytes); tooLarge {
		return nil, backend.Unsafe(backend.UnsafeRecommendationSize, "%s", msg)
	} else if msg != "" {
		return nil, backend.Unsafe(backend.UnsafeInvalidValue, "%s", msg)
	}
	var warnings []string
	t.HasMemory = true
	qc := q.DeepCopy()
	// What is written: contract.WrittenOf, the rule the updater's placement check and
	// gpufrac simulate follow too.
	w := contract.WrittenOf(gfa, r, m.now(), overhead, m.Config.GPUMemoryBytes)
	if w.MemoryFloored {
		// A rollback floor is in force (status.updater.floor): at least the floor,
		// whether or not the recommender has caught up. The record says what the pod
		// holds.
		fm, _ := contract.Floor(gfa, t.Container, m.now())
		qc = *resource.NewQuantity(min(fm, m.Config.GPUMemoryBytes), resource.BinarySI)
		warnings = append(warnings, fmt.Sprintf("gpufrac: container %s: memory %s instead of the recommended %s: rollback floor (status.updater.floor, %s)", t.Container, qc.String(), q.String(), gfa.Status.Updater.Floor.Reason))
	}
	if w.Memory > qc.Value() {
		// The recommendation predates the policy's minMemory (raised, the remedy for a
		// workload out of memory, and the recommender has not written since): the user's
		// floor holds at once (contract.WithPolicy: at most one GPU; the updater
		// compares pods with the same). The record says what the pod holds.
		qc = *resource.NewQuantity(w.Memory, resource.BinarySI)
		warnings = append(warnings, fmt.Sprintf("gpufrac: container %s: memory %s instead of the recommended %s: minMemory of the container policy (the recommendation predates it)", t.Container, qc.String(), q.String()))
	}
	if w.Memory < qc.Value() && !w.MemoryFloored {
		// The recommendation predates the policy's maxMemory (lowered, and the recommender
		// has not written since): the user's maximum holds at once (contract.WithPolicy;
		// the updater compares pods with the same). The record says what the pod holds.
		qc = *resource.NewQuantity(w.Memory, resource.BinarySI)
		warnings = append(warnings, fmt.Sprintf("gpufrac: container %s: memory %s instead of the recommended %s: maxMemory of the container policy (the recommendation predates it)", t.Container, qc.String(), q.String()))
	}
	if w.Capped {
		t.CappedNote = fmt.Sprintf("gpufrac: container %s: memory %s plus overhead exceeds one GPU; capped to %s", t.Container, qc.String(), gpuMem.String())
		warnings = append(warnings, t.CappedNote)
	}
	if r.YoungShare && r.Memory > w.Memory {
		// A young workload placed by its observed peak is written at its share
		// (contract.Target.YoungShare): the record says it, the updater compares it, and
		// the limit is the memoryLimit (room above the request, at most one GPU, no
		// warning: it is not need).
		qc = *resource.NewQuantity(r.Memory, resource.BinarySI)
	}
	// The memoryLimit where above what the pod gets (burst room above a request;
	// contract.Target.MemoryLimit) is the limit written; the record keeps the target
	// (qc), which the updater compares. No observed-peak request under a rollback floor
	// that raised the memory, which the request must hold whatever the peak
	// (contract.WithPolicy drops the request under a raised minMemory).
	t.MemoryBytes, t.UpperMemoryBytes, t.PeakMemoryBytes = w.MemoryBytes, w.UpperMemoryBytes, w.PeakMemoryBytes
	t.RecommendedMemory = &qc
	return warnings, nil
}

// computeTarget sets t's compute request from r for a time-sliced container
// (contract.Target.ComputeRequest), and t's compute from r when compute is recommended
// and controlled: the
// recommendation within the container policy's minCompute and maxCompute (a
// recommendation that predates them: contract.WithPolicy), at least the rollback floor
// in force (contract.Floor) and, while a horizontal autoscaler holds compute, what the
// workload's pods hold (r.Compute, contract.HeldCompute), with a warning for each. A
// target outside 0–1 GPU is unsafe.
func (m *Mutator) computeTarget(t *backend.Target, r contract.Target, gfa *gpufracv1.GPUFractionAutoscaler) ([]string, error) {
	q := r.Recommendation.Target.Compute
	if r.ComputeRequest > 0 {
		// Time-sliced: a placement request without a limit (contract.Target.ComputeRequest).
		t.ComputeRequestMilli = r.ComputeRequest
	}
	if q == nil || !r.ControlsCompute {
		return nil, nil
	}
	if msg := r.UnwritableCompute(); msg != "" {
		return nil, backend.Unsafe(backend.UnsafeInvalidValue, "%s", msg)
	}
	var warnings []string
	t.HasCompute = true
	// What is written: contract.WrittenOf, the rule the updater's placement check and
	// gpufrac simulate follow too.
	w := contract.WrittenOf(gfa, r, m.now(), 0, m.Config.GPUMemoryBytes)
	t.ComputeMilli = w.ComputeMilli
	qc := q.DeepCopy()
	_, fc := contract.Floor(gfa, t.Container, m.now())
	if fc > q.MilliValue() {
		warnings = append(warnings, fmt.Sprintf("gpufrac: container %s: compute %dm instead of the recommended %s: rollback floor (status.updater.floor)", t.Container, min(fc, 1000), q.String()))
	}
	held, isHeld := contract.HeldCompute(gfa, t.Container, 0)
	switch v := r.Compute; {
	case v > q.MilliValue() && v > min(fc, 1000) && isHeld && v == held:
		// r.Compute is above the recommendation while a horizontal autoscaler scales on
		// GPU utilisation (contract.HeldCompute): never less compute than the workload's
		// pods hold. The record says what the pod holds.
		warnings = append(warnings, fmt.Sprintf("gpufrac: container %s: compute %dm instead of the recommended %s: a horizontal autoscaler scales the workload on GPU utilisation and its pods hold %dm (ComputeShrinkHeld)", t.Container, v, q.String(), v))
	case v > q.MilliValue() && v > min(fc, 1000):
		// The recommendation predates the policy's minCompute (contract.WithPolicy).
		warnings = append(warnings, fmt.Sprintf("gpufrac: container %s: compute %dm instead of the recommended %s: minCompute of the container policy (the recommendation predates it)", t.Container, v, q.String()))
	case w.ComputeMilli < q.MilliValue():
		// The recommendation predates the policy's maxCompute (contract.WithPolicy).
		warnings = append(warnings, fmt.Sprintf("gpufrac: container %s: compute %dm instead of the recommended %s: maxCompute of the container policy (the recommendation predates it)", t.Container, w.ComputeMilli, q.String()))
	}
	if w.ComputeMilli != q.MilliValue() {
		qc = *resource.NewMilliQuantity(w.ComputeMilli, resource.DecimalSI)
	}
	t.RecommendedCompute = &qc
	return warnings, nil
}

// requestsGPU mirrors the webhook's match condition (Registration.MatchConditions): a
// request or limit name with the GPU prefix in a regular container or a native sidecar,
// a KAI fraction annotation, or a DRA claim (spec.resourceClaims).
func (m *Mutator) requestsGPU(pod *corev1.Pod) bool {
	for _, c := range workload.Containers(pod) {
		if c.Type != gpufracv1.ContainerTypeInit && backend.IsGPUContainer(c.Container, m.Config.GPUResourcePrefix) {
			return true
		}
	}
	_, mem := pod.Annotations[m.Config.KAI.MemoryAnnotation]
	_, frac := pod.Annotations[m.Config.KAI.FractionAnnotation]
	return mem || frac || len(pod.Spec.ResourceClaims) > 0
}

// waitOwner polls the cache (never the API server) until a ReplicaSet or Job owner of a
// new pod is there, for at most Config.OwnerWait. Other owner kinds return true at once.
// It returns false when the owner is still missing, and an error for cache errors other
// than NotFound.
func (m *Mutator) waitOwner(ctx context.Context, ns string, owner *metav1.OwnerReference) (bool, error) {
	gvk, ok := intermediateOwners[owner.Kind]
	if !ok {
		return true, nil
	}
	if gv, err := schema.ParseGroupVersion(owner.APIVersion); err != nil || gv.Group != gvk.Group {
		return true, nil
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	deadline := time.Now().Add(m.Config.OwnerWait)
	for {
		err := m.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: owner.Name}, obj)
		if err == nil {
			return true, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		if !time.Now().Before(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Namespace + "/" + pod.Name
	}
	return pod.Namespace + "/" + pod.GenerateName + "*"
}

func ptrOr[T any](p *T, d T) T {
	if p == nil {
		return d
	}
	return *p
}

var _ admission.Handler = &Mutator{}
