package recommender

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/workload"
)

// Shard says which autoscalers one recommender instance owns, for fleets beyond one
// process (VPA's spec.recommenders): those whose spec.recommenders names this
// instance (an autoscaler naming none belongs to gpufracv1.DefaultRecommenderName), and,
// with a namespace selector, only in the namespaces it matches. Each instance queries
// Prometheus only for its own workloads' namespaces and elects its own leader.
type Shard struct {
	// Name is this instance's --recommender-name; empty means
	// gpufracv1.DefaultRecommenderName.
	Name string
	// Namespaces, when not nil, limits the shard to namespaces whose labels match it.
	Namespaces labels.Selector
}

// name returns the shard's name with the default filled in.
func (s Shard) name() string {
	if s.Name == "" {
		return gpufracv1.DefaultRecommenderName
	}
	return s.Name
}

// Owns reports whether the shard owns gfa; nsLabels are the labels of gfa's namespace
// (read only when the shard has a namespace selector).
func (s Shard) Owns(gfa *gpufracv1.GPUFractionAutoscaler, nsLabels labels.Set) bool {
	if gfa.Spec.RecommenderOf() != s.name() {
		return false
	}
	return s.Namespaces == nil || s.Namespaces.Matches(nsLabels)
}

// ownedOnly keeps the entries of the autoscalers this shard owns, marks the others'
// foreign, and stops tracking (targets, seen) the workloads whose autoscaler in charge
// is foreign. Duplicate autoscalers were resolved over every shard's autoscalers (byRef),
// so two shards never both recommend for one workload, and a loser in this shard still
// learns which autoscaler won. It returns an error when the namespaces cannot be listed.
func (r *Recommender) ownedOnly(ctx context.Context, entries []*entry, byRef map[workload.Ref]*entry,
	targets map[string][]workload.Ref, seen map[history.WorkloadKey]bool) ([]*entry, error) {
	sh := r.Config.Shard
	nsLabels := map[string]labels.Set{}
	if sh.Namespaces != nil {
		var nss corev1.NamespaceList
		if err := r.Client.List(ctx, &nss); err != nil {
			return nil, fmt.Errorf("listing namespaces for the shard's namespace selector: %w", err)
		}
		for _, ns := range nss.Items {
			nsLabels[ns.Name] = ns.Labels
		}
	}
	kept := entries[:0]
	for _, e := range entries {
		if sh.Owns(e.gfa, nsLabels[e.gfa.Namespace]) {
			kept = append(kept, e)
		} else {
			e.foreign = true
		}
	}
	for ref, e := range byRef {
		if !e.foreign {
			continue
		}
		delete(seen, history.WorkloadKey(ref))
		refs := targets[ref.Namespace][:0]
		for _, t := range targets[ref.Namespace] {
			if t != ref {
				refs = append(refs, t)
			}
		}
		if targets[ref.Namespace] = refs; len(refs) == 0 {
			delete(targets, ref.Namespace)
		}
	}
	return kept, nil
}
