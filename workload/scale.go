package workload

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/scale"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewScaleChecker returns a ScaleChecker that maps a kind through the RESTMapper, reads
// the object's metadata and then its scale subresource. Errors wrap ErrUnsupported (kind
// unknown to the API server, or no scale subresource) or ErrNotFound (no such object).
func NewScaleChecker(c client.Reader, mapper meta.RESTMapper, scales scale.ScalesGetter) ScaleChecker {
	return func(ctx context.Context, namespace string, gvk schema.GroupVersionKind, name string) error {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%w: kind %s is not served by the API server: %v", ErrUnsupported, gvk, err)
		}
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: %s %s/%s does not exist", ErrNotFound, gvk.Kind, namespace, name)
			}
			return err
		}
		if _, err := scales.Scales(namespace).Get(ctx, m.Resource.GroupResource(), name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				return fmt.Errorf("%w: %s has no scale subresource to resolve its pods from", ErrUnsupported, gvk.Kind)
			}
			return err
		}
		return nil
	}
}
