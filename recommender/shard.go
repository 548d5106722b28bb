package recommender

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// Exclusive is true when this instance is the only one recommending under its name:
	// it runs its cycles as the leader of its name's Lease (cmd/recommender
	// --leader-elect). Only then is an autoscaler naming it in a namespace its selector
	// leaves out known to be kept current by nobody (notSelected): instances that share
	// a name without leader election (each with its own selector) may cover it, and
	// would otherwise mark each other's autoscalers every cycle.
	Exclusive bool
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
// learns which autoscaler won. It also returns the autoscalers that name this shard but
// whose namespace its selector leaves out (excluded: nobody recommends for them, see
// notSelected). It returns an error when the namespaces cannot be listed.
func (r *Recommender) ownedOnly(ctx context.Context, entries []*entry, byRef map[workload.Ref]*entry,
	targets map[string][]workload.Ref, seen map[history.WorkloadKey]bool) (kept, excluded []*entry, err error) {
	sh := r.Config.Shard
	nsLabels := map[string]labels.Set{}
	if sh.Namespaces != nil {
		var nss corev1.NamespaceList
		if err := r.Client.List(ctx, &nss); err != nil {
			return nil, nil, fmt.Errorf("listing namespaces for the shard's namespace selector: %w", err)
		}
		for _, ns := range nss.Items {
			nsLabels[ns.Name] = ns.Labels
		}
	}
	kept = entries[:0]
	for _, e := range entries {
		switch {
		case sh.Owns(e.gfa, nsLabels[e.gfa.Namespace]):
			kept = append(kept, e)
		case sh.Exclusive && e.gfa.Spec.RecommenderOf() == sh.name():
			e.foreign = true
			excluded = append(excluded, e)
		default:
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
	autoscalersNotSelected.Set(float64(len(excluded)))
	return kept, excluded, nil
}

// notSelected marks gfa, which names this shard but lies in a namespace its selector
// leaves out: no instance recommends for it, yet this shard's status Lease stays fresh,
// so the updater would go on applying a recommendation frozen since. It sets
// ConfigUnsupported True (ReasonNamespaceNotSelected) on the autoscaler and on its
// recommendation where one exists, whose values it leaves as they were (the updater
// then holds all but protective growth), with a Warning event when the condition
// changes. It returns the API error of a read or write.
func (r *Recommender) notSelected(ctx context.Context, gfa *gpufracv1.GPUFractionAutoscaler) error {
	msg := fmt.Sprintf("spec.recommenders names recommender %q, whose --shard-namespace-selector %q leaves namespace %s out: no recommender instance keeps this recommendation current (relabel the namespace, widen the selector, or name an instance that selects it); the updater changes pods only for protective growth meanwhile",
		r.Config.Shard.name(), r.Config.Shard.Namespaces, gfa.Namespace)
	cond := metav1.Condition{Type: gpufracv1.ConditionConfigUnsupported, Status: metav1.ConditionTrue,
		Reason: gpufracv1.ReasonNamespaceNotSelected, Message: msg, ObservedGeneration: gfa.Generation}
	r.eventOnChange(gfa.Status.Conditions, gfa, gpufracv1.ReasonNamespaceNotSelected, msg)
	var gfr gpufracv1.GPUFractionRecommendation
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: gfa.Namespace, Name: gfa.Name}, &gfr); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		base := gfr.DeepCopy()
		if meta.SetStatusCondition(&gfr.Status.Conditions, cond) {
			if err := r.Client.Status().Patch(ctx, &gfr, client.MergeFrom(base)); err != nil {
				return fmt.Errorf("updating GPUFractionRecommendation status: %w", err)
			}
		}
	}
	upd := gfa.DeepCopy()
	if meta.SetStatusCondition(&upd.Status.Conditions, cond) {
		if err := r.Client.Status().Patch(ctx, upd, client.MergeFrom(gfa)); err != nil {
			return fmt.Errorf("updating GPUFractionAutoscaler status: %w", err)
		}
	}
	return nil
}
