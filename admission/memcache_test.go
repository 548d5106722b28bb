package admission

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// memCache is a client.Reader over client-go indexers, the way controller-runtime's
// informer cache reads (Get by namespace/name key, List through a namespaced field
// index, deep copy of each returned object), without informers. It stands in for the
// cache in benchmarks: the fake client lists every object and converts through the
// scheme, which the real cache does not.
type memCache struct {
	stores map[string]toolscache.Indexer
}

const fieldIndexPrefix = "field:" + TargetIndexField

func newMemCache(objs ...client.Object) *memCache {
	c := &memCache{stores: map[string]toolscache.Indexer{}}
	for _, o := range objs {
		kind := kindOf(o)
		s := c.stores[kind]
		if s == nil {
			idx := toolscache.Indexers{}
			if kind == "GPUFractionAutoscaler" {
				idx[fieldIndexPrefix] = func(obj any) ([]string, error) {
					a := obj.(*gpufracv1.GPUFractionAutoscaler)
					var out []string
					for _, v := range IndexAutoscalerTarget(a) {
						out = append(out, a.Namespace+"/"+v)
					}
					return out, nil
				}
			}
			s = toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, idx)
			c.stores[kind] = s
		}
		if kind == "ReplicaSet" || kind == "Job" { // metadata-only informers
			pm := &metav1.PartialObjectMetadata{ObjectMeta: *o.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta)}
			_ = s.Add(pm)
			continue
		}
		_ = s.Add(o)
	}
	return c
}

func kindOf(o client.Object) string {
	switch v := o.(type) {
	case *gpufracv1.GPUFractionAutoscaler:
		return "GPUFractionAutoscaler"
	case *gpufracv1.GPUFractionRecommendation:
		return "GPUFractionRecommendation"
	case *metav1.PartialObjectMetadata:
		return v.Kind
	default:
		t := fmt.Sprintf("%T", o)
		for i := len(t) - 1; i >= 0; i-- {
			if t[i] == '.' {
				return t[i+1:]
			}
		}
		return t
	}
}

func (c *memCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	s := c.stores[kindOf(obj)]
	var item any
	var ok bool
	if s != nil {
		item, ok, _ = s.GetByKey(key.Namespace + "/" + key.Name)
	}
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: kindOf(obj)}, key.Name)
	}
	switch o := obj.(type) {
	case *gpufracv1.GPUFractionRecommendation:
		item.(*gpufracv1.GPUFractionRecommendation).DeepCopyInto(o)
	case *gpufracv1.GPUFractionAutoscaler:
		item.(*gpufracv1.GPUFractionAutoscaler).DeepCopyInto(o)
	case *metav1.PartialObjectMetadata:
		gvk := o.GroupVersionKind()
		item.(*metav1.PartialObjectMetadata).DeepCopyInto(o)
		o.SetGroupVersionKind(gvk)
	default:
		return fmt.Errorf("memCache: unsupported %T", obj)
	}
	return nil
}

func (c *memCache) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l, ok := list.(*gpufracv1.GPUFractionAutoscalerList)
	if !ok {
		return fmt.Errorf("memCache: unsupported %T", list)
	}
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	s := c.stores["GPUFractionAutoscaler"]
	if s == nil {
		return nil
	}
	var items []any
	if o.FieldSelector != nil {
		v, _ := o.FieldSelector.RequiresExactMatch(TargetIndexField)
		items, _ = s.ByIndex(fieldIndexPrefix, o.Namespace+"/"+v)
	} else {
		items = s.List()
	}
	l.Items = l.Items[:0]
	for _, it := range items {
		l.Items = append(l.Items, *it.(*gpufracv1.GPUFractionAutoscaler).DeepCopy())
	}
	return nil
}
