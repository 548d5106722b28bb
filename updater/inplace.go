package updater

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

// ErrNotInPlace is returned (wrapped) when the change a pod needs touches more than its
// annotations, so it cannot be made to a running pod.
var ErrNotInPlace = errors.New("change needs more than annotations")

// InPlacer changes a running pod to its autoscaler's current recommendation without
// replacing it.
type InPlacer interface {
	// Apply writes the recommendation into pod in place. It returns false and no error
	// when there is nothing to write (the webhook logic would leave the pod unchanged),
	// an error wrapping ErrNotInPlace when the change needs more than annotations, and
	// API errors.
	Apply(ctx context.Context, pod *corev1.Pod) (bool, error)
}

// MutatorInPlacer runs the admission webhook's own decision (its pod handler,
// admission.Mutator: the same backends, overheads and rounding) on a copy of a running
// pod, as if it were being created, and writes the resulting annotation changes — the
// annotations backend's gpufrac.io/* keys and the gpufrac.io/applied record — with a
// merge patch of metadata.annotations, guarded by the pod's resourceVersion.
type MutatorInPlacer struct {
	// Mutator decides what the webhook would write: admission.Mutator, whose Reader
	// must be indexed with admission.AddIndexes.
	Mutator ctrladmission.Handler
	// Client patches pods.
	Client client.Client
	// Annotations are the annotations backend's keys as the webhook writes them
	// (backend.Config.Annotations; zero: the default keys): the keys the pod's earlier
	// record says gpufrac wrote (backend.AnnotationsConfig.WrittenKeys) are written
	// afresh, so a sharing-mode move takes the old compute partition or request out of
	// the pod with the record.
	Annotations backend.AnnotationsConfig
}

// Apply implements InPlacer.
func (m *MutatorInPlacer) Apply(ctx context.Context, pod *corev1.Pod) (bool, error) {
	// The webhook logic sees the pod without the annotations backend's keys its record
	// says gpufrac wrote (WrittenKeys; a record that does not parse names none): it
	// writes them afresh, as into a new pod, so a key the recommendation no longer
	// writes (a compute partition after a move to time-slicing) goes, and the pod
	// totals, which count the keys a pod carries for the containers not written (a
	// user's own), never count one of gpufrac's old ones.
	in := pod
	old, _ := gpufracv1.ParseApplied(pod.Annotations)
	if stale := m.Annotations.WrittenKeys(old); len(stale) > 0 {
		in = pod.DeepCopy()
		for _, k := range stale {
			delete(in.Annotations, k)
		}
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return false, err
	}
	req := ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       types.UID("gpufrac-updater-" + string(pod.UID)),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: pod.Namespace,
		Name:      pod.Name,
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
		DryRun:    ptrTo(true), // no events from the webhook logic
	}}
	resp := m.Mutator.Handle(ctx, req)
	if !resp.Allowed {
		return false, fmt.Errorf("webhook logic refused the pod: %v", resp.Result)
	}
	if len(resp.Patches) == 0 {
		if len(resp.Warnings) > 0 {
			return false, fmt.Errorf("webhook logic left the pod unchanged: %s", strings.Join(resp.Warnings, "; "))
		}
		return false, nil
	}
	ann, err := applyAnnotationOps(in.Annotations, resp.Patches)
	if err != nil {
		return false, err
	}
	if maps.Equal(ann, pod.Annotations) {
		return false, nil // written afresh, the pod already holds all of it
	}
	orig := pod.DeepCopy()
	mod := pod.DeepCopy()
	mod.Annotations = ann
	if err := m.Client.Patch(ctx, mod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, err
	}
	return true, nil
}

// applyAnnotationOps applies JSON patch operations that touch only
// /metadata/annotations to a copy of ann. Any other path returns ErrNotInPlace.
func applyAnnotationOps(ann map[string]string, ops []jsonpatch.JsonPatchOperation) (map[string]string, error) {
	out := make(map[string]string, len(ann)+4)
	for k, v := range ann {
		out[k] = v
	}
	const base = "/metadata/annotations"
	for _, op := range ops {
		switch {
		case op.Path == base && (op.Operation == "add" || op.Operation == "replace"):
			b, err := json.Marshal(op.Value)
			if err != nil {
				return nil, err
			}
			m := map[string]string{}
			if err := json.Unmarshal(b, &m); err != nil {
				return nil, fmt.Errorf("annotations value: %w", err)
			}
			out = m
		case strings.HasPrefix(op.Path, base+"/"):
			key := unescapePointer(strings.TrimPrefix(op.Path, base+"/"))
			switch op.Operation {
			case "add", "replace":
				b, err := json.Marshal(op.Value)
				if err != nil {
					return nil, err
				}
				var v string
				if err := json.Unmarshal(b, &v); err != nil {
					return nil, fmt.Errorf("annotation %s: %w", key, err)
				}
				out[key] = v
			case "remove":
				delete(out, key)
			default:
				return nil, fmt.Errorf("%w: operation %s on %s", ErrNotInPlace, op.Operation, op.Path)
			}
		default:
			return nil, fmt.Errorf("%w: %s", ErrNotInPlace, op.Path)
		}
	}
	return out, nil
}

// unescapePointer undoes RFC 6901 escaping of one reference token.
func unescapePointer(s string) string {
	return strings.NewReplacer("~1", "/", "~0", "~").Replace(s)
}

func ptrTo[T any](v T) *T { return &v }

// changeInPlace is the in-place action: it writes c's change into the running pod
// (InPlacer). It returns true when c is done with — changed, or skipped with the reason
// on c — and false when the pod cannot be changed in place (ErrNotInPlace) and is to be
// recreated: c's action is then Evict.
func (u *Updater) changeInPlace(ctx context.Context, now time.Time, c *candidate) bool {
	log := klog.FromContext(ctx).WithValues("autoscaler", klog.KObj(c.p.gfa), "pod", klog.KObj(c.pod))
	changed, err := u.InPlace.Apply(ctx, c.pod)
	switch {
	case errors.Is(err, ErrNotInPlace):
		log.Info("Cannot change the pod in place; recreating it", "reason", err.Error())
		c.action = gpufracv1.PodUpdateEvict
		c.upd.Action = c.action
		return false
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		// The pod changed (or went) since the cache saw it; next cycle decides again.
		c.skip(SkipInPlaceError, "the pod changed meanwhile: "+err.Error())
	case err != nil:
		inPlaceTotal.WithLabelValues(ResultError).Inc()
		c.skip(SkipInPlaceError, err.Error())
		log.Error(err, "In-place update failed")
	case !changed:
		c.skip(SkipInPlaceError, "the webhook logic would write nothing into this pod")
	default:
		u.changedInPlace(c, now)
		log.Info("Changed pod in place", "reason", c.need.Reason())
	}
	return true
}

// changedInPlace records an in-place change of c's pod at now: the hysteresis round,
// status.updater.lastInPlaceUpdateTime, a shrink to verify, and the events.
func (u *Updater) changedInPlace(c *candidate, now time.Time) {
	p := c.p
	inPlaceTotal.WithLabelValues(ResultApplied).Inc()
	u.hyst.Replaced(p.ref.String(), now, c.need)
	p.acted = true
	p.st.LastInPlaceUpdateTime = secs(now)
	if c.need.Shrink {
		p.recordShrink(c.alloc, now, u.Config.VerificationPeriod)
	}
	u.podEvent(c, corev1.EventTypeNormal, EventInPlace, "UpdateInPlace", "changed in place: "+truncate(c.need.Reason(), 600))
	// Applied: not listed as pending any more.
	c.done()
}
