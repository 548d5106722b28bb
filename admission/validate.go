package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/robfig/cron/v3"
	admissionv1 "k8s.io/api/admission/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/workload"
)

// Validator is the validating admission handler for GPUFractionAutoscaler CREATE and
// UPDATE. It runs ValidateAutoscaler, checks that the target kind is served by the API
// server, and rejects a second autoscaler for a workload that already has one, naming
// the first. A denial is a 422 Invalid status whose causes name each wrong field.
type Validator struct {
	// Reader lists GPUFractionAutoscalers by TargetIndexField (an informer cache).
	Reader client.Reader
	// Mapper resolves target kinds that are not native workloads (scale subresource
	// kinds); nil rejects every non-native kind.
	Mapper meta.RESTMapper

	decoder admission.Decoder
}

// NewValidator returns a Validator; scheme must know the gpufrac types.
func NewValidator(r client.Reader, mapper meta.RESTMapper, scheme *runtime.Scheme) *Validator {
	return &Validator{Reader: r, Mapper: mapper, decoder: admission.NewDecoder(scheme)}
}

var autoscalerGK = schema.GroupKind{Group: gpufracv1.GroupVersion.Group, Kind: "GPUFractionAutoscaler"}

// Handle implements admission.Handler.
func (v *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		requestsTotal.WithLabelValues(WebhookValidateAutoscaler, "allowed").Inc()
		return admission.Allowed("")
	}
	gfa := &gpufracv1.GPUFractionAutoscaler{}
	if err := v.decoder.Decode(req, gfa); err != nil {
		errorsTotal.WithLabelValues("decode").Inc()
		requestsTotal.WithLabelValues(WebhookValidateAutoscaler, "error").Inc()
		return admission.Errored(http.StatusBadRequest, err)
	}
	if gfa.Namespace == "" {
		gfa.Namespace = req.Namespace
	}
	var old *gpufracv1.GPUFractionAutoscaler
	if req.Operation == admissionv1.Update {
		old = &gpufracv1.GPUFractionAutoscaler{}
		if err := v.decoder.DecodeRaw(req.OldObject, old); err != nil {
			errorsTotal.WithLabelValues("decode").Inc()
			requestsTotal.WithLabelValues(WebhookValidateAutoscaler, "error").Inc()
			return admission.Errored(http.StatusBadRequest, err)
		}
		// Never block metadata-only updates (finalizers, labels) or deletion of an object
		// that was admitted while the webhook was down.
		if gfa.DeletionTimestamp != nil || equality.Semantic.DeepEqual(old.Spec, gfa.Spec) {
			requestsTotal.WithLabelValues(WebhookValidateAutoscaler, "allowed").Inc()
			return admission.Allowed("")
		}
	}
	errs := ValidateAutoscaler(gfa)
	errs = append(errs, v.validateTarget(ctx, gfa)...)
	if old == nil || old.Spec.TargetRef.Kind != gfa.Spec.TargetRef.Kind || old.Spec.TargetRef.Name != gfa.Spec.TargetRef.Name {
		errs = append(errs, v.validateUnique(ctx, gfa)...)
	}
	if len(errs) > 0 {
		requestsTotal.WithLabelValues(WebhookValidateAutoscaler, "denied").Inc()
		st := apierrors.NewInvalid(autoscalerGK, gfa.Name, errs).ErrStatus
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &st}}
	}
	requestsTotal.WithLabelValues(WebhookValidateAutoscaler, "allowed").Inc()
	return admission.Allowed("")
}

// validateTarget checks that the target kind is a native workload or a kind the API
// server serves, namespaced. The target object itself need not exist yet.
func (v *Validator) validateTarget(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler) field.ErrorList {
	ref := gfa.Spec.TargetRef
	p := field.NewPath("spec", "targetRef")
	if ref.Kind == "" || ref.Name == "" {
		return nil // reported by ValidateAutoscaler
	}
	if _, err := schema.ParseGroupVersion(ref.APIVersion); err != nil {
		return nil // reported by ValidateAutoscaler
	}
	// workload.Resolve knows which kinds are native; with a reader that finds nothing it
	// answers ErrNotFound for a native kind and asks the scale checker for the others.
	_, err := workload.Resolve(ctx, notFoundReader{}, v.kindServed, gfa.Namespace, ref)
	switch {
	case err == nil, errors.Is(err, workload.ErrNotFound):
		return nil
	case errors.Is(err, workload.ErrUnsupported):
		return field.ErrorList{field.Invalid(p.Child("kind"), ref.Kind, fmt.Sprintf("not a resolvable workload kind in apiVersion %q: %v", ref.APIVersion, err))}
	default:
		return field.ErrorList{field.InternalError(p.Child("kind"), fmt.Errorf("checking the kind: %w", err))}
	}
}

// kindServed is the workload.ScaleChecker of validateTarget: the kind must be served
// and namespaced. Whether it has a scale subresource is checked by the recommender once
// the object exists.
func (v *Validator) kindServed(_ context.Context, _ string, gvk schema.GroupVersionKind, _ string) error {
	if v.Mapper == nil {
		return fmt.Errorf("%w: kind %s is not a native workload", workload.ErrUnsupported, gvk.Kind)
	}
	var versions []string
	if gvk.Version != "" {
		versions = []string{gvk.Version}
	}
	m, err := v.Mapper.RESTMapping(gvk.GroupKind(), versions...)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("%w: the API server serves no kind %s", workload.ErrUnsupported, gvk.GroupKind())
		}
		return err
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return fmt.Errorf("%w: kind %s is cluster-scoped; a target must be in the autoscaler's namespace", workload.ErrUnsupported, gvk.Kind)
	}
	return nil
}

// validateUnique rejects the autoscaler when another one in its namespace already
// targets the same workload.
func (v *Validator) validateUnique(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler) field.ErrorList {
	ref := gfa.Spec.TargetRef
	if ref.Kind == "" || ref.Name == "" || v.Reader == nil {
		return nil
	}
	var list gpufracv1.GPUFractionAutoscalerList
	if err := v.Reader.List(ctx, &list, client.InNamespace(gfa.Namespace), client.MatchingFields{TargetIndexField: TargetIndexValue(ref.Kind, ref.Name)}); err != nil {
		errorsTotal.WithLabelValues("cache").Inc()
		return field.ErrorList{field.InternalError(field.NewPath("spec", "targetRef"), fmt.Errorf("listing autoscalers: %w", err))}
	}
	var others []string
	for i := range list.Items {
		if list.Items[i].Name != gfa.Name || gfa.Name == "" {
			others = append(others, list.Items[i].Name)
		}
	}
	if len(others) == 0 {
		return nil
	}
	slices.Sort(others)
	return field.ErrorList{field.Duplicate(field.NewPath("spec", "targetRef"),
		fmt.Sprintf("%s %s is already the target of autoscaler %s; a workload may have only one autoscaler", ref.Kind, ref.Name, strings.Join(others, ", ")))}
}

// ValidateAutoscaler checks what can be checked without the API server: target
// reference syntax (the target is always in the autoscaler's namespace: a name with "/"
// is rejected), update mode, resize windows (cron schedule in standard 5-field syntax or
// an @-descriptor other than @every, IANA time zone, positive duration), backend type and
// overhead, per-container bounds (min ≤ max, compute 0–1), and the latency guardrail
// (PromQL that parses to a scalar or instant vector, positive objective). Each error
// names its field.
func ValidateAutoscaler(gfa *gpufracv1.GPUFractionAutoscaler) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	errs = append(errs, validateTargetRef(gfa.Spec.TargetRef, spec.Child("targetRef"))...)
	if up := gfa.Spec.UpdatePolicy; up != nil {
		p := spec.Child("updatePolicy")
		modes := []string{string(gpufracv1.UpdateModeOff), string(gpufracv1.UpdateModeInitial), string(gpufracv1.UpdateModeRecreate), string(gpufracv1.UpdateModeInPlaceOrRecreate)}
		if up.UpdateMode != nil && !slices.Contains(modes, string(*up.UpdateMode)) {
			errs = append(errs, field.NotSupported(p.Child("updateMode"), *up.UpdateMode, modes))
		}
		if up.MinReplicas != nil && *up.MinReplicas < 1 {
			errs = append(errs, field.Invalid(p.Child("minReplicas"), *up.MinReplicas, "must be at least 1"))
		}
		for i, w := range up.ResizeWindows {
			errs = append(errs, validateWindow(w, p.Child("resizeWindows").Index(i))...)
		}
	}
	if b := gfa.Spec.Backend; b != nil {
		p := spec.Child("backend")
		names := make([]string, len(backend.Types))
		for i, t := range backend.Types {
			names[i] = string(t)
		}
		if b.Type != "" && !slices.Contains(backend.Types, b.Type) {
			errs = append(errs, field.NotSupported(p.Child("type"), b.Type, names))
		}
		if b.MemoryOverhead != nil && b.MemoryOverhead.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Child("memoryOverhead"), b.MemoryOverhead.String(), "must not be negative (bytes)"))
		}
	}
	if rp := gfa.Spec.ResourcePolicy; rp != nil {
		seen := map[string]bool{}
		for i := range rp.ContainerPolicies {
			p := spec.Child("resourcePolicy", "containerPolicies").Index(i)
			cp := &rp.ContainerPolicies[i]
			if cp.ContainerName == "" {
				errs = append(errs, field.Required(p.Child("containerName"), `a container name or "*"`))
			} else if seen[cp.ContainerName] {
				errs = append(errs, field.Duplicate(p.Child("containerName"), cp.ContainerName))
			}
			seen[cp.ContainerName] = true
			errs = append(errs, validateContainerPolicy(cp, p)...)
		}
	}
	if g := gfa.Spec.LatencyGuardrail; g != nil {
		p := spec.Child("latencyGuardrail")
		errs = append(errs, validatePromQL(g.Query, p.Child("query"))...)
		if g.Objective.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child("objective"), g.Objective.Duration.String(), "must be a positive duration such as 250ms"))
		}
		if g.NearPercent != nil && (*g.NearPercent < 0 || *g.NearPercent > 100) {
			errs = append(errs, field.Invalid(p.Child("nearPercent"), *g.NearPercent, "must be a percentage 0–100"))
		}
	}
	return errs
}

func validateTargetRef(ref autoscalingv1.CrossVersionObjectReference, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ref.Kind == "" {
		errs = append(errs, field.Required(p.Child("kind"), "the workload's kind, e.g. Deployment"))
	}
	switch {
	case ref.Name == "":
		errs = append(errs, field.Required(p.Child("name"), "the workload's name"))
	case strings.Contains(ref.Name, "/"):
		errs = append(errs, field.Invalid(p.Child("name"), ref.Name, "must be a plain name: an autoscaler targets a workload in its own namespace only, and targetRef has no namespace"))
	default:
		for _, msg := range validation.IsDNS1123Subdomain(ref.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), ref.Name, msg))
		}
	}
	if _, err := schema.ParseGroupVersion(ref.APIVersion); err != nil {
		errs = append(errs, field.Invalid(p.Child("apiVersion"), ref.APIVersion, err.Error()))
	}
	return errs
}

// windowParser accepts standard 5-field cron expressions and @-descriptors.
var windowParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

func validateWindow(w gpufracv1.ResizeWindow, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	s := strings.TrimSpace(w.Schedule)
	switch {
	case s == "":
		errs = append(errs, field.Required(p.Child("schedule"), `a 5-field cron expression such as "0 2 * * *"`))
	case strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ="):
		errs = append(errs, field.Invalid(p.Child("schedule"), w.Schedule, "set the time zone in timeZone, not in the schedule"))
	case strings.HasPrefix(s, "@every"):
		errs = append(errs, field.Invalid(p.Child("schedule"), w.Schedule, "@every is not anchored to wall-clock time; use a 5-field cron expression"))
	default:
		if sched, err := windowParser.Parse(s); err != nil {
			errs = append(errs, field.Invalid(p.Child("schedule"), w.Schedule, fmt.Sprintf("not a standard 5-field cron expression (minute hour day-of-month month day-of-week): %v", err)))
		} else if sched.Next(time.Now()).IsZero() {
			errs = append(errs, field.Invalid(p.Child("schedule"), w.Schedule, "matches no date within five years (such as February 30): the window would never open"))
		}
	}
	if w.Duration.Duration < gpufracv1.MinResizeWindowDuration {
		errs = append(errs, field.Invalid(p.Child("duration"), w.Duration.Duration.String(), fmt.Sprintf("must be a duration of at least %v such as 2h: a shorter window can open and close between two updater cycles", gpufracv1.MinResizeWindowDuration)))
	}
	if w.TimeZone != "" {
		if w.TimeZone == "Local" {
			errs = append(errs, field.Invalid(p.Child("timeZone"), w.TimeZone, "Local depends on the server; use an IANA name such as Europe/Berlin"))
		} else if _, err := time.LoadLocation(w.TimeZone); err != nil {
			errs = append(errs, field.Invalid(p.Child("timeZone"), w.TimeZone, fmt.Sprintf("not a known IANA time zone: %v", err)))
		}
	}
	return errs
}

func validateContainerPolicy(cp *gpufracv1.ContainerPolicy, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if cp.Mode != nil && *cp.Mode != gpufracv1.ContainerScalingModeAuto && *cp.Mode != gpufracv1.ContainerScalingModeOff {
		errs = append(errs, field.NotSupported(p.Child("mode"), *cp.Mode, []string{string(gpufracv1.ContainerScalingModeAuto), string(gpufracv1.ContainerScalingModeOff)}))
	}
	nonNeg := func(q *resource.Quantity, name string) {
		if q != nil && q.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Child(name), q.String(), "must not be negative"))
		}
	}
	nonNeg(cp.MinMemory, "minMemory")
	nonNeg(cp.MaxMemory, "maxMemory")
	nonNeg(cp.MinCompute, "minCompute")
	nonNeg(cp.MaxCompute, "maxCompute")
	if cp.MinMemory != nil && cp.MaxMemory != nil && cp.MinMemory.Cmp(*cp.MaxMemory) > 0 {
		errs = append(errs, field.Invalid(p.Child("minMemory"), cp.MinMemory.String(), fmt.Sprintf("must be less than or equal to maxMemory (%s)", cp.MaxMemory.String())))
	}
	if cp.MinCompute != nil && cp.MaxCompute != nil && cp.MinCompute.Cmp(*cp.MaxCompute) > 0 {
		errs = append(errs, field.Invalid(p.Child("minCompute"), cp.MinCompute.String(), fmt.Sprintf("must be less than or equal to maxCompute (%s)", cp.MaxCompute.String())))
	}
	one := resource.MustParse("1")
	for name, q := range map[string]*resource.Quantity{"minCompute": cp.MinCompute, "maxCompute": cp.MaxCompute} {
		if q != nil && q.Cmp(one) > 0 {
			errs = append(errs, field.Invalid(p.Child(name), q.String(), "is a share of one GPU and must be at most 1"))
		}
	}
	for j, r := range cp.ControlledResources {
		if r != gpufracv1.ResourceMemory && r != gpufracv1.ResourceCompute {
			errs = append(errs, field.NotSupported(p.Child("controlledResources").Index(j), r, []string{string(gpufracv1.ResourceMemory), string(gpufracv1.ResourceCompute)}))
		}
	}
	if h := cp.MemoryHeadroomPercent; h != nil && (*h < 0 || *h > 200) {
		errs = append(errs, field.Invalid(p.Child("memoryHeadroomPercent"), *h, "must be 0–200 (percent)"))
	}
	for j, m := range cp.AllowedSharingModes {
		modes := []string{string(gpufracv1.SharingModeExclusive), string(gpufracv1.SharingModeMPS), string(gpufracv1.SharingModeTimeSlicing)}
		if !slices.Contains(modes, string(m)) {
			errs = append(errs, field.NotSupported(p.Child("allowedSharingModes").Index(j), m, modes))
		}
	}
	return errs
}

// promQLParser parses guardrail queries with Prometheus' default options.
var promQLParser = parser.NewParser(parser.Options{})

func validatePromQL(q string, p *field.Path) field.ErrorList {
	if strings.TrimSpace(q) == "" {
		return field.ErrorList{field.Required(p, "a PromQL expression returning the latency in seconds")}
	}
	expr, err := promQLParser.ParseExpr(q)
	if err != nil {
		return field.ErrorList{field.Invalid(p, q, fmt.Sprintf("not valid PromQL: %v", err))}
	}
	if t := expr.Type(); t != parser.ValueTypeScalar && t != parser.ValueTypeVector {
		return field.ErrorList{field.Invalid(p, q, fmt.Sprintf("must return a scalar or an instant vector, not a %s", t))}
	}
	return nil
}

// notFoundReader finds nothing; validateTarget uses it to ask workload.Resolve about a
// kind without reading the target object.
type notFoundReader struct{}

// Get answers NotFound for every object.
func (notFoundReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: obj.GetObjectKind().GroupVersionKind().Kind}, key.Name)
}

// List returns an empty list.
func (notFoundReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

var _ admission.Handler = &Validator{}
