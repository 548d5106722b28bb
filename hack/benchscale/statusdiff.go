package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

// statusKinds are the objects whose status the recommender writes.
var statusKinds = []schema.GroupVersionKind{
	{Group: "autoscaling.gpufrac.io", Version: "v1alpha1", Kind: "GPUFractionRecommendationList"},
	{Group: "autoscaling.gpufrac.io", Version: "v1alpha1", Kind: "GPUFractionAutoscalerList"},
}

// statuses maps "Kind namespace/name" to each status field's JSON: top-level fields
// by name, conditions by type ("conditions[RecommendationProvided]"), without the
// conditions' lastTransitionTime (it only moves with the status).
type statuses map[string]map[string]string

// readStatuses lists the statuses of the recommender's objects in namespaces.
func readStatuses(ctx context.Context, c *framework.Cluster, namespaces []string) (statuses, error) {
	out := statuses{}
	for _, gvk := range statusKinds {
		for _, ns := range namespaces {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(gvk)
			if err := c.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
				return nil, err
			}
			for _, u := range l.Items {
				fields := map[string]string{}
				st, _, _ := unstructured.NestedMap(u.Object, "status")
				for k, v := range st {
					if k != "conditions" {
						b, _ := json.Marshal(v)
						fields[k] = string(b)
						continue
					}
					conds, _ := v.([]any)
					for _, cv := range conds {
						cm, _ := cv.(map[string]any)
						delete(cm, "lastTransitionTime")
						b, _ := json.Marshal(cm)
						fields[fmt.Sprintf("conditions[%v]", cm["type"])] = string(b)
					}
				}
				out[strings.TrimSuffix(gvk.Kind, "List")+" "+u.GetNamespace()+"/"+u.GetName()] = fields
			}
		}
	}
	return out, nil
}

// statusChange is what changed between two readings.
type statusChange struct {
	// Objects whose status changed.
	Objects int
	// Fields counts the changed fields over all objects ("Kind field").
	Fields map[string]int
	// Examples holds, per changed field, one object's key and the field's JSON before
	// and after, for the log.
	Examples map[string][3]string
}

// diff returns what changed from a to b; an object only in b counts as changed.
func diff(a, b statuses) statusChange {
	ch := statusChange{Fields: map[string]int{}, Examples: map[string][3]string{}}
	for key, fb := range b {
		kind, _, _ := strings.Cut(key, " ")
		fa := a[key]
		changed := false
		for _, f := range slices.Sorted(maps.Keys(fb)) {
			if fa[f] != fb[f] {
				ch.Fields[kind+" "+f]++
				if _, ok := ch.Examples[kind+" "+f]; !ok {
					ch.Examples[kind+" "+f] = [3]string{key, fa[f], fb[f]}
				}
				changed = true
			}
		}
		for f := range fa {
			if _, ok := fb[f]; !ok {
				ch.Fields[kind+" "+f]++
				changed = true
			}
		}
		if changed {
			ch.Objects++
		}
	}
	return ch
}

// String lists the changed fields, most frequent first.
func (ch statusChange) String() string {
	keys := slices.Collect(maps.Keys(ch.Fields))
	slices.SortFunc(keys, func(x, y string) int {
		if d := ch.Fields[y] - ch.Fields[x]; d != 0 {
			return d
		}
		return strings.Compare(x, y)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, ch.Fields[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
