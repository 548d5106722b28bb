// Package served tells whether the API server serves a kind, so that a binary can keep
// running without an optional CRD (the GPUSharingPolicy CRD, for example): the
// recommender's optional controllers and the admission webhook's GPUSharingPolicy
// informer use it.
package served

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind reports whether mapper (normally the manager's RESTMapper, backed by discovery)
// maps gvk. A kind the mapper does not know (meta.IsNoMatchError: its CRD is not
// installed) is false without error. Errors: any other mapping error, naming the kind;
// whether the kind is served is then unknown, and callers fail rather than run without
// it for the life of the process.
func Kind(mapper meta.RESTMapper, gvk schema.GroupVersionKind) (bool, error) {
	if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		if meta.IsNoMatchError(err) {
			return false, nil
		}
		return false, fmt.Errorf("is %s served: %w", gvk, err)
	}
	return true, nil
}
