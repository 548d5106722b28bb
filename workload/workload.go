// Package workload maps pods to the workloads that own them: the top-most controller of a
// live pod through owner references, and the workload of a pod that no longer exists
// through kube-state-metrics ownership series or the controllers' pod naming conventions.
// The recommender, the admission webhook and the updater all use it, so they agree on
// which pods an autoscaler covers.
package workload

import (
	"context"
	"errors"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Ref is a workload in a namespace: the top-most controller of its pods.
type Ref struct {
	Namespace string
	Kind      string
	Name      string
}

// String renders the ref as namespace/Kind/name.
func (r Ref) String() string { return r.Namespace + "/" + r.Kind + "/" + r.Name }

// nativeKinds are the workload kinds resolved without a scale subresource, by group.
var nativeKinds = map[string]schema.GroupVersionKind{
	"Deployment":  {Group: "apps", Version: "v1", Kind: "Deployment"},
	"StatefulSet": {Group: "apps", Version: "v1", Kind: "StatefulSet"},
	"ReplicaSet":  {Group: "apps", Version: "v1", Kind: "ReplicaSet"},
	"DaemonSet":   {Group: "apps", Version: "v1", Kind: "DaemonSet"},
	"Job":         {Group: "batch", Version: "v1", Kind: "Job"},
	"CronJob":     {Group: "batch", Version: "v1", Kind: "CronJob"},
}

// ErrUnsupported is returned (wrapped) when a target kind is neither native nor has a
// scale subresource.
var ErrUnsupported = errors.New("unsupported target")

// ErrNotFound is returned (wrapped) when the target object does not exist.
var ErrNotFound = errors.New("target not found")

// ScaleChecker reports whether a non-native kind has a scale subresource and the object
// exists; it returns an error wrapping ErrUnsupported or ErrNotFound otherwise.
type ScaleChecker func(ctx context.Context, namespace string, gvk schema.GroupVersionKind, name string) error

// Resolve checks that an autoscaler's target exists and is supported, and returns its Ref.
// Native kinds are read from the cache; other kinds must have a scale subresource.
// Errors wrap ErrUnsupported or ErrNotFound, or are API errors. A ReplicaSet or Job
// that another object controls (a Deployment's ReplicaSet, a CronJob's Job) is
// unsupported, with an error that names its controller: its pods are the controller's
// workload (Owners.TopController), which every component decides them by, so an
// autoscaler of the ReplicaSet or Job would match no pod.
func Resolve(ctx context.Context, c client.Reader, scale ScaleChecker, namespace string, ref autoscalingv1.CrossVersionObjectReference) (Ref, error) {
	r := Ref{Namespace: namespace, Kind: ref.Kind, Name: ref.Name}
	if ref.Kind == "" || ref.Name == "" {
		return r, fmt.Errorf("%w: targetRef needs kind and name", ErrUnsupported)
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return r, fmt.Errorf("%w: targetRef.apiVersion %q: %v", ErrUnsupported, ref.APIVersion, err)
	}
	if gvk, ok := nativeKinds[ref.Kind]; ok && (ref.APIVersion == "" || gv.Group == gvk.Group) {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return r, fmt.Errorf("%w: %s %s/%s does not exist", ErrNotFound, ref.Kind, namespace, ref.Name)
			}
			return r, err
		}
		if _, between := intermediate[ref.Kind]; between {
			if owner := metav1.GetControllerOfNoCopy(obj); owner != nil {
				return r, fmt.Errorf("%w: %s %s/%s is controlled by %s %s, whose pods they are: target %s %s instead",
					ErrUnsupported, ref.Kind, namespace, ref.Name, owner.Kind, owner.Name, owner.Kind, owner.Name)
			}
		}
		return r, nil
	}
	if scale == nil {
		return r, fmt.Errorf("%w: kind %s is not a native workload and scale subresources are not checked", ErrUnsupported, ref.Kind)
	}
	return r, scale(ctx, namespace, gv.WithKind(ref.Kind), ref.Name)
}

// MayTarget reports whether ref, an autoscaler's spec.targetRef, can name a workload
// whose pods' top-most controller (Owners.TopController) has ref's kind and name: its
// apiVersion parses, and a native kind (Deployment, StatefulSet, …) is in its own API
// group or gives none (Resolve takes a native kind's name in another group for another
// kind, which no pod's top-most controller of that name is). An autoscaler for which it
// is false
// (extensions/v1beta1 Deployment, admitted while the validating webhook was down) is
// never resolved by the recommender and the updater, so the webhook must not count it
// among the workload's autoscalers either.
func MayTarget(ref autoscalingv1.CrossVersionObjectReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false
	}
	gvk, native := nativeKinds[ref.Kind]
	return !native || ref.APIVersion == "" || gv.Group == gvk.Group
}

// Owners finds the top-most controller of pods, memoising the owner lookups of one cycle.
// It reads ReplicaSets and Jobs (the kinds that sit between a pod and its workload) from
// the cache; any other owner kind is taken as top-most.
type Owners struct {
	Reader client.Reader
	memo   map[Ref]Ref
}

// intermediate kinds whose own controller owns the workload.
var intermediate = map[string]schema.GroupVersionKind{
	"ReplicaSet": nativeKinds["ReplicaSet"],
	"Job":        nativeKinds["Job"],
}

// TopController returns the top-most controller of a pod, or false for a bare pod. In an
// owner cycle (the API server accepts one) it is the first owner of the chain met again.
func (o *Owners) TopController(ctx context.Context, pod *corev1.Pod) (Ref, bool) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return Ref{}, false
	}
	return o.top(ctx, Ref{Namespace: pod.Namespace, Kind: owner.Kind, Name: owner.Name}), true
}

func (o *Owners) top(ctx context.Context, r Ref) Ref {
	if o.memo == nil {
		o.memo = map[Ref]Ref{}
	}
	if t, ok := o.memo[r]; ok {
		return t
	}
	t := r
	// Owner references may form a cycle (the API server accepts one): r is its own top
	// until its owners are known, so a chain that comes back to r ends there instead of
	// recursing without end.
	o.memo[r] = r
	if gvk, ok := intermediate[r.Kind]; ok {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		if err := o.Reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, obj); err == nil {
			if owner := metav1.GetControllerOfNoCopy(obj); owner != nil {
				t = o.top(ctx, Ref{Namespace: r.Namespace, Kind: owner.Kind, Name: owner.Name})
			}
		}
	}
	o.memo[r] = t
	return t
}

// Reset forgets memoised lookups (call once per cycle).
func (o *Owners) Reset() { o.memo = nil }
